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

REPO_LOCK = Path(__file__).with_name("requirements.lock")  # the releases the real tasks' images run
# scripts/conformance.sh newest points this at a lock of the newest releases, written into its own cache folder
LOCK_FILE = Path(os.environ.get("PORTER_CONFORMANCE_LOCK") or REPO_LOCK)
FETCH_TIMEOUT_S = 600


def cache_dir() -> Path:
    return Path(os.environ.get("PORTER_CONFORMANCE_CACHE") or Path.home() / ".cache" / "porter" / "conformance")


def pinned(lock: Path | None = None) -> dict[str, tuple[str, str]]:
    """name -> (version, sha256) as a lock (default: the one under test, LOCK_FILE) pins them."""
    text = (lock or LOCK_FILE).read_text().replace("\\\n", " ")
    pins = {}
    for line in text.splitlines():
        match = re.match(r"\s*([A-Za-z0-9_.-]+)==(\S+)\s+--hash=sha256:([0-9a-f]{64})", line)
        if match:
            pins[match[1].lower().replace("_", "-")] = (match[2], match[3])
    return pins


def fetch(lock: Path | None = None, names: list[str] | None = None) -> dict[str, Path]:
    """name -> the wheel a lock pins (default: every one of the lock under test), downloaded on first use; each
    file's sha256 is checked against the lock."""
    pins = pinned(lock)
    pins = {name: pins[name] for name in names} if names else pins
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        wheels = _find(folder, pins)
        if set(wheels) != set(pins):
            _download(folder, pins)
            wheels = _find(folder, pins)
        missing = sorted(set(pins) - set(wheels))
        if missing:
            pytest.fail(f"pip downloaded no wheel for {missing} into {folder}; see requirements.lock")
        for name, (_, digest) in pins.items():
            if hashlib.sha256(wheels[name].read_bytes()).hexdigest() != digest:
                wheels[name].unlink()
                pytest.fail(f"{wheels[name].name} does not match its pinned sha256; removed it, run again")
    return wheels


def _find(folder: Path, pins: dict[str, tuple[str, str]]) -> dict[str, Path]:
    found = {}
    for name, (version, _) in pins.items():
        stem = name.replace("-", "_")
        for path in folder.glob(f"{stem}-{version}-*.whl"):
            found[name] = path
    return found


def _download(folder: Path, pins: dict[str, tuple[str, str]]) -> None:
    requirements = folder / ".requested.txt"
    requirements.write_text(
        "".join(f"{name}=={version} --hash=sha256:{digest}\n" for name, (version, digest) in pins.items())
    )
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--require-hashes"]
    command += ["--disable-pip-version-check", "-r", str(requirements), "-d", str(folder)]
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


def lift_where_defined(wheel: Path, member: str, names: list[str], namespace: dict) -> dict:
    """lift() the named functions of one module of a wheel with the module-level helpers they use, following the
    module's imports from its own package to where upstream defines each helper now (vLLM moved its Quark
    matching helpers to quantization/utils/config_utils.py); the module's other imports are run where this
    process can (the standard library), and `namespace` supplies the rest (e.g. vLLM's `regex` as `re`)."""
    source = read_source(wheel, member)
    tree = ast.parse(source, filename=member)
    package = member.split("/")[0]
    wanted = _closure(tree, set(names))
    used = {node.id for name in wanted for node in ast.walk(_definition(tree, name)) if isinstance(node, ast.Name)}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == package:
            imported = [alias.name for alias in node.names if (alias.asname or alias.name) in used]
            if imported:
                lift_where_defined(wheel, node.module.replace(".", "/") + ".py", imported, namespace)
    run_imports(source, namespace)
    return lift(source, sorted(wanted), namespace, f"{package}:{member}")


def run_imports(source: str, namespace: dict) -> dict:
    """Run the module-level imports of `source` that this process can (the standard library) into `namespace`,
    leaving the names it already holds; torch and the like are skipped: what is lifted must not need them."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import | ast.ImportFrom) and not set(_bound(node)) & set(namespace):
            try:
                exec(compile(ast.Module(body=[node], type_ignores=[]), "<imports>", "exec"), namespace)
            except ImportError:
                pass
    return namespace


def _definition(tree: ast.Module, name: str) -> ast.stmt:
    return next(node for node in tree.body if name in _defines(node))


def _closure(tree: ast.Module, names: set[str]) -> set[str]:
    """The names, with every top-level definition of the module they use, transitively."""
    defined = set().union(*(_defines(node) for node in tree.body))
    found, todo = set(), set(names) & defined
    while todo:
        name = todo.pop()
        found.add(name)
        used = {node.id for node in ast.walk(_definition(tree, name)) if isinstance(node, ast.Name)}
        todo |= (used & defined) - found
    return found | set(names)


def _bound(node: ast.Import | ast.ImportFrom) -> list[str]:
    return [(alias.asname or alias.name).split(".")[0] for alias in node.names]


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


def lift_methods(wheel: Path, member: str, class_name: str, names: list[str], namespace: dict) -> type:
    """A stand-in class holding only the named methods and class attributes of upstream's `class_name` (its bases
    pull torch), with the module-level functions they call (lifted where upstream defines them) and the module's
    imports run, to run upstream's own method code on plain objects."""
    source, filename = read_source(wheel, member), f"{member.split('/')[0]}:{member}"
    members = _class_members(ast.parse(source, filename=filename), class_name, names, filename)
    used = {node.id for member_node in members for node in ast.walk(member_node) if isinstance(node, ast.Name)}
    helpers = used & set().union(*(_defines(node) for node in ast.parse(source).body)) - {class_name}
    if helpers:  # sglang 0.5.23's _resolve_nextn_quant_config calls one
        lift_where_defined(wheel, member, sorted(helpers), namespace)
    run_imports(source, namespace)
    return class_stand_in(source, class_name, names, namespace, filename)


def class_stand_in(source: str, class_name: str, names: list[str], namespace: dict, filename: str) -> type:
    """The named methods and class attributes of `class_name` in `source` as a class of their own, executed in
    `namespace` as it is (nothing imported or lifted for them): for methods whose module pulls torch on import."""
    members = _class_members(ast.parse(source, filename=filename), class_name, names, filename)
    stand_in = ast.ClassDef(name=class_name, bases=[], keywords=[], body=members, decorator_list=[], type_params=[])
    module = ast.fix_missing_locations(ast.Module(body=[stand_in], type_ignores=[]))
    exec(compile(module, filename, "exec"), namespace)
    return namespace[class_name]


def _class_members(tree: ast.Module, class_name: str, names: list[str], filename: str) -> list[ast.stmt]:
    found = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name]
    if not found:
        pytest.fail(f"{filename} no longer defines {class_name}: reread upstream and update the test")
    members = [node for node in found[0].body if _defines(node) & set(names)]
    missing = set(names) - set().union(*(_defines(node) for node in members))
    if missing:
        pytest.fail(f"{filename}: {class_name} no longer defines {sorted(missing)}: reread upstream")
    return members
