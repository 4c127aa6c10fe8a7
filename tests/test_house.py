"""The house's structure, as issue 42 measures it: no import circle between porter's modules (imports made only for
type checking and imports inside functions count too), no folder of porter/ with more than 15 modules, no module
over 450 lines, no two modules with the same basename, a docstring atop every package saying what it is, and every
third-party import declared in pyproject.toml. Reads the source with ast; imports nothing of porter's."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "porter"


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of porter (a package is its __init__)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(path: Path, name: str, known: dict[str, Path]) -> tuple[set[str], set[str]]:
    """(porter modules, top-level third-party names) a module imports anywhere in its body."""
    ours, theirs = set(), set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            if target.split(".")[0] != "porter":
                theirs.add(target.split(".")[0])
                continue
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                ours.add(target)
    return ours, theirs


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(path, name, known)[0] for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for successor in edges.get(node, ()):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in edges:
        if node not in index:
            visit(node)
    return found


def without_packages(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """A module importing its own package's __init__ (or the reverse, for re-exports) is not a circle of modules."""
    return {
        name: {t for t in targets if not (name.startswith(t + ".") or t.startswith(name + "."))}
        for name, targets in edges.items()
    }


def test_no_import_circle_between_porter_modules() -> None:
    assert cycles(without_packages(graph())) == []


def test_no_folder_holds_more_than_15_modules_and_none_is_over_450_lines() -> None:
    per_folder = Counter(path.parent for path in PACKAGE.rglob("*.py") if path.name != "__init__.py")
    assert {str(folder.relative_to(ROOT)): n for folder, n in per_folder.items() if n > 15} == {}
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 450}
    assert long == {}


def test_module_names_are_unique_and_every_package_says_what_it_is() -> None:
    names = defaultdict(list)
    for path in PACKAGE.rglob("*.py"):
        if path.name not in {"__init__.py", "__main__.py"}:
            names[path.name].append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}
    for init in PACKAGE.rglob("__init__.py"):
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init.relative_to(ROOT)} has no docstring"


def test_every_third_party_import_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [project["dependencies"], *project.get("optional-dependencies", {}).values()]
    wanted = {
        re.split(r"[\[<>=!~ ;]", spec, maxsplit=1)[0].lower().replace("_", "-") for group in declared for spec in group
    }
    distributions = importlib.metadata.packages_distributions()
    known = modules()
    undeclared = {}
    for name, path in known.items():
        for top in imported(path, name, known)[1]:
            if top in sys.stdlib_module_names or top == "__future__":
                continue
            providers = {d.lower().replace("_", "-") for d in distributions.get(top, [top])}
            if not providers & wanted:
                undeclared.setdefault(top, []).append(name)
    assert undeclared == {}
