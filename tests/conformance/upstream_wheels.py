"""The pinned upstream wheels the conformance tests read, and how a test runs one upstream function alone.

Covers fetching the wheels named in requirements.lock (next to this file) with pip, hashes required, into one cache
folder per machine (PORTER_CONFORMANCE_CACHE, default ~/.cache/porter/conformance) under a file lock, so parallel
test workers download once; reading a file out of a wheel; and lifting named top-level functions and assignments out
of an upstream module with ast, to run them with only the imports they need (importing sglang or vLLM whole would
pull torch and a GPU stack). A wheel that cannot be fetched fails the test with pip's own words: these tests never
skip. Does not cover what the tests assert.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

# scripts/conformance.sh newest points this at a lock of the newest releases, written into its own cache folder
LOCK_FILE = Path(os.environ.get("PORTER_CONFORMANCE_LOCK") or Path(__file__).with_name("requirements.lock"))
FETCH_TIMEOUT_S = 600


def cache_dir() -> Path:
    return Path(os.environ.get("PORTER_CONFORMANCE_CACHE") or Path.home() / ".cache" / "porter" / "conformance")


def pinned() -> dict[str, tuple[str, str]]:
    """name -> (version, sha256) as requirements.lock pins them."""
    text = LOCK_FILE.read_text().replace("\\\n", " ")
    pins = {}
    for line in text.splitlines():
        match = re.match(r"\s*([A-Za-z0-9_.-]+)==(\S+)\s+--hash=sha256:([0-9a-f]{64})", line)
        if match:
            pins[match[1].lower().replace("_", "-")] = (match[2], match[3])
    return pins


def fetch() -> dict[str, Path]:
    """name -> the pinned wheel on disk, downloaded on first use; each file's sha256 is checked against the lock."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wheels = _find(folder)
        if set(wheels) != set(pinned()):
            _download(folder)
            wheels = _find(folder)
        missing = sorted(set(pinned()) - set(wheels))
        if missing:
            pytest.fail(f"pip downloaded no wheel for {missing} into {folder}; see requirements.lock")
        for name, (_, digest) in pinned().items():
            if hashlib.sha256(wheels[name].read_bytes()).hexdigest() != digest:
                wheels[name].unlink()
                pytest.fail(f"{wheels[name].name} does not match its pinned sha256; removed it, run again")
    return wheels


def _find(folder: Path) -> dict[str, Path]:
    found = {}
    for name, (version, _) in pinned().items():
        stem = name.replace("-", "_")
        for path in folder.glob(f"{stem}-{version}-*.whl"):
            found[name] = path
    return found


def _download(folder: Path) -> None:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--require-hashes"]
    command += ["--disable-pip-version-check", "-r", str(LOCK_FILE), "-d", str(folder)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"pip download of the pinned upstream wheels took over {FETCH_TIMEOUT_S} s")
    if result.returncode != 0:
        pytest.fail(f"pip could not fetch the pinned upstream wheels:\n{(result.stdout + result.stderr)[-3000:]}")


def read_source(wheel: Path, member: str) -> str:
    """The text of one file inside a wheel, e.g. `sglang/srt/layers/quantization/quark/utils.py`."""
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(member).decode("utf-8")


def wheel_members(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def lift(source: str, names: list[str], namespace: dict, filename: str) -> dict:
    """Run only the named top-level functions and assignments of `source` in `namespace` (which supplies the
    imports they use) and return it. A name missing upstream fails: the fact moved and the test must be reread."""
    tree = ast.parse(source, filename=filename)
    chosen = [node for node in tree.body if _defines(node) & set(names)]
    found = set().union(*(_defines(node) for node in chosen)) if chosen else set()
    if set(names) - found:
        pytest.fail(f"{filename} no longer defines {sorted(set(names) - found)}: reread upstream and update the test")
    exec(compile(ast.Module(body=chosen, type_ignores=[]), filename, "exec"), namespace)
    return namespace


def _defines(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {target.id for target in node.targets if isinstance(target, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


def unpacked(wheel: Path) -> Path:
    """The wheel's files, unpacked once into the cache (a folder to put on sys.path)."""
    target = cache_dir() / f"unpacked-{wheel.stem}"
    if not (target / ".complete").exists():
        with open(cache_dir() / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (target / ".complete").exists():
                with zipfile.ZipFile(wheel) as archive:
                    archive.extractall(target)
                (target / ".complete").touch()
    return target


def import_from_wheel(wheel: Path, module: str):
    """Import a top-level module from a wheel unpacked into the cache (for a dependency upstream code imports,
    such as vLLM's `regex`); a module of that name already imported in this process is used as it is."""
    target = unpacked(wheel)
    if module not in sys.modules:
        sys.path.insert(0, str(target))
        try:
            __import__(module)
        finally:
            sys.path.remove(str(target))
    return sys.modules[module]


def lift_methods(source: str, class_name: str, names: list[str], namespace: dict, filename: str) -> type:
    """A stand-in class holding only the named methods and class attributes of upstream's `class_name` (its bases
    pull torch), to run upstream's own method code on plain objects."""
    tree = ast.parse(source, filename=filename)
    found = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name]
    if not found:
        pytest.fail(f"{filename} no longer defines {class_name}: reread upstream and update the test")
    members = [node for node in found[0].body if _defines(node) & set(names)]
    missing = set(names) - set().union(*(_defines(node) for node in members))
    if missing:
        pytest.fail(f"{filename}: {class_name} no longer defines {sorted(missing)}: reread upstream")
    stand_in = ast.ClassDef(name=class_name, bases=[], keywords=[], body=members, decorator_list=[], type_params=[])
    module = ast.fix_missing_locations(ast.Module(body=[stand_in], type_ignores=[]))
    exec(compile(module, filename, "exec"), namespace)
    return namespace[class_name]
