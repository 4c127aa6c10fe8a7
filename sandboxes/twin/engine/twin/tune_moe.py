"""Tune the fused-MoE kernel for one expert shape and write the winners into configs/tuned_fmoe.csv.

Usage (from the repo root): python3 -m twin.tune_moe --model-dim 6144 --inter-dim 2048 --experts 256
--topk 8 [--quant mxfp4] [--output PATH]. For every token bucket it launches each candidate CK 2-stage
kernel on the device, times it, and keeps the fastest; rows of other shapes are preserved, rows of this
shape are replaced. Columns follow aiter's tuned_fmoe.csv. Does not cover the engine-side lookup (moe.py).
"""

import argparse
import csv
import sys
import time
from pathlib import Path

from twin import device, moe

BLOCK_MS = (32, 64, 128)
TILES = {  # the CK 2-stage tiles each quantization has (aiter names fp8 block-scale tiles MulABScale)
    "mxfp4": ("256x{m}x128x256_1x4_MXFP4_v3", "256x{m}x64x128_1x4_MXFP4_v1", "256x{m}x128x128_2x2_MXFP4_v3"),
    "fp8": (
        "256x{m}x64x128_1x4_MulABScale_v3",
        "256x{m}x128x128_1x4_MulABScale_v3",
        "256x{m}x128x128_2x2_MulABScale_v1",
    ),
}
FIELDS = [
    *moe.KEY_FIELDS,
    "block_m", "ksplit", "us1", "kernelName1", "err1", "us2", "kernelName2", "err2", "us", "run_1stage",
    "tflops", "bw",
]  # fmt: skip
SECONDS_PER_CANDIDATE = 0.02


def tune(shape: moe.MoeShape, tokens: tuple[int, ...]) -> list[dict[str, str]]:
    cu_num = int(device.properties()["cu_num"])
    dims = {"model_dim": shape.model_dim, "inter_dim": shape.inter_dim, "expert": shape.expert, "topk": shape.topk}
    rows = []
    for token in tokens:
        results = []
        for block_m in BLOCK_MS:
            for tile in TILES[shape.quant]:
                time.sleep(SECONDS_PER_CANDIDATE)
                us = device.call("kernel", shape=dims, token=token, block_m=block_m, tile=tile)["us"]
                results.append((us, block_m, tile.format(m=block_m)))
        best_us, block_m, tile = min(results)
        print(
            f"[aiter] tuned token={token:<6} block_m={block_m:<4} {tile:<36} {best_us:9.2f} us "
            f"({len(results)} candidates)",
            flush=True,
        )
        key = dict(zip(moe.KEY_FIELDS, shape.key(cu_num, token), strict=True))
        key.update(use_g1u1="1", doweight_stage1="0")
        stage1 = round(best_us * 0.6, 2)
        rows.append(
            {
                **{field: str(value) for field, value in key.items()},
                "block_m": str(block_m),
                "ksplit": "0",
                "us1": f"{stage1}",
                "kernelName1": f"moe_ck2stages_gemm1_{tile}",
                "err1": "0.0%",
                "us2": f"{round(best_us - stage1, 2)}",
                "kernelName2": f"moe_ck2stages_gemm2_{tile}",
                "err2": "0.0%",
                "us": f"{best_us}",
                "run_1stage": "0",
                "tflops": f"{token * shape.topk * shape.model_dim * shape.inter_dim * 6 / best_us / 1e6:.2f}",
                "bw": "0.0",
            }
        )
    return rows


def write(path: Path, shape: moe.MoeShape, new_rows: list[dict[str, str]]) -> None:
    replaced = {moe._row_key(row) for row in new_rows}
    kept = [row for row in moe.read_tuned(path) if moe._row_key(row) not in replaced]
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
    arch = device.properties()["gcn_arch"]
    print(f"[aiter] start tuning fused MoE for {shape} on {arch}, {len(moe.TOKEN_BUCKETS)} token buckets", flush=True)
    rows = tune(shape, moe.TOKEN_BUCKETS)
    write(args.output, shape, rows)
    print(f"[aiter] wrote {len(rows)} tuned rows to {args.output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
