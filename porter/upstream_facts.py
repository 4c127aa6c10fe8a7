"""Facts about the real stack that no package porter can install carries: read once in upstream's source, pinned here.

Covers where each engine image keeps the code an agent patches (and which image porter init defaults to for an
engine), and how aiter looks up and names a tuned fused-MoE config (the columns of each quantization, shared experts,
expert parallelism, its tuner).
Each fact names the upstream file and the commit it was read from; tests/conformance checks porter's use of them
(and, where a PyPI package holds the same fact, the fact itself). The notes with the quoted lines:
/work/notes/upstream-facts.md (outside the repo). Does not cover flag names (the engines' own parsers answer
those at preflight) or anything measured.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ImageLayout:
    """Where an image installs a tree the agent may patch, and the upstream file that says so."""

    image: str
    repo: str
    path: str
    source: str

    @property
    def upstream(self) -> str:
        return UPSTREAMS[self.repo]


UPSTREAMS = {
    "vllm": "https://github.com/vllm-project/vllm.git",
    "sglang": "https://github.com/sgl-project/sglang.git",
    "aiter": "https://github.com/ROCm/aiter.git",
}


IMAGE_LAYOUTS = (
    # final stage: `uv pip install --system *.whl` (a wheel in the system Python's dist-packages; Python 3.12 from
    # docker/Dockerfile.rocm_base, ARG PYTHON_VERSION=3.12); /app/vllm only gets benchmarks/, examples/, docker/
    ImageLayout(
        "vllm/vllm-openai-rocm:v0.25.1",
        "vllm",
        "/usr/local/lib/python3.12/dist-packages/vllm",
        "vllm-project/vllm docker/Dockerfile.rocm @ 00305ee5, docker/Dockerfile.rocm_base @ 00256d59",
    ),
    # WORKDIR /sgl-workspace; `git clone ... sglang` then `pip install -e "python[all_hip]"` (editable)
    ImageLayout(
        "lmsysorg/sglang-rocm:v0.5.20-rocm720-mi35x-20260919",
        "sglang",
        "/sgl-workspace/sglang",
        "sgl-project/sglang docker/rocm.Dockerfile @ 004ae46f",
    ),
    # `git clone ${AITER_REPO}` in /sgl-workspace, `pip install --config-settings editable_mode=compat -e .`
    ImageLayout(
        "lmsysorg/sglang-rocm:v0.5.20-rocm720-mi35x-20260919",
        "aiter",
        "/sgl-workspace/aiter",
        "sgl-project/sglang docker/rocm.Dockerfile @ 004ae46f",
    ),
)

# ROCm/aiter @ c16d44b93a528b2a4bfd6d8d3409116d465872a9 (the AITER_COMMIT_DEFAULT of sglang's rocm.Dockerfile):
# aiter/fused_moe.py looks a tuned config up by M padded to the next power of two, M >= 32768 by these tiers.
AITER_COMMIT = "c16d44b93a528b2a4bfd6d8d3409116d465872a9"
AITER_PADDED_M_TIERS = (32768, 131072)
# aiter/configs/untuned_fmoe.csv's header, which gemm_moe_tune.py -i reads
AITER_FMOE_UNTUNED_COLUMNS = (
    "token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,doweight_stage1"
).split(",")


# aiter/utility/dtypes.py defaultDtypes: the torch fp8 type aiter computes in on each GPU (OCP e4m3 on gfx950, the
# FNUZ variant on gfx942)
AITER_FP8 = {"gfx942": "torch.float8_e4m3fnuz", "gfx950": "torch.float8_e4m3fn"}
# (q_dtype_a, q_dtype_w, q_type) of a quantization as aiter's own untuned fused-MoE lists write it,
# aiter/configs/model_configs/*_untuned_fmoe.csv; {fp8} is the GPU's AITER_FP8. Activation Silu, except
# ActivationType.Swiglu for gpt-oss's clamped SwiGLU (gptoss_*); dtype torch.bfloat16; use_g1u1 1; doweight_stage1 0.
AITER_MOE_QUANT = {
    "fp8-block": ("{fp8}", "{fp8}", "QuantType.per_1x128"),  # a8w8_blockscale_untuned_fmoe_{ds_v3,glm5,qwen3_235b}
    "fp8-channel": ("{fp8}", "{fp8}", "QuantType.per_Token"),  # glm5_ptpc_untuned_fmoe.csv (per token, per channel)
    "fp4": ("torch.float4_e2m1fn_x2", "torch.float4_e2m1fn_x2", "QuantType.per_1x32"),  # glm5_fp4, gptoss_fp4
    "fp4-weight-only": ("torch.bfloat16", "torch.float4_e2m1fn_x2", "QuantType.per_1x32"),  # gptoss_a16w4
    "int4-weight-only": ("torch.bfloat16", "torch.int4", "QuantType.per_1x32"),  # kimik2_i4 (group 32)
    "none": ("torch.bfloat16", "torch.bfloat16", "QuantType.No"),  # qwen3_235b_bf16
}
# The same lists' shapes: inter_dim is one rank's share of the expert width (GLM-5 fp4: 2048, 1024, 512, 256); a
# shared expert of the expert width is tuned fused as one more expert that every token picks (DeepSeek-V3, GLM-5:
# expert 257, topk 9; Qwen3.5-397B: 513/11), and Kimi-K2's and Qwen3-Next's lists hold both shapes (384/8, 385/9);
# under expert parallelism a rank holds whole experts, its local count (qwen3_235b: inter 1536, expert 16 of 128, topk
# 8: fused_moe.py keys on the routed top-k, `topk -= int(is_ep)` strips the masked slot); gpt-oss's 2880 is tuned as
# 3072 (model_dim and inter_dim padded to a multiple of 256 for MXFP4).
AITER_MXFP4_PAD = 256
# csrc/ck_gemm_moe_2stages_codegen/README.md: the tuner reads -i UNTUNED and writes -o TUNED (rows already tuned there
# are skipped without --last); the engine reads AITER_CONFIG_FMOE, default aiter/configs/tuned_fmoe.csv (jit/core.py).
AITER_FMOE_TUNER = "csrc/ck_gemm_moe_2stages_codegen/gemm_moe_tune.py"
AITER_FMOE_TUNED = "aiter/configs/tuned_fmoe.csv"


def aiter_padded_m(tokens: int) -> int:
    """The `token` value under which aiter looks up the tuned config for a batch of `tokens` rows
    (aiter/fused_moe.py: get_padded_M, nextPow2)."""
    if tokens < AITER_PADDED_M_TIERS[0]:
        return 1 if tokens <= 1 else 1 << (tokens - 1).bit_length()
    return max(tier for tier in AITER_PADDED_M_TIERS if tokens >= tier)


def default_image(engine: str) -> str | None:
    """The pinned image porter init writes for an engine: the one that installs the engine's own tree."""
    return next((entry.image for entry in IMAGE_LAYOUTS if entry.repo == engine), None)


def layouts_of(image: str) -> list[ImageLayout]:
    """Every tree a pinned image installs that the agent may patch."""
    return [entry for entry in IMAGE_LAYOUTS if entry.image == image]


def layout_for(image: str, repo: str) -> ImageLayout | None:
    return next((entry for entry in IMAGE_LAYOUTS if entry.image == image and entry.repo == repo), None)


def layout_notes(image: str, repos: dict[str, str]) -> list[str]:
    """One line per declared repo of a pinned image: where it is, and a warning when the task looks elsewhere."""
    notes = []
    for name, path in repos.items():
        known = layout_for(image, name)
        if known is None:
            continue
        if known.path == path:
            notes.append(f"repo {name}: {path} is where {image} installs it ({known.source})")
        else:
            notes.append(f"WARNING repo {name}: {image} installs it at {known.path}, not {path} ({known.source})")
    return notes
