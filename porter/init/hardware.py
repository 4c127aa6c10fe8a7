"""The GPUs `porter init` plans for, in one table with its source, and the `--hardware NAME:COUNT` spelling.

Memory and architecture are ROCm's "AMD GPU specifications" table (rocm.docs.amd.com reference/gpu-specs: VRAM
in GiB and the LLVM target): MI300X 192 GiB gfx942, MI325X 256 GiB gfx942, MI355X 288 GiB gfx950. What a quantization
or kernel supports per architecture is upstream_facts.py's. Does not probe a real device (preflight does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GIB = 1 << 30


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gib: int
    arch: str  # LLVM target

    @property
    def memory_bytes(self) -> int:
        return self.memory_gib * GIB


GPUS = {
    gpu.name: gpu for gpu in (Gpu("MI300X", 192, "gfx942"), Gpu("MI325X", 256, "gfx942"), Gpu("MI355X", 288, "gfx950"))
}


def parse_hardware(text: str) -> tuple[Gpu, int]:
    """`MI355X:8` -> (the GPU, 8); a ValueError naming the known GPUs otherwise."""
    match = re.fullmatch(r"\s*([A-Za-z0-9]+)\s*(?::\s*(\d+))?\s*", text or "")
    name = match[1].upper() if match else ""
    if name not in GPUS:
        raise ValueError(f"unknown GPU {text!r}; --hardware takes NAME:COUNT with NAME one of {sorted(GPUS)}")
    count = int(match[2] or 8)
    if not 1 <= count <= 64:
        raise ValueError(f"--hardware {text}: a node holds 1 to 64 GPUs, not {count}")
    return GPUS[name], count
