"""Fused-MoE kernel selection (aiter-style): a tuned CK 2-stage config per shape, or a slow default.

The selector looks the expert shape up in configs/tuned_fmoe.csv of this tree, per token bucket. A shape
with no tuned rows logs aiter's "not found tuned config" warning for each bucket it meets and runs the
default 1-stage path, which perf.py makes ~1.8x slower for the MoE part. `python3 -m twin.tune_moe`
writes rows for a shape. Does not cover the timing itself (perf.py).
"""

import csv
from dataclasses import dataclass
from pathlib import Path

from twin import logs

TUNED_CONFIG = Path(__file__).resolve().parent / "configs" / "tuned_fmoe.csv"
TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
Q_DTYPES = {
    "mxfp4": ("torch.float4_e2m1fn_x2", "QuantType.per_1x32"),
    "fp8": ("torch.float8_e4m3fn", "QuantType.per_1x128"),
}


@dataclass(frozen=True)
class MoeShape:
    model_dim: int
    inter_dim: int
    expert: int
    topk: int
    quant: str = "mxfp4"

    def key(self) -> tuple[str, str, str, str, str]:
        return str(self.model_dim), str(self.inter_dim), str(self.expert), str(self.topk), Q_DTYPES[self.quant][0]


def read_tuned(path: Path = TUNED_CONFIG) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def tuned_tokens(shape: MoeShape, path: Path = TUNED_CONFIG) -> set[int]:
    rows = read_tuned(path)
    fields = ("model_dim", "inter_dim", "expert", "topk", "q_dtype_w")
    return {int(row["token"]) for row in rows if tuple(row[field] for field in fields) == shape.key()}


def select(shape: MoeShape, path: Path = TUNED_CONFIG) -> bool:
    """True when the shape has tuned rows; otherwise warn per token bucket and take the slow default."""
    tokens = tuned_tokens(shape, path)
    if tokens:
        logs.aiter(f"[fused_moe] using tuned 2-stage CK config from {path} for {len(tokens)} token buckets of {shape}")
        return True
    q_dtype, q_type = Q_DTYPES[shape.quant]
    for token in TOKEN_BUCKETS:
        logs.aiter(
            f"not found tuned config in {path} for token={token}, model_dim={shape.model_dim}, "
            f"inter_dim={shape.inter_dim}, expert={shape.expert}, topk={shape.topk}, dtype=torch.bfloat16, "
            f"q_dtype_a={q_dtype}, q_dtype_w={q_dtype}, q_type={q_type}, use_g1u1=True, doweight_stage1=False; "
            "using default (slow) config: run_1stage=True, block_m=32, ksplit=0"
        )
    return False
