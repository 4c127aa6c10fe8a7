"""Tune the fused-MoE 2-stage kernels (after aiter's csrc/ck_gemm_moe_2stages_codegen/gemm_moe_tune.py).

Usage: python3 -m twin.tune_moe --model-dim 6144 --inter-dim 256,512 --experts 256 --topk 8
--tokens 1,2,4,...,32768 [--quant mxfp4] [--output PATH]. One row per (token, inter_dim): each candidate kernel
is timed and the fastest written to configs/tuned_fmoe.csv (rows with the same key are replaced).
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


def tune_row(shape: moe.MoeShape, token: int) -> dict[str, str]:
    """The fastest candidate for one padded M, as a tuned_fmoe.csv row."""
    properties = device.properties()
    dims = {"model_dim": shape.model_dim, "inter_dim": shape.inter_dim, "expert": shape.expert, "topk": shape.topk}
    results = []
    for block_m in BLOCK_MS:
        for tile in TILES[shape.quant]:
            time.sleep(SECONDS_PER_CANDIDATE)
            us = device.call("kernel", shape=dims, token=token, block_m=block_m, tile=tile)["us"]
            results.append((us, block_m, tile.format(m=block_m)))
    best_us, block_m, tile = min(results)
    print(
        f"[aiter] tuned token={token:<6} inter_dim={shape.inter_dim:<5} block_m={block_m:<4} {tile:<36} "
        f"{best_us:9.2f} us ({len(results)} candidates)",
        flush=True,
    )
    key = dict(zip(moe.KEY_FIELDS, shape.key(properties["gcn_arch"], int(properties["cu_num"]), token), strict=True))
    key.update(use_g1u1="1", doweight_stage1="0")
    stage1 = round(best_us * 0.6, 2)
    flops = token * shape.topk * shape.model_dim * shape.inter_dim * 6
    row = {field: str(value) for field, value in key.items()}
    row.update(block_m=str(block_m), ksplit="0", us1=f"{stage1}", kernelName1=f"moe_ck2stages_gemm1_{tile}")
    row.update(err1="0.0%", us2=f"{round(best_us - stage1, 2)}", kernelName2=f"moe_ck2stages_gemm2_{tile}")
    row.update(err2="0.0%", us=f"{best_us}", run_1stage="0", tflops=f"{flops / best_us / 1e6:.2f}", bw="0.0")
    return row


def write(path: Path, new_rows: list[dict[str, str]]) -> None:
    replaced = {moe._row_key(row) for row in new_rows}
    kept = [row for row in moe.read_tuned(path) if moe._row_key(row) not in replaced]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for row in kept:  # a row from before aiter keyed configs by arch gets the arch aiter infers for it
            writer.writerow({**row, "gfx": moe._row_key(row)[0]})
        writer.writerows(new_rows)


def _numbers(text: str) -> list[int]:
    values = [int(value) for value in text.split(",") if value.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of positive integers, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m twin.tune_moe", description=__doc__.splitlines()[0])
    parser.add_argument("--model-dim", type=int, required=True)
    parser.add_argument("--inter-dim", type=_numbers, required=True, help="one or more, comma-separated")
    parser.add_argument("--experts", type=int, required=True)
    parser.add_argument("--topk", type=int, required=True)
    parser.add_argument("--tokens", type=_numbers, required=True, help="the padded M values to tune, comma-separated")
    parser.add_argument("--quant", choices=sorted(moe.Q_DTYPES), default="mxfp4")
    parser.add_argument("--output", type=Path, default=moe.TUNED_CONFIG)
    args = parser.parse_args(argv)
    shapes = [moe.MoeShape(args.model_dim, inter, args.experts, args.topk, args.quant) for inter in args.inter_dim]
    arch = device.properties()["gcn_arch"]
    print(f"[aiter] start tuning fused MoE on {arch}: {len(shapes) * len(args.tokens)} untuned rows", flush=True)
    rows = [tune_row(shape, token) for shape in shapes for token in args.tokens]
    write(args.output, rows)
    print(f"[aiter] wrote {len(rows)} tuned rows to {args.output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
