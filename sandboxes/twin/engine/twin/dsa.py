"""DeepSeek sparse attention (DSA): the prefill/decode backends and the decode top-k path on ROCm, after sglang's
arg_groups/overrides.py and model_hook.py."""

from twin import logs
from twin.environ import envs

BACKEND_CHOICES = (
    "flashmla_sparse", "flashmla_sparse_q8", "flashmla_kv", "flashmla_auto", "flashinfer_sparse_mla", "fa3",
    "tilelang", "triton", "aiter", "trtllm",
)  # fmt: skip
ROCM_BACKENDS = ("tilelang", "triton", "aiter")
DSA_ARCHITECTURES = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM")
TOPK_V2 = "SGLANG_OPT_USE_TOPK_V2"


def is_dsa(config: dict) -> bool:
    return config["architectures"][0] in DSA_ARCHITECTURES and config.get("index_topk") is not None


def resolve_backends(prefill: str | None, decode: str | None, kv_cache_dtype: str) -> tuple[str, str]:
    """The prefill and decode backends: the flags, else the ROCm default; a CUDA-only backend is refused."""
    prefill, decode = prefill or "triton", decode or "triton"
    for option, backend in (("--dsa-prefill-backend", prefill), ("--dsa-decode-backend", decode)):
        if backend not in ROCM_BACKENDS:
            raise ValueError(
                f"{option} {backend} is not supported on ROCm/HIP; the DSA backends available on ROCm are "
                f"{', '.join(ROCM_BACKENDS)}"
            )
    logs.warning(f"Set DSA backends for {kv_cache_dtype} KV Cache: prefill={prefill}, decode={decode}.")
    return prefill, decode


def rocm_model_hook() -> None:
    """A DSA model on ROCm keeps the fused top-k v2 kernel off unless the environment asks for it."""
    if not envs.SGLANG_OPT_USE_TOPK_V2.is_set():
        envs.SGLANG_OPT_USE_TOPK_V2.set(False)
