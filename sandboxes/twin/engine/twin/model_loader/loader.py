"""Reads a safetensors-shaped checkpoint and loads it into the model's parameter slots.

Checkpoint files are safetensors (an 8-byte header length, then a JSON header with each tensor's dtype, shape and
data_offsets); a tensor's payload may be a 16-byte digest of its data (a compact checkpoint). Loading walks the
shards like sglang's DefaultModelLoader (with the same progress lines) and hands each tensor to the model's
`load_weights`. Does not cover which slots exist or how checkpoint names map to them (models/).
"""

import json
import struct
import sys
import time
from pathlib import Path

from twin import device
from twin.model_loader.weight_utils import Parameter, Size, Tensor


def read_shard(path: Path) -> list[Tensor]:
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    header.pop("__metadata__", None)
    return [Tensor(name, entry["dtype"], Size(entry["shape"])) for name, entry in header.items()]


# bytes per element of the checkpoint's dtypes (mxfp4 weights are packed two to a U8)
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E8M0": 1}


def shard_gb(tensors: list[Tensor]) -> float:
    """The size a shard has on disk: what reading it costs (a compact checkpoint's payloads are digests)."""
    total = 0
    for tensor in tensors:
        count = 1
        for dim in tensor.size():
            count *= dim
        total += count * DTYPE_BYTES.get(tensor.dtype, 1)
    return total / 1e9


def shards(model_path: Path, layer: int | None = None) -> list[str]:
    """The checkpoint's shard files (those holding `layer`'s tensors when given), in order."""
    weight_map = json.loads((model_path / "model.safetensors.index.json").read_text())["weight_map"]
    prefix = f"model.layers.{layer}." if layer is not None else ""
    return sorted({shard for name, shard in weight_map.items() if name.startswith(prefix)})


def iterate_checkpoint(model_path: Path, names: list[str] | None = None):
    """Yield the tensors of the shards `names` (all by default), reading each at the device's disk speed."""
    names = names or shards(model_path)
    started = time.monotonic()
    for number, shard in enumerate(names, start=1):
        tensors = read_shard(model_path / shard)
        device.wait("load_shard", shard=shard, gb=shard_gb(tensors))
        yield from tensors
        elapsed = time.monotonic() - started
        rate = number / max(elapsed, 1e-6)
        bar = "#" * (number * 10 // len(names))
        remaining = int((len(names) - number) / rate)
        print(
            f"Loading safetensors checkpoint shards: {number * 100 // len(names):3d}% Completed | {bar:<10}| "
            f"{number}/{len(names)} [{_clock(elapsed)}<{_clock(remaining)}, {_rate(rate)}]\n",
            end="",  # one write with its newline: stdout's lines, in the same file, never land inside it
            file=sys.stderr,
            flush=True,
        )


def _rate(per_second: float) -> str:
    """tqdm's rate: items per second, or seconds per item below one a second."""
    return f"{per_second:.2f}it/s" if per_second >= 1 else f"{1 / per_second:.2f}s/it"


def _clock(seconds: float) -> str:
    return f"{int(seconds) // 60:02d}:{int(seconds) % 60:02d}"


def build_params(slots: dict[str, tuple]) -> dict[str, Parameter]:
    """Parameters from slots: (shape, dtype), or (shape, dtype, shards) for a fused module."""
    return {
        name: Parameter(name, Size(slot[0]), slot[1], shards=slot[2] if len(slot) > 2 else None)
        for name, slot in slots.items()
    }


def slot_bytes(params: dict[str, Parameter]) -> tuple[int, int]:
    """Bytes the slots take: (routed experts, everything else); an engine shards the two differently."""
    experts = other = 0
    for name, param in params.items():
        count = 1
        for dim in param.size():
            count *= dim
        size = count * DTYPE_BYTES.get(param.dtype, 1)
        if ".mlp.experts." in name:
            experts += size
        else:
            other += size
    return experts, other


def garbage_modules(params: dict[str, Parameter], options) -> tuple[str, ...]:
    random = options.load_format == "dummy"
    return tuple(sorted(name for name, param in params.items() if param.garbage or random))


def tensors(options, names: list[str] | None = None):
    """The checkpoint tensors of `options.model_path` (of the shards `names`; none with dummy weights)."""
    return iter(()) if options.load_format == "dummy" else iterate_checkpoint(Path(options.model_path), names)
