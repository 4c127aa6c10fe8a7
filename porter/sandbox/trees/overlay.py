"""The model overlay: the checkpoint's small files as a patchable git tree, the weights linked read-only.

Day-0 fixes often live in the checkpoint (a quantization exclude list in `config.json`, a chat template,
the `*.py` of a trust-remote-code model), so porter gives the agent the checkpoint as one more repo, named
`model`: every small file is copied into `<run>/repos/model` (docker) or the local root, committed as a
baseline, and mounted at the model's container path; every weight file becomes a symbolic link to the
original, which is mounted read-only (docker: at WEIGHTS_MOUNT) or stays where the image has it. The links
are excluded from git, so patches, `git am` series and PR drafts hold only the small files.

Covers deciding what is a weight, building the tree from a host directory or from a tar stream of the
image's directory, and its git baseline. Does not cover mounting (sandbox/docker_options.py), tracking
commits (repos.py) or the PR text (pr.py).
"""

from __future__ import annotations

import os
import shutil
import tarfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from porter.sandbox.interface import SandboxError
from porter.sandbox.trees import safe_git
from porter.sandbox.trees.baseline import ensure_baseline, extract_tree

# Where a docker sandbox sees the host weight directory (read-only); the overlay's links point into it.
WEIGHTS_MOUNT = "/porter/weights"
# Tensor files by extension, whatever their size; anything else larger than the limit is data too
# (a tokenizer.json of 20 MB stays patchable, a 300 MB vocabulary blob does not).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt", ".h5", ".msgpack", ".onnx", ".npz")
SMALL_FILE_LIMIT = 64 << 20


def is_weight(relative_path: str, size: int) -> bool:
    return relative_path.lower().endswith(WEIGHT_SUFFIXES) or size > SMALL_FILE_LIMIT


def build_from_dir(source: Path, destination: Path, link_base: str) -> list[str]:
    """Copy `source`'s small files into `destination`, link its weights to `link_base`/<same path>.

    Symbolic links in `source` are followed where they stay in its folder, or, for a hub cache snapshot, in the
    cache's `blobs/` (huggingface_hub links `<cache>/snapshots/REV/FILE` to `<cache>/blobs/HASH`); a link elsewhere
    (`/etc/passwd`, the home folder) is refused: a checkpoint is data, never a way into the host's files.
    Returns the linked (weight) paths, relative to the tree.
    """
    source = Path(source)
    if not (source / "config.json").is_file():
        raise SandboxError(
            f"model.path {source}: no config.json there; point model.path at the checkpoint's directory "
            f"(e.g. `huggingface-cli download ORG/NAME --local-dir {source}`)"
        )
    partial = destination.with_name(f".{destination.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    weights: list[str] = []
    resolved = Path(os.path.realpath(source))
    roots = [resolved, resolved.parent.parent / "blobs"] if resolved.parent.name == "snapshots" else [resolved]
    seen: set[Path] = set()
    for folder, directories, files in os.walk(source, followlinks=True):
        real = _confined(Path(folder), source, roots)
        if real in seen:  # a link to a folder already walked (a loop): not walked again
            directories[:] = []
            continue
        seen.add(real)
        directories[:] = sorted(d for d in directories if not d.startswith("."))
        for name in sorted(files):
            file = Path(folder) / name
            _confined(file, source, roots)
            relative = file.relative_to(source).as_posix()
            if is_weight(relative, file.stat().st_size):
                weights.append(relative)
                continue
            (partial / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, partial / relative)
    partial.mkdir(parents=True, exist_ok=True)
    _finish(partial, weights, link_base)
    partial.rename(destination)
    return weights


def _confined(path: Path, source: Path, roots: list[Path]) -> Path:
    """`path` resolved, when it stays under one of `roots`; else one line naming it inside the checkpoint."""
    real = Path(os.path.realpath(path))
    if not any(real == root or root in real.parents for root in roots):
        raise SandboxError(
            f"model.path: {path.relative_to(source).as_posix()!r} is a link out of the checkpoint's folder; porter "
            "does not follow it (replace the link with the file itself)"
        )
    return real


def build_from_tar(chunks: Iterable[bytes], destination: Path, link_base: str) -> None:
    """The same tree from a tar stream of the checkpoint directory (docker's get_archive of the image's copy)."""
    weights: list[str] = []

    def skip_weights(member: tarfile.TarInfo) -> bool:
        relative = PurePosixPath(*PurePosixPath(member.name).parts[1:]).as_posix()
        if member.isfile() and is_weight(relative, member.size):
            weights.append(relative)
            return True
        return False

    extract_tree(chunks, destination, skip=skip_weights)
    if not (destination / "config.json").is_file():
        shutil.rmtree(destination, ignore_errors=True)
        raise SandboxError(f"model.path {link_base}: no config.json in the image's checkpoint directory")
    _finish(destination, weights, link_base)


def _finish(tree: Path, weights: list[str], link_base: str) -> None:
    """Link the weights, keep the links out of git, and commit the small files as the baseline."""
    for relative in weights:
        link = tree / relative
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(f"{link_base.rstrip('/')}/{relative}")
    if not (tree / ".git").exists():
        safe_git.init_repo(tree)
    exclude = tree / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# porter: weight files are links to the read-only checkpoint, never part of a patch"]
    lines += ["/" + _escape_glob(relative) for relative in weights]
    exclude.write_text("\n".join(lines) + "\n")
    ensure_baseline(tree)


def _escape_glob(path: str) -> str:
    return "".join("\\" + char if char in "*?[\\!#" else char for char in path)
