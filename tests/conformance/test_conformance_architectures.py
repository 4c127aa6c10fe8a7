"""porter/init/engine_architectures.txt against the pinned wheels: the architectures each engine registers.

vLLM registers a model class by its architecture name in model_executor/models/registry.py (`_TEXT_GENERATION_MODELS`
and `_MULTIMODAL_MODELS`, name -> (module, class)); sglang by each srt/models/*.py module's `EntryClass` (a class or
a list of classes, collected by srt/models/registry.py's import_model_classes). Both lists are read here with ast
from the wheels upstream_wheels.fetch() pins, and must equal the file init warns from. Regenerate the file with
`python tests/conformance/test_conformance_architectures.py` after a pin moves.
"""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

import pytest
import upstream_wheels

from porter.init.task_draft import ARCHITECTURES, registered_architectures

VLLM_TABLES = ("_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS")


def _vllm(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        tree = ast.parse(archive.read("vllm/model_executor/models/registry.py"))
    names = set()
    for node in tree.body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if any(isinstance(t, ast.Name) and t.id in VLLM_TABLES for t in targets) and isinstance(node.value, ast.Dict):
            names |= {key.value for key in node.value.keys if isinstance(key, ast.Constant)}
    return names


def _sglang(wheel: Path) -> set[str]:
    names = set()
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if not (member.startswith("sglang/srt/models/") and member.endswith(".py")):
                continue
            for node in ast.parse(archive.read(member)).body:
                if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "EntryClass" for t in node.targets):
                    values = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
                    names |= {value.id for value in values if isinstance(value, ast.Name)}
    return names


def upstream() -> dict[str, tuple[str, set[str]]]:
    wheels, pins = upstream_wheels.fetch(), upstream_wheels.pinned()
    return {"sglang": (pins["sglang"][0], _sglang(wheels["sglang"])), "vllm": (pins["vllm"][0], _vllm(wheels["vllm"]))}


def test_the_architecture_list_is_what_the_pinned_wheels_register():
    listed, wheels = registered_architectures(), upstream()
    moved = {
        engine: (listed[engine][0], version) for engine, (version, _) in wheels.items() if listed[engine][0] != version
    }
    if moved and upstream_wheels.LOCK_FILE != upstream_wheels.REPO_LOCK:
        # `scripts/conformance.sh newest`: the list speaks for the lock's pins; say what moving them would change
        changes = []
        for engine, (old, new) in moved.items():
            gone = sorted(listed[engine][1] - wheels[engine][1])
            added = len(wheels[engine][1] - listed[engine][1])
            changes.append(f"{engine} {old} -> {new}: {added} added, {len(gone)} gone ({', '.join(gone[:5])})")
        pytest.skip("the list is the pinned releases'; on these: " + "; ".join(changes))
    assert listed == wheels


if __name__ == "__main__":
    lines = [line for line in ARCHITECTURES.read_text().splitlines() if line.startswith("#")]
    lines += [f"{engine} {version}: {' '.join(sorted(names))}" for engine, (version, names) in upstream().items()]
    ARCHITECTURES.write_text("\n".join(lines) + "\n")
