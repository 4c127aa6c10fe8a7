"""Fused MoE for ROCm: aiter's 2-stage CK kernels (aiter/fused_moe.py), configured from configs/tuned_fmoe.csv."""

import csv
from dataclasses import dataclass
from pathlib import Path

from twin import device, logs

TUNED_CONFIG = Path(__file__).resolve().parent / "configs" / "tuned_fmoe.csv"
KEY_FIELDS = (
    "gfx", "cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype",
    "q_dtype_a", "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1",
)  # fmt: skip
Q_DTYPES = {
    "mxfp4": ("torch.float4_e2m1fn_x2", "QuantType.per_1x32"),
    "fp8": ("torch.float8_e4m3fn", "QuantType.per_1x128"),
}
PADDED_M_TIERS = (32768, 131072)
# rows without a gfx column: arch from cu_num, as aiter's gfx_from_cu_num
LEGACY_CU_NUM_TO_GFX = {"256": "gfx950", "80": "gfx942", "304": "gfx942"}


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def padded_m(m: int) -> int:
    if m < PADDED_M_TIERS[0]:
        return next_pow2(m)
    return max(tier for tier in PADDED_M_TIERS if m >= tier)


@dataclass(frozen=True)
class MoeShape:
    model_dim: int
    inter_dim: int
    expert: int
    topk: int
    quant: str = "mxfp4"

    def key(self, gfx: str, cu_num: int, token: int) -> tuple:
        q_dtype, q_type = Q_DTYPES[self.quant]
        return (
            gfx, cu_num, token, self.model_dim, self.inter_dim, self.expert, self.topk,
            "ActivationType.Silu", "torch.bfloat16", q_dtype, q_dtype, q_type, True, False,
        )  # fmt: skip


def _row_key(row: dict[str, str]) -> tuple:
    row = {**row, "gfx": row.get("gfx") or LEGACY_CU_NUM_TO_GFX.get(row["cu_num"].strip(), "")}
    values = []
    for field in KEY_FIELDS:
        text = row[field].strip()
        if field in ("use_g1u1", "doweight_stage1"):
            values.append(text in ("1", "True", "true"))
        else:
            values.append(int(text) if text.isdigit() else text)
    return tuple(values)


def read_tuned(path: Path = TUNED_CONFIG) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


class Selector:
    """The fused-MoE kernels of one layer shape, per padded token count (aiter's get_2stage_cfgs)."""

    def __init__(self, shape: MoeShape, path: Path = TUNED_CONFIG):
        self.shape = shape
        self.table = {_row_key(row): row for row in read_tuned(path)}
        properties = device.properties()
        self.gfx, self.cu_num = properties["gcn_arch"], int(properties["cu_num"])
        self.launched: dict[int, str] = {}  # padded M -> stage-1 kernel launched ("" for aiter's default)

    def kernel(self, m: int) -> str:
        """The stage-1 kernel a forward of `m` tokens launches."""
        token = padded_m(max(m, 1))
        if token not in self.launched:
            self._look_up(token)
        return self.launched[token]

    def _look_up(self, token: int) -> None:
        key = self.shape.key(self.gfx, self.cu_num, token)
        row = self.table.get(key)
        if row is None:
            logs.aiter(
                f"run_1stage = False, xbf16 = False, ksplit = 0 q_type = {key[11]} block_m = 32 use_nt = True, "
                f"estimated_m_per_expert = {token * self.shape.topk // self.shape.expert}"
            )
            logs.aiter(f"[fused_moe] using 2stage default for {key} ")
            self.launched[token] = ""
        else:
            tag = f"(kernelName1='{row['kernelName1']}', kernelName2='{row['kernelName2']}')"
            logs.aiter(f"[fused_moe] using 2stage {tag} for {key} ")
            self.launched[token] = row["kernelName1"]

    def all_tuned(self) -> bool:
        """Whether every size looked up so far has a tuned row."""
        return bool(self.launched) and all(self.launched.values())
