"""Reads a safetensors-shaped checkpoint and loads it into the model's parameter slots.

The twin's checkpoint files have real safetensors headers (8-byte length, JSON with dtype, shape and
data_offsets) but each tensor's payload is a 16-byte fingerprint instead of the full data, so the whole
GLM-5.2 layout fits in a few MB. Loading walks the shards like sglang's DefaultModelLoader (with the same
progress lines) and hands each tensor to `load_weights`. Does not cover which slots exist (models/glm5.py).
"""

import json
import struct
import sys
import time
from pathlib import Path

from twin import device
from twin.model_loader.weight_utils import Parameter, Size, Tensor, default_weight_loader
from twin.models import glm5


def read_shard(path: Path) -> list[Tensor]:
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    header.pop("__metadata__", None)
    return [Tensor(name, entry["dtype"], Size(entry["shape"])) for name, entry in header.items()]


def iterate_checkpoint(model_path: Path):
    index = json.loads((model_path / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    started = time.monotonic()
    seconds_per_shard = device.call("startup", stage="load_shard")["seconds"]
    for number, shard in enumerate(shards, start=1):
        time.sleep(seconds_per_shard)
        yield from read_shard(model_path / shard)
        elapsed = time.monotonic() - started
        rate = number / max(elapsed, 1e-6)
        bar = "#" * (number * 10 // len(shards))
        remaining = int((len(shards) - number) / rate)
        print(
            f"Loading safetensors checkpoint shards: {number * 100 // len(shards):3d}% Completed | {bar:<10}| "
            f"{number}/{len(shards)} [00:{int(elapsed):02d}<00:{remaining:02d}, {rate:.2f}it/s]",
            file=sys.stderr,
            flush=True,
        )


def load_weights(params: dict[str, Parameter], tensors, config: dict, draft: bool) -> int:
    """Copy checkpoint tensors into slots; the target skips the MTP layer, the draft loads only it."""
    nextn_layer = config["num_hidden_layers"]
    loaded = 0
    for tensor in tensors:
        mtp_name = glm5.draft_name(tensor.name, nextn_layer)
        if draft != (mtp_name is not None):
            continue
        name = mtp_name if draft else tensor.name
        param = params[name]
        default_weight_loader(param, tensor)
        loaded += 1
    return loaded


def build_params(slots: dict[str, tuple[tuple, str]]) -> dict[str, Parameter]:
    return {name: Parameter(name, Size(shape), dtype) for name, (shape, dtype) in slots.items()}


def garbage_modules(params: dict[str, Parameter]) -> tuple[str, ...]:
    return tuple(sorted(name for name, param in params.items() if param.garbage))
