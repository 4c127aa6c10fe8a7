"""Write one model family's twin checkpoint: config.json, safetensors shards, the weight index, a tokenizer config.

Each shard has a real safetensors header (8-byte length, JSON with dtype, shape and data_offsets); each tensor's
payload is a 16-byte fingerprint instead of its data (see engine/twin/model_loader/loader.py), so a 400 GB layout
fits in a few MB. The index's `metadata.total_size` is the bytes the tensors would take (dtype x shape), as a real
export writes it. What each family's files hold is declared in families/ (glm52, corvid3).
Run at image build: make_checkpoint.py OUT_DIR [--family NAME]. Does not cover the engine's view of the model.
"""

import argparse
import hashlib
import json
import math
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from families import DEFAULT, family  # noqa: E402

# bytes per element of the safetensors dtypes the families use
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E8M0": 1}


def nominal_bytes(tensors: dict) -> int:
    """What the tensors would take on disk."""
    return sum(math.prod(shape) * DTYPE_BYTES[dtype] for dtype, shape in tensors.values())


def _write_shard(path: Path, tensors: dict) -> None:
    header, payload = {"__metadata__": {"format": "pt"}}, bytearray()
    for name, (dtype, shape) in tensors.items():
        fingerprint = hashlib.blake2b(f"{name}|{dtype}|{shape}".encode(), digest_size=16).digest()
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(payload), len(payload) + 16]}
        payload += fingerprint
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + bytes(payload))


def main(out_dir: Path, family_name: str = DEFAULT) -> None:
    declared = family(family_name)
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors, weight_map = declared.tensors(), {}
    names, shards = list(tensors), declared.SHARDS
    for shard in range(shards):
        file_name = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        chunk = names[shard * len(names) // shards : (shard + 1) * len(names) // shards]
        _write_shard(out_dir / file_name, {name: tensors[name] for name in chunk})
        weight_map |= {name: file_name for name in chunk}
    (out_dir / "config.json").write_text(json.dumps(declared.config(), indent=2) + "\n")
    index = {"metadata": {"total_size": nominal_bytes(tensors)}, "weight_map": weight_map}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=1) + "\n")
    (out_dir / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "TwinWordTokenizer"}) + "\n")
    print(f"wrote {len(tensors)} tensors of {declared.MODEL_ID} in {shards} shards to {out_dir}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--family", default=DEFAULT)
    arguments = parser.parse_args()
    main(arguments.out_dir, arguments.family)
