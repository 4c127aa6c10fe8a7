"""Where `porter init` reads a checkpoint's config.json and weight index: a local folder, or the hub.

Covers the files init reads (config.json, and model.safetensors.index.json and ModelOpt's hf_quant_config.json
when there are) from a local checkpoint directory or from a hub repository id (`org/name`, optionally `@revision`)
through huggingface_hub's hf_hub_download (HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE as the library reads them; the
token goes to the hub's origin only, never after a redirect off it), into a temporary cache removed after reading.
Its errors become one line each: a file the repo lacks is none, a gated or missing repo and an unreachable hub say
what to do (the offline ones name HF_ENDPOINT for a mirror). Every file is bounded in size, a hub file before it is
downloaded. Does not read what the files say (checkpoint_facts.py).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import constants, hf_hub_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import logging as hub_logging
from huggingface_hub.utils import validate_repo_id

CONFIG, INDEX, QUANT = "config.json", "model.safetensors.index.json", "hf_quant_config.json"
# A config.json is kilobytes; an index lists every tensor once (a 1T-parameter MoE's is a few MB); ModelOpt's
# hf_quant_config.json lists a mixed-precision checkpoint's modules once.
MAX_FILE_BYTES = {CONFIG: 4 << 20, INDEX: 64 << 20, QUANT: 16 << 20}


class CheckpointError(Exception):
    """A checkpoint init cannot read; the message is one line saying why and what to do."""


@dataclass
class CheckpointFiles:
    """What init reads of a checkpoint, and where it came from."""

    source: str  # the folder, or the hub URL of the repository
    config: dict
    index: dict | None  # None: the checkpoint has no weight index (a single-file checkpoint, or none published)
    quant: dict | None  # ModelOpt's hf_quant_config.json, when the checkpoint has one
    model_id: str  # the hub id, or the folder's name for a local checkpoint
    local: bool


def read_checkpoint(reference: str) -> CheckpointFiles:
    """A local checkpoint directory, or a hub id (`org/name[@revision]`) when no such directory exists."""
    path = Path(reference).expanduser()
    if path.is_dir():
        return _read_local(path)
    repo, _, revision = reference.partition("@")
    if not path.exists() and path.parent != Path(".") and path.parent.is_dir():
        raise CheckpointError(f"{reference}: no such checkpoint directory ({path.parent} exists, {path.name} does not)")
    try:
        validate_repo_id(repo)  # the hub's own rule: no `..` or `--`, no empty part, at most org/name
    except HFValidationError:
        raise CheckpointError(
            f"{reference}: neither a checkpoint directory nor a hub repository id (org/name, optionally @revision)"
        ) from None
    return _read_hub(repo, revision or "main")


def _read_local(folder: Path) -> CheckpointFiles:
    config_path = folder / CONFIG
    if not config_path.is_file():
        raise CheckpointError(f"{folder}: no {CONFIG} in this directory; point init at the checkpoint's folder")
    config = _parse(_read_bounded(config_path, folder), str(config_path))
    index, quant = (_parse(_read_bounded(folder / name, folder), str(folder / name)) if (folder / name).is_file()
                    else None for name in (INDEX, QUANT))  # fmt: skip
    return CheckpointFiles(str(folder.resolve()), config, index, quant, folder.resolve().name, local=True)


def _read_bounded(path: Path, folder: Path) -> bytes:
    """At most the file's cap, read from inside `folder` (a symlink out of it, to /etc or /dev/zero, is refused)."""
    limit = MAX_FILE_BYTES[path.name]
    if not path.resolve().is_relative_to(folder.resolve()):
        raise CheckpointError(f"{path}: a link out of the checkpoint's folder; init reads only the folder's own files")
    with path.open("rb") as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise CheckpointError(f"{path}: larger than {limit >> 20} MiB, which no {path.name} is")
    return data


def _parse(raw: bytes, where: str) -> dict:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{where}: not JSON ({str(exc)[:200]})") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def _read_hub(repo: str, revision: str) -> CheckpointFiles:
    where = f"{constants.ENDPOINT}/{repo}"
    if constants.HF_HUB_OFFLINE:
        raise CheckpointError(
            f"HF_HUB_OFFLINE is set, so {repo} cannot be fetched: pass a local checkpoint directory, or unset it "
            "(HF_ENDPOINT points porter at a mirror of the hub)"
        )
    hub_logging.set_verbosity_error()  # its retries' warnings would break the one line an unreachable hub gets
    with tempfile.TemporaryDirectory(prefix="porter-init-") as cache:
        files = [_fetch(repo, revision, name, cache) for name in (CONFIG, INDEX, QUANT)]
    if files[0] is None:
        raise CheckpointError(f"{where}: the repository has no {CONFIG} at revision {revision}")
    config, index, quant = (_parse(raw, f"{repo}/{name}") if raw is not None else None
                            for raw, name in zip(files, (CONFIG, INDEX, QUANT), strict=True))  # fmt: skip
    return CheckpointFiles(where, config, index, quant, repo, local=False)


def _fetch(repo: str, revision: str, name: str, cache: str) -> bytes | None:
    """The file's bytes, None when the hub says the repository has no such file; else a CheckpointError."""
    limit = MAX_FILE_BYTES[name]
    try:
        info = hf_hub_download(repo, name, revision=revision, cache_dir=cache, dry_run=True)
        if info.file_size is not None and info.file_size > limit:
            raise CheckpointError(f"{repo}/{name}: {info.file_size} bytes, larger than {limit >> 20} MiB, which no "
                                  f"{name} is")  # fmt: skip
        return _read_bounded(Path(hf_hub_download(repo, name, revision=revision, cache_dir=cache)), Path(cache))
    except RemoteEntryNotFoundError:
        return None
    except GatedRepoError:
        raise CheckpointError(
            f"{repo} is gated: accept its terms on the hub with your account and export HF_TOKEN"
        ) from None
    except RepositoryNotFoundError:
        raise CheckpointError(f"{repo}: no such repository, or a private one HF_TOKEN cannot read") from None
    except RevisionNotFoundError:
        raise CheckpointError(f"{repo}: no revision {revision!r}") from None
    except HfHubHTTPError as exc:
        raise CheckpointError(f"{repo}/{name}: {str(exc).splitlines()[0][:200]!r}") from None  # the hub's words as data
    except (LocalEntryNotFoundError, OSError) as exc:
        raise CheckpointError(
            f"cannot reach {constants.ENDPOINT} for {repo} ({type(exc).__name__}): offline? set HF_ENDPOINT to a "
            "mirror of the hub, or pass a local checkpoint directory"
        ) from None
