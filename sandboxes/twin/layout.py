"""Lay out the twin's filesystem tree for one scenario under a root directory (used by build.sh).

ROOT/sgl-workspace/twin   the engine source with the scenario's patches applied, made a git repo with
                          one commit by "twin upstream" at a fixed date (so the commit id is stable)
ROOT/models/glm-5.2-mxfp4 the generated checkpoint
ROOT/opt/rocm             the ROCm-like toolchain (hipcc wrapper, HIP headers)
A scenario is scenarios/NAME/scenario.json: {"description", "fixes": [names from fixes/], "patches": [...]};
the fixes are applied first (the flagship's day-0 defects already repaired), then the scenario's own patches;
a patch whose files are all in the checkpoint (config.json, ...) applies to the checkpoint, others to the engine.
The format is documented in SCENARIOS.md.
Also prints a content hash of everything that goes into the tree (build.sh labels images with it).
Does not cover Docker (build.sh, Dockerfile).
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_SCENARIO = "glm52-day0"
COMMIT_DATE = "2026-07-14T09:00:00+00:00"
UPSTREAM = {
    "GIT_AUTHOR_NAME": "twin upstream",
    "GIT_AUTHOR_EMAIL": "upstream@twin.invalid",
    "GIT_COMMITTER_NAME": "twin upstream",
    "GIT_COMMITTER_EMAIL": "upstream@twin.invalid",
    "GIT_AUTHOR_DATE": COMMIT_DATE,
    "GIT_COMMITTER_DATE": COMMIT_DATE,
}


def scenario_spec(name: str) -> dict:
    if name == DEFAULT_SCENARIO:
        return {
            "description": "GLM-5.2 day 0: defects a (MTP exclude), b (unguarded CUDA header), c (untuned MoE)",
            "fixes": [],
            "patches": [],
        }
    path = HERE / "scenarios" / name / "scenario.json"
    if not path.exists():
        known = sorted([DEFAULT_SCENARIO] + [p.name for p in (HERE / "scenarios").iterdir() if p.is_dir()])
        raise SystemExit(f"unknown scenario {name!r}; known scenarios: {', '.join(known)}")
    return json.loads(path.read_text())


def _patch_files(name: str) -> list[Path]:
    spec = scenario_spec(name)
    files = [HERE / "fixes" / f"{fix}.patch" for fix in spec["fixes"]]
    return files + [HERE / "scenarios" / name / patch for patch in spec["patches"]]


def content_hash(name: str) -> str:
    digest = hashlib.sha256(name.encode())
    sources = [HERE / "engine", HERE / "rocm", HERE / "make_checkpoint.py", HERE / "layout.py", HERE / "Dockerfile"]
    for source in sources:
        files = (
            sorted(p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
            if source.is_dir()
            else [source]
        )
        for file in files:
            digest.update(str(file.relative_to(HERE)).encode() + file.read_bytes())
    for patch in _patch_files(name):
        digest.update(patch.read_bytes())
    return digest.hexdigest()[:16]


def _touches_only(patch: Path, directory: Path) -> bool:
    """Whether every file the patch changes exists under `directory` (the checkpoint's config.json, ...)."""
    paths = re.findall(r"^diff --git a/(\S+) ", patch.read_text(), flags=re.MULTILINE)
    return bool(paths) and all((directory / path).is_file() for path in paths)


def _git(tree: Path, *args: str) -> None:
    environment = {**os.environ, **UPSTREAM}
    subprocess.run(["git", *args], cwd=tree, env=environment, check=True, capture_output=True, text=True)


def lay_out(root: Path, name: str) -> None:
    tree = root / "sgl-workspace" / "twin"
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(HERE / "engine", tree, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    model = root / "models" / "glm-5.2-mxfp4"
    subprocess.run([sys.executable, str(HERE / "make_checkpoint.py"), str(model)], check=True, capture_output=True)
    for patch in _patch_files(name):
        target = model if _touches_only(patch, model) else tree
        result = subprocess.run(["git", "apply", str(patch)], cwd=target, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"scenario {name}: {patch.name} does not apply: {result.stderr.strip()}")
    _git(tree, "init", "-q", "-b", "main")
    _git(tree, "add", "-A")
    _git(tree, "-c", "user.useConfigOnly=false", "commit", "-q", "-m", "twin: upstream snapshot")
    rocm = root / "opt" / "rocm"
    if rocm.exists():
        shutil.rmtree(rocm)
    shutil.copytree(HERE / "rocm", rocm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, nargs="?")
    parser.add_argument("--scenario", default=DEFAULT_SCENARIO)
    parser.add_argument("--hash", action="store_true", help="print the content hash and exit")
    args = parser.parse_args()
    if args.hash:
        print(content_hash(args.scenario))
        return
    if args.root is None:
        parser.error("a root directory is required unless --hash is given")
    lay_out(args.root.resolve(), args.scenario)
    print(f"laid out scenario {args.scenario} under {args.root}")


if __name__ == "__main__":
    main()
