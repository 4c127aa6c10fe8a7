"""FP8 block quantization (quant_method "fp8" with `weight_block_size`), after vLLM's and sglang's Fp8Config
(vllm model_executor/layers/quantization/fp8.py)."""

import math
from pathlib import Path

from twin import attention, device, jit, logs


class Fp8Config:
    moe_quant = "fp8"  # the fused-MoE kernels' quantization (moe.Q_DTYPES)

    def __init__(self, raw: dict, source: Path):
        self.raw = raw
        self.source = source
        self.ignored_layers: list[str] = list(raw.get("ignored_layers") or raw.get("modules_to_not_convert") or [])
        self.exclude = self.ignored_layers
        self.block_n, self.block_k = (int(size) for size in raw["weight_block_size"])
        self.moe_padding = 1.0  # how much wider each rank's expert share is than its unpadded width

    @classmethod
    def from_config(cls, config: dict, source: Path) -> "Fp8Config":
        """From a checkpoint's `quantization_config`, with the checks vLLM's Fp8Config makes on a block config."""
        block = config.get("weight_block_size")
        if block is None:
            raise NotImplementedError("the twin serves block-quantized fp8 checkpoints only (no weight_block_size)")
        if len(block) != 2:
            raise ValueError(
                f"The quantization block size of weight must have 2 dimensions, but got {len(block)} dimensions"
            )
        if config.get("activation_scheme") != "dynamic":
            raise ValueError(
                "The block-wise quantization only supports dynamic activation scheme for now, but got "
                f"{config.get('activation_scheme')} activation scheme."
            )
        return cls(config, source)

    def describe(self) -> str:
        return (
            f"Using fp8 block quantization {self.block_n}x{self.block_k} from {self.source} "
            f"(modules_to_not_convert: {len(self.ignored_layers)})"
        )

    def is_layer_skipped(self, prefix: str) -> bool:
        return prefix in self.ignored_layers

    def weight_slots(self, prefix: str, out_features: int, in_features: int) -> dict[str, tuple[tuple, str]]:
        """Parameter name -> (shape, dtype) for one linear module under this config."""
        if self.is_layer_skipped(prefix):
            return {f"{prefix}.weight": ((out_features, in_features), "BF16")}
        scales = (math.ceil(out_features / self.block_n), math.ceil(in_features / self.block_k))
        return {
            f"{prefix}.weight": ((out_features, in_features), "F8_E4M3"),
            f"{prefix}.weight_scale_inv": (scales, "F32"),
        }

    def expert_slots(
        self, prefix: str, experts: int, hidden: int, inter: int, moe_tp: int, pad_to: int = 0
    ) -> dict[str, tuple[tuple, str]]:
        """The fused-MoE slots of one layer (gate and up stacked as w13, down as w2) for experts split over `moe_tp`
        ranks. A rank's share of the expert width must be whole blocks (vLLM's check), unless the MoE kernels pad it
        to `pad_to` and that is the block size: then each rank holds its share padded up to whole blocks (sglang
        with aiter, AITER_PADDING_SIZE 128, moe/utils.py get_moe_weight_sizes), and `moe_padding` says how much
        more it holds. The slots have the checkpoint's (unpadded) shapes."""
        per_rank = inter // moe_tp
        self.moe_padding = 1.0
        if pad_to and pad_to == self.block_n == self.block_k:
            self.moe_padding = math.ceil(per_rank / pad_to) * pad_to / per_rank
        elif per_rank % self.block_n != 0:
            raise ValueError(
                f"The output_size of gate's and up's weight = {per_rank} is not divisible by "
                f"weight quantization block_n = {self.block_n}."
            )
        elif moe_tp > 1 and per_rank % self.block_k != 0:
            raise ValueError(
                f"The input_size of down's weight = {per_rank} is not divisible by "
                f"weight quantization block_k = {self.block_k}."
            )
        blocks_inter, blocks_hidden = math.ceil(inter / self.block_n), math.ceil(hidden / self.block_k)
        return {
            f"{prefix}.w13_weight": ((experts, 2 * inter, hidden), "F8_E4M3"),
            f"{prefix}.w13_weight_scale_inv": ((experts, 2 * blocks_inter, blocks_hidden), "F32"),
            f"{prefix}.w2_weight": ((experts, hidden, inter), "F8_E4M3"),
            f"{prefix}.w2_weight_scale_inv": ((experts, math.ceil(hidden / self.block_n), blocks_inter), "F32"),
        }


def weight_dtype() -> str:
    """The fp8 variant the loaded e4m3fn weights are kept in on this GPU: converted to e4m3fnuz (values and scales
    rescaled) only on the MI300 series."""
    return "torch.float8_e4m3fnuz" if attention.is_fp8_fnuz() else "torch.float8_e4m3fn"


# aiter's block-scale GEMM (gemm_a8w8_blockscale) has kernels for each arch's native fp8 variant only
BLOCKSCALE_GEMM_DTYPES = {"gfx950": "torch.float8_e4m3fn", "gfx942": "torch.float8_e4m3fnuz"}


def select_gemm(config: Fp8Config) -> str:
    """Pick the block-scale GEMM for the weights' dtype, after building the activation quantization kernel."""
    dtype, arch = weight_dtype(), attention.gpu_arch()
    supported = BLOCKSCALE_GEMM_DTYPES.get(arch)
    if dtype != supported:
        raise RuntimeError(
            f"gemm_a8w8_blockscale: weight dtype {dtype} is not supported on {arch} (supported: {supported})"
        )
    jit.per_token_group_quant_fp8(config.block_k)
    cu_num = int(device.properties()["cu_num"])
    kernel = f"gemm_a8w8_blockscale_{config.block_n}x{config.block_k}_{arch}"
    logs.aiter(
        f"[gemm_a8w8_blockscale] using {kernel} for {dtype} weights, block ({config.block_n}, {config.block_k}), "
        f"cu_num={cu_num}"
    )
    return kernel
