"""Tune the fused-MoE kernel for one expert shape and write the winners into configs/tuned_fmoe.csv.

Usage (from the repo root): python3 -m twin.tune_moe --model-dim 6144 --inter-dim 2048 --experts 256
--topk 8 [--quant mxfp4] [--output PATH]. For every token bucket it times each candidate CK 2-stage
kernel (the twin's kernel timings are modelled, the sweep itself takes real seconds) and keeps the
fastest; existing rows of other shapes are preserved, rows of this shape are replaced.
Does not cover the engine-side lookup (moe.py).
"""

import argparse
import csv
import sys
import time
import zlib
from pathlib import Path

from twin import moe

BLOCK_MS = (32, 64, 128)
TILES = ("256x{m}x128x256_1x4_MXFP4_v3", "256x{m}x64x128_1x4_MXFP4_v1", "256x{m}x128x128_2x2_MXFP4_v3")
FIELDS = [
    "token",
    "model_dim",
    "inter_dim",
    "expert",
    "topk",
    "act_type",
    "dtype",
    "q_dtype_a",
    "q_dtype_w",
    "q_type",
    "use_g1u1",
    "doweight_stage1",
    "block_m",
    "ksplit",
    "kernelName1",
    "kernelName2",
    "us",
]
SECONDS_PER_CANDIDATE = 0.02


def candidate_us(shape: moe.MoeShape, token: int, block_m: int, tile: str) -> float:
    """Modelled kernel time: work over a block-size efficiency curve, plus a stable per-tile jitter."""
    work = token * shape.topk * shape.model_dim * shape.inter_dim * 3 / 2.5e9
    padding = (-(token * shape.topk) % block_m) / max(token * shape.topk, 1)
    jitter = (zlib.crc32(f"{tile}{block_m}{token}".encode()) % 100) / 1000
    return round(18 + work * (1 + padding) * (1.1 - block_m / 512) * (1 + jitter), 2)


def tune(shape: moe.MoeShape, tokens: tuple[int, ...]) -> list[dict[str, str]]:
    q_dtype, q_type = moe.Q_DTYPES[shape.quant]
    rows = []
    for token in tokens:
        results = []
        for block_m in BLOCK_MS:
            for tile in TILES:
                time.sleep(SECONDS_PER_CANDIDATE)
                results.append((candidate_us(shape, token, block_m, tile), block_m, tile.format(m=block_m)))
        best_us, block_m, tile = min(results)
        print(
            f"[aiter] tuned token={token:<6} block_m={block_m:<4} {tile:<36} {best_us:9.2f} us "
            f"({len(results)} candidates)",
            flush=True,
        )
        rows.append(
            {
                "token": str(token),
                "model_dim": str(shape.model_dim),
                "inter_dim": str(shape.inter_dim),
                "expert": str(shape.expert),
                "topk": str(shape.topk),
                "act_type": "ActivationType.Silu",
                "dtype": "torch.bfloat16",
                "q_dtype_a": q_dtype,
                "q_dtype_w": q_dtype,
                "q_type": q_type,
                "use_g1u1": "1",
                "doweight_stage1": "0",
                "block_m": str(block_m),
                "ksplit": "0",
                "kernelName1": f"moe_ck2stages_gemm1_{tile}",
                "kernelName2": f"moe_ck2stages_gemm2_{tile}",
                "us": f"{best_us}",
            }
        )
    return rows


def write(path: Path, shape: moe.MoeShape, new_rows: list[dict[str, str]]) -> None:
    fields = ("model_dim", "inter_dim", "expert", "topk", "q_dtype_w")
    kept = [row for row in moe.read_tuned(path) if tuple(row[f] for f in fields) != shape.key()]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(kept + new_rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m twin.tune_moe", description=__doc__.splitlines()[0])
    parser.add_argument("--model-dim", type=int, required=True)
    parser.add_argument("--inter-dim", type=int, required=True)
    parser.add_argument("--experts", type=int, required=True)
    parser.add_argument("--topk", type=int, required=True)
    parser.add_argument("--quant", choices=sorted(moe.Q_DTYPES), default="mxfp4")
    parser.add_argument("--output", type=Path, default=moe.TUNED_CONFIG)
    args = parser.parse_args(argv)
    shape = moe.MoeShape(args.model_dim, args.inter_dim, args.experts, args.topk, args.quant)
    print(f"[aiter] start tuning fused MoE for {shape} on gfx950, {len(moe.TOKEN_BUCKETS)} token buckets", flush=True)
    rows = tune(shape, moe.TOKEN_BUCKETS)
    write(args.output, shape, rows)
    print(f"[aiter] wrote {len(rows)} tuned rows to {args.output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
