"""Fused-MoE kernel selection, after aiter's fused_moe (ROCm/aiter aiter/fused_moe.py, get_2stage_cfgs).

The token count of a batch is padded to a bucket (`get_padded_M`), and the tuned config is looked up in
configs/tuned_fmoe.csv of this tree by aiter's key: (cu_num, token, model_dim, inter_dim, expert, topk,
act_type, dtype, q_dtype_a, q_dtype_w, q_type, use_g1u1, doweight_stage1). A key with a row launches that
row's CK 2-stage kernels; a key without one logs aiter's "[fused_moe] using 2stage default for (...)" and
launches the default kernels. `python3 -m twin.tune_moe` writes rows for a shape.
Does not cover how fast any kernel runs (the device decides).
"""

import csv
from dataclasses import dataclass
from pathlib import Path

from twin import device, logs

TUNED_CONFIG = Path(__file__).resolve().parent / "configs" / "tuned_fmoe.csv"
KEY_FIELDS = (
    "cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype",
    "q_dtype_a", "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1",
)  # fmt: skip
Q_DTYPES = {
    "mxfp4": ("torch.float4_e2m1fn_x2", "QuantType.per_1x32"),
    "fp8": ("torch.float8_e4m3fn", "QuantType.per_1x128"),
}


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def padded_m(m: int) -> int:
    """aiter's get_padded_M: powers of two below 1024, then 1024, 2048 and 16384 for prefill sizes."""
    if m < 1024:
        return next_pow2(m)
    if m < 2048:
        return 1024
    return 2048 if m < 16384 else 16384


# Every bucket a batch can land in, small to large (the padded values of 1 .. 16384 tokens).
TOKEN_BUCKETS = tuple(sorted({padded_m(m) for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 16384)}))


@dataclass(frozen=True)
class MoeShape:
    model_dim: int
    inter_dim: int
    expert: int
    topk: int
    quant: str = "mxfp4"

    def key(self, cu_num: int, token: int) -> tuple:
        q_dtype, q_type = Q_DTYPES[self.quant]
        return (
            cu_num, token, self.model_dim, self.inter_dim, self.expert, self.topk,
            "ActivationType.Silu", "torch.bfloat16", q_dtype, q_dtype, q_type, True, False,
        )  # fmt: skip


def _row_key(row: dict[str, str]) -> tuple:
    values = []
    for field in KEY_FIELDS:
        text = row[field]
        if field in ("use_g1u1", "doweight_stage1"):
            values.append(text.strip() in ("1", "True", "true"))
        else:
            values.append(int(text) if text.strip().isdigit() else text.strip())
    return tuple(values)


def read_tuned(path: Path = TUNED_CONFIG) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def select(shape: MoeShape, path: Path = TUNED_CONFIG) -> list[str]:
    """The stage-1 kernel launched for each token bucket ("" for aiter's default), logged as aiter does."""
    cu_num = int(device.properties()["cu_num"])
    table = {_row_key(row): row for row in read_tuned(path)}
    kernels = []
    for token in TOKEN_BUCKETS:
        key = shape.key(cu_num, token)
        row = table.get(key)
        if row is None:
            logs.aiter(
                f"run_1stage = False, ksplit = 0 q_type = {key[10]} block_m = 32 use_nt = True, "
                f"estimated_m_per_expert = {token * shape.topk // shape.expert}"
            )
            logs.aiter(f"[fused_moe] using 2stage default for {key} ")
            kernels.append("")
        else:
            tag = f"(kernelName1='{row['kernelName1']}', kernelName2='{row['kernelName2']}')"
            logs.aiter(f"[fused_moe] using 2stage {tag} for {key} ")
            kernels.append(row["kernelName1"])
    return kernels
