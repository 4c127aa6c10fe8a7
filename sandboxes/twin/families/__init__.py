"""The twin's model families, by name: each module declares its checkpoint (config.json, tensor names, dtypes and
shapes, shard count, model id and directory) and what the device needs to know beyond the shape (`DEVICE`, e.g. the
MTP acceptance by draft position). Host-side: make_checkpoint.py writes a family's checkpoint into the image, the
device derives its parameters from the same config. Nothing here is copied into the sandbox except through
make_checkpoint.py. Does not cover scenarios (which family a scenario uses: layout.scenario_spec).
"""

from types import ModuleType

from families import corvid3, glm52

FAMILIES: dict[str, ModuleType] = {module.NAME: module for module in (glm52, corvid3)}
DEFAULT = glm52.NAME


def family(name: str) -> ModuleType:
    if name not in FAMILIES:
        raise SystemExit(f"unknown model family {name!r}; known families: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[name]
