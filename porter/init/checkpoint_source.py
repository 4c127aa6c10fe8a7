"""Where `porter init` reads a checkpoint's config.json and weight index: a local folder, or the hub's file API.

Covers the files init reads (config.json, and model.safetensors.index.json and ModelOpt's hf_quant_config.json
when there are) from a local
checkpoint directory or from a hub repository id (`org/name`, optionally `@revision`), fetched from the hub's file
API as huggingface_hub's hf_hub_download asks for them: GET {HF_ENDPOINT}/{repo}/resolve/{revision}/{file}, redirects
followed, HF_TOKEN as a bearer token, a 404 with `X-Error-Code: EntryNotFound` meaning the file is not in the repo.
huggingface_hub is not in porter's lock, so this is the plain HTTP API with the standard library. HF_HUB_OFFLINE=1,
an unreachable hub and a refused repo are one clear line each (the offline ones name HF_ENDPOINT for a mirror).
Both files are bounded in size. Does not read what the files say (checkpoint_facts.py).
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

CONFIG, INDEX, QUANT = "config.json", "model.safetensors.index.json", "hf_quant_config.json"
# A config.json is kilobytes; an index lists every tensor once (a 1T-parameter MoE's is a few MB); ModelOpt's
# hf_quant_config.json lists a mixed-precision checkpoint's modules once.
MAX_FILE_BYTES = {CONFIG: 4 << 20, INDEX: 64 << 20, QUANT: 16 << 20}
HUB = "https://huggingface.co"
TIMEOUT_S = 30
# The hub's repo id rule (huggingface_hub utils/_validators.py validate_repo_id): each part of letters, digits, `-`,
# `_`, `.`; no `--` or `..`; not starting or ending with `-` or `.`.
REPO_PART = r"(?!.*(?:--|\.\.))[A-Za-z0-9_](?:[\w.-]{0,94}[A-Za-z0-9_])?"
REPO_ID = re.compile(rf"^{REPO_PART}/{REPO_PART}$")


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
    if not REPO_ID.match(repo):
        raise CheckpointError(
            f"{reference}: neither a checkpoint directory nor a hub repository id (org/name, optionally @revision)"
        )
    return _read_hub(repo, revision or "main")


def _read_local(folder: Path) -> CheckpointFiles:
    config_path = folder / CONFIG
    if not config_path.is_file():
        raise CheckpointError(f"{folder}: no {CONFIG} in this directory; point init at the checkpoint's folder")
    config = _parse(_read_bounded(config_path), str(config_path))
    index, quant = (_parse(_read_bounded(folder / name), str(folder / name)) if (folder / name).is_file() else None
                    for name in (INDEX, QUANT))  # fmt: skip
    return CheckpointFiles(str(folder.resolve()), config, index, quant, folder.resolve().name, local=True)


def _read_bounded(path: Path) -> bytes:
    limit = MAX_FILE_BYTES[path.name]
    if path.stat().st_size > limit:
        raise CheckpointError(f"{path}: larger than {limit >> 20} MiB, which no {path.name} is")
    return path.read_bytes()


def _parse(raw: bytes, where: str) -> dict:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{where}: not JSON ({str(exc)[:200]})") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or HUB).rstrip("/")


def _read_hub(repo: str, revision: str) -> CheckpointFiles:
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise CheckpointError(
            f"HF_HUB_OFFLINE is set, so {repo} cannot be fetched: pass a local checkpoint directory, or unset it "
            "(HF_ENDPOINT points porter at a mirror of the hub)"
        )
    config_raw = _fetch(repo, revision, CONFIG)
    if config_raw is None:
        raise CheckpointError(f"{hub_endpoint()}/{repo}: the repository has no {CONFIG} at revision {revision}")
    config = _parse(config_raw, f"{repo}/{CONFIG}")
    index, quant = (_parse(raw, f"{repo}/{name}") if (raw := _fetch(repo, revision, name)) is not None else None
                    for name in (INDEX, QUANT))  # fmt: skip
    return CheckpointFiles(f"{hub_endpoint()}/{repo}", config, index, quant, repo, local=False)


def _fetch(repo: str, revision: str, name: str) -> bytes | None:
    """The file's bytes, None when the hub says the repository has no such file; else a CheckpointError."""
    url = f"{hub_endpoint()}/{repo}/resolve/{urllib.parse.quote(revision, safe='')}/{name}"
    request = urllib.request.Request(url, headers={"User-Agent": "porter-init"})
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    limit = MAX_FILE_BYTES[name]
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            body = response.read(limit + 1)
    except urllib.error.HTTPError as exc:
        code = exc.headers.get("X-Error-Code", "") if exc.headers else ""
        if exc.code == 404 and code in ("EntryNotFound", ""):
            return None
        raise CheckpointError(_refusal(repo, url, exc.code, code)) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CheckpointError(
            f"cannot reach {hub_endpoint()} for {repo} ({reason}): offline? set HF_ENDPOINT to a mirror of the hub, "
            "or pass a local checkpoint directory"
        ) from None
    if len(body) > limit:
        raise CheckpointError(f"GET {url}: larger than {limit >> 20} MiB, which no {name} is")
    return body


def _refusal(repo: str, url: str, status: int, code: str) -> str:
    if code == "GatedRepo" or status == 403:
        return (
            f"{repo} is gated: accept its terms on the hub with your account and export HF_TOKEN (GET {url}: {status})"
        )
    if code == "RepoNotFound" or status in (401, 404):
        return f"{repo}: no such repository, or a private one HF_TOKEN cannot read (GET {url}: {status})"
    return f"GET {url}: HTTP {status}{f' ({code})' if code else ''}"
