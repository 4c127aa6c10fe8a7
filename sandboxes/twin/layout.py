"""Lay out the twin's filesystem tree for one scenario and one engine front under a root directory (build.sh).

sglang's front (the default):
  ROOT/sgl-workspace/twin     the engine source (the `twin` package) with the scenario's patches applied
vLLM's front, installed as vLLM is in vllm/vllm-openai-rocm (a wheel in the system Python 3.12's dist-packages, a
`vllm` console script; the facts and their sources: README.md, "The vLLM front"):
  ROOT/usr/local/lib/python3.12/dist-packages/vllm   the front (fronts/vllm) with the same engine as vllm/twin
  ROOT/usr/local/lib/python3.12/dist-packages/vllm-0.25.1.dist-info, ROOT/usr/local/bin/vllm
  ROOT/usr/local/lib/python3.11/dist-packages/twin-vllm.pth  puts that directory on porter-base's Python 3.11 path
Either tree is made a git repo with one commit by "twin upstream" at a fixed date (so the commit id is stable);
patches name files relative to it (`twin/attention.py`), so a scenario's patches apply under either front.
ROOT/models/<family dir>    the scenario's family's checkpoint (make_checkpoint.py, families/)
ROOT/opt/rocm               the ROCm-like toolchain (hipcc wrapper, HIP headers)
A scenario is scenarios/NAME/scenario.json: {"description", "family", "fixes": [names from fixes/], "patches"};
the fixes are applied first, then the scenario's own patches; a patch whose files are all in the checkpoint
(config.json, ...) applies to the checkpoint, others to the engine. The format is documented in SCENARIOS.md.
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
sys.path.insert(0, str(HERE))
from families import DEFAULT as DEFAULT_FAMILY  # noqa: E402
from families import family  # noqa: E402

DEFAULT_SCENARIO = "glm52-day0"
FRONTS = ("sglang", "vllm")
# vLLM's ROCm image installs its wheel into Python 3.12's dist-packages (docker/Dockerfile.rocm, Dockerfile.rocm_base
# PYTHON_VERSION=3.12); the twin keeps that path, and a .pth file of porter-base's Python (3.11, Debian bookworm)
# puts the directory on its path
SITE_PACKAGES = "usr/local/lib/python3.12/dist-packages"
BASE_SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"
VLLM_VERSION = "0.25.1"  # the version whose CLI and wording the front follows
COMMIT_DATE = "2026-07-14T09:00:00+00:00"
UPSTREAM = {
    "GIT_AUTHOR_NAME": "twin upstream",
    "GIT_AUTHOR_EMAIL": "upstream@twin.invalid",
    "GIT_COMMITTER_NAME": "twin upstream",
    "GIT_COMMITTER_EMAIL": "upstream@twin.invalid",
    "GIT_AUTHOR_DATE": COMMIT_DATE,
    "GIT_COMMITTER_DATE": COMMIT_DATE,
}
CONSOLE_SCRIPT = """#!/usr/bin/python3
# -*- coding: utf-8 -*-
import re
import sys
from vllm.entrypoints.cli.main import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""


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


def model_dir(name: str) -> str:
    """Where the scenario's checkpoint is in the image: /models/<its family's directory>."""
    return f"/models/{family(scenario_spec(name).get('family', DEFAULT_FAMILY)).MODEL_DIR}"


def repo_dir(front: str) -> str:
    """Where the engine's git repo is in the image of a front."""
    return "/sgl-workspace/twin" if front == "sglang" else f"/{SITE_PACKAGES}/vllm"


def _patch_files(name: str) -> list[Path]:
    spec = scenario_spec(name)
    files = [HERE / "fixes" / f"{fix}.patch" for fix in spec["fixes"]]
    return files + [HERE / "scenarios" / name / patch for patch in spec["patches"]]


def content_hash(name: str, front: str = "sglang") -> str:
    digest = hashlib.sha256(f"{name}|{front}".encode())
    sources = [HERE / "engine", HERE / "rocm", HERE / "families", HERE / "make_checkpoint.py", HERE / "layout.py"]
    sources += [HERE / "Dockerfile"] + ([HERE / "fronts" / "vllm"] if front == "vllm" else [])
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


def _copy_engine(root: Path, front: str) -> Path:
    """The engine's tree for the front: sglang's is the engine folder itself, vLLM's is its package with the
    engine inside; vLLM's dist-info and console script sit beside it, outside the repo."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    tree = root / repo_dir(front).lstrip("/")
    if tree.exists():
        shutil.rmtree(tree)
    if front == "sglang":
        shutil.copytree(HERE / "engine", tree, ignore=ignore)
        return tree
    shutil.copytree(HERE / "fronts" / "vllm", tree, ignore=ignore)
    shutil.copytree(HERE / "engine" / "twin", tree / "twin", ignore=ignore)
    info = tree.parent / f"vllm-{VLLM_VERSION}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}\n")
    (info / "entry_points.txt").write_text("[console_scripts]\nvllm = vllm.entrypoints.cli.main:main\n")
    (info / "top_level.txt").write_text("vllm\n")
    base_site = root / BASE_SITE_PACKAGES
    base_site.mkdir(parents=True, exist_ok=True)
    (base_site / "twin-vllm.pth").write_text(f"/{SITE_PACKAGES}\n")
    script = root / "usr" / "local" / "bin" / "vllm"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(CONSOLE_SCRIPT)
    script.chmod(0o755)
    return tree


def lay_out(root: Path, name: str, front: str = "sglang") -> None:
    if front not in FRONTS:
        raise SystemExit(f"unknown front {front!r}; known fronts: {', '.join(FRONTS)}")
    tree = _copy_engine(root, front)
    family_name = scenario_spec(name).get("family", DEFAULT_FAMILY)
    model = root / model_dir(name).lstrip("/")
    command = [sys.executable, str(HERE / "make_checkpoint.py"), str(model), "--family", family_name]
    subprocess.run(command, check=True, capture_output=True)
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
    parser.add_argument("--front", default="sglang", choices=FRONTS)
    parser.add_argument("--hash", action="store_true", help="print the content hash and exit")
    parser.add_argument("--workdir", action="store_true", help="print the front's engine repo path and exit")
    args = parser.parse_args()
    if args.hash:
        print(content_hash(args.scenario, args.front))
        return
    if args.workdir:
        print(repo_dir(args.front))
        return
    if args.root is None:
        parser.error("a root directory is required unless --hash or --workdir is given")
    lay_out(args.root.resolve(), args.scenario, args.front)
    print(f"laid out scenario {args.scenario} ({args.front} front) under {args.root}")


if __name__ == "__main__":
    main()
