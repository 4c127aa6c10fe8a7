"""The `vllm serve` flags the engine serves with, in vLLM 0.25.1's names, value choices and defaults, and how they map
onto the engine's ServeOptions.

Read in vllm 0.25.1 (PyPI wheel): vllm/engine/arg_utils.py (EngineArgs.add_cli_args: `--tensor-parallel-size/-tp`,
`--data-parallel-size/-dp`, `--pipeline-parallel-size/-pp`, `--enable-expert-parallel/-ep`, `--kv-cache-dtype`,
`--gpu-memory-utilization`, `--max-model-len`, `--max-num-batched-tokens`, `--max-num-seqs`, `--attention-backend`,
`--speculative-config/-sc`, `--served-model-name`, `--trust-remote-code`, `--enforce-eager`, `--load-format`
(a string; `dummy` initialises random weights), `--hf-overrides` (a JSON object over the config); booleans are
argparse.BooleanOptionalAction, so each has its `--no-` form; the defaults of max_num_batched_tokens and
max_num_seqs for the OpenAI server on a GPU of 70 GiB or more, 8192 and 1024, from
_set_default_max_num_seqs_and_batched_tokens_args), vllm/config/cache.py (CacheDType; gpu_memory_utilization
0.92), vllm/config/speculative.py (MTP methods; num_speculative_tokens defaults to the checkpoint's MTP layer
count), vllm/v1/attention/backends/registry.py (backend names), vllm/entrypoints/openai/cli_args.py (host None,
port 8000, served_model_name nargs +). The MoE layers are split over tp x dp ranks without expert parallelism
and hold whole experts on each of tp x dp ranks with it (model_executor/layers/fused_moe/config.py,
FusedMoEParallelConfig.make). --trust-remote-code, --dtype, --quantization, --block-size and
--enable-prefix-caching are accepted as vLLM accepts them and change nothing here. Does not cover the other
hundred flags (argparse refuses them as unknown).
"""

import argparse
import json
import re

from twin.engine import ServeOptions

CACHE_DTYPES = [
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "turboquant_k8v4",
    "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "int4_per_token_head", "int8_per_token_head",
    "fp8_per_token_head", "nvfp4",
]  # fmt: skip
ENGINE_KV_DTYPES = {
    "auto": "auto",
    "bfloat16": "bf16",
    "fp8": "fp8_e4m3",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
}
ATTENTION_BACKENDS = [
    "FLASH_ATTN", "FLASH_ATTN_DIFFKV", "TRITON_ATTN", "TRITON_ATTN_DIFFKV", "ROCM_ATTN", "ROCM_AITER_MLA",
    "ROCM_AITER_TRITON_MLA", "ROCM_AITER_FA", "ROCM_AITER_MLA_SPARSE", "XPU_MLA_SPARSE", "TORCH_SDPA", "FLASHINFER",
    "FLASHINFER_MLA", "TOKENSPEED_MLA", "FLASHINFER_MLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM120", "TRITON_MLA",
    "CUTLASS_MLA", "FLASHMLA", "FLASHMLA_SPARSE", "FLASHMLA_SPARSE_DSV4", "FLASHINFER_MLA_SPARSE_DSV4",
    "ROCM_FLASHMLA_SPARSE_DSV4", "FLASH_ATTN_MLA", "FLASH_ATTN_MLA_SPARSE", "MINIMAX_M3_SPARSE", "NO_ATTENTION",
    "FLEX_ATTENTION", "HPC_ATTN", "ROCM_AITER_UNIFIED_ATTN", "CPU_ATTN", "TURBOQUANT", "CUSTOM",
]  # fmt: skip
# vLLM's ROCm MLA backends, as the engine's backends (the aiter-triton one decodes with aiter's triton kernel)
ENGINE_MLA_BACKENDS = {"ROCM_AITER_MLA": "aiter", "TRITON_MLA": "triton", "ROCM_AITER_TRITON_MLA": "triton"}
MTP_METHODS = (
    "deepseek_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp", "glm_ocr_mtp", "ernie_mtp",
    "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp", "qwen3_5_mtp", "longcat_flash_mtp",
    "minimax_m3_mtp", "bailing_hybrid_mtp", "mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp", "gemma4_mtp",
)  # fmt: skip
SPECULATIVE_METHODS = (
    "ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
    "extract_hidden_states", *MTP_METHODS, "dflash", "ngram_gpu", "dspark",
)  # fmt: skip
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
DEFAULT_MAX_NUM_SEQS = 1024


def human_readable_int(value: str) -> int:
    """vLLM's: 25600, 25.6k (thousands) or 25K (1024s); max_model_len also takes `auto` / -1 (None here)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG]?)", value.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"Invalid number: {value!r}")
    number, unit = float(match.group(1)), match.group(2)
    factor = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "K": 2**10, "M": 2**20, "G": 2**30}[unit]
    return int(number * factor)


def int_or_auto(value: str) -> int | None:
    return None if value.strip() in ("auto", "-1") else human_readable_int(value)


def dict_or_none(value: str) -> dict | None:
    """A JSON object (`--speculative-config '{"method": "mtp", ...}'`), or None for "None"."""
    if value == "None":
        return None
    if not re.match(r"(?s)^\s*{.*}\s*$", value):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {value!r}")
    return json.loads(value)


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    boolean = argparse.BooleanOptionalAction
    parser.add_argument("--model", default=None)
    parser.add_argument("--served-model-name", nargs="+", default=None)
    parser.add_argument("--trust-remote-code", action=boolean, default=False)
    parser.add_argument("--dtype", default="auto", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    parser.add_argument("--max-model-len", type=int_or_auto, default=None)
    parser.add_argument("--quantization", "-q", default=None)
    parser.add_argument("--enforce-eager", action=boolean, default=False)
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    parser.add_argument("--enable-expert-parallel", "-ep", action=boolean, default=False)
    parser.add_argument("--block-size", type=int, default=None)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    parser.add_argument("--kv-cache-dtype", default="auto", choices=CACHE_DTYPES)
    parser.add_argument("--enable-prefix-caching", action=boolean, default=None)
    parser.add_argument("--max-num-batched-tokens", type=human_readable_int, default=None)
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--attention-backend", default=None)
    parser.add_argument("--speculative-config", "-sc", type=dict_or_none, default=None)
    parser.add_argument("--hf-overrides", type=dict_or_none, default=None)
    parser.add_argument("--load-format", default="auto")


def _speculative(args: argparse.Namespace, config: dict) -> tuple[str | None, int]:
    """The speculative method and its token count (num_speculative_tokens, else the checkpoint's MTP layers)."""
    speculative = args.speculative_config
    if not speculative:
        return None, 0
    method = speculative.get("method")
    if method not in SPECULATIVE_METHODS:
        raise NotImplementedError(f"Unsupported speculative method: '{method}'")
    if method not in MTP_METHODS:
        raise NotImplementedError(f"the twin drafts with the checkpoint's MTP layers only, not '{method}'")
    layers = int(config.get("num_nextn_predict_layers") or 0)
    if layers == 0:
        raise ValueError(f"{config['architectures'][0]} has no MTP layers (num_nextn_predict_layers is 0)")
    tokens = speculative.get("num_speculative_tokens") or layers
    if not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"num_speculative_tokens must be a positive integer, got {tokens!r}")
    return "mtp", tokens


def _kv_cache_dtype(value: str) -> str:
    if value not in ENGINE_KV_DTYPES:
        raise NotImplementedError(f"kv_cache_dtype {value!r} is not supported on ROCm by this build")
    return ENGINE_KV_DTYPES[value]


def _attention_backend(value: str | None) -> str | None:
    if value is None or value == "auto":
        return None
    if value not in ATTENTION_BACKENDS:
        raise ValueError(f"Unknown attention backend: '{value}'. Valid options are: {', '.join(ATTENTION_BACKENDS)}")
    if value not in ENGINE_MLA_BACKENDS:
        raise ValueError(
            f"Selected backend AttentionBackendEnum.{value} is not valid for this configuration. "
            "Reason: ['MLA not supported']"
        )
    return ENGINE_MLA_BACKENDS[value]


def serve_options(args: argparse.Namespace, config: dict) -> ServeOptions:
    """The engine's options for these flags and this checkpoint (its MTP layer count)."""
    tp, dp = args.tensor_parallel_size, args.data_parallel_size
    if args.pipeline_parallel_size != 1:
        raise NotImplementedError("the twin serves without pipeline parallelism (pipeline_parallel_size 1)")
    method, tokens = _speculative(args, config)
    expert_parallel = args.enable_expert_parallel and tp * dp > 1
    return ServeOptions(
        model_path=args.model,
        served_model_name=(args.served_model_name or [None])[0],
        host=args.host or "0.0.0.0",
        port=args.port,
        tp=tp,
        dp=dp,
        ep=tp * dp if expert_parallel else 1,
        moe_tp=1 if expert_parallel else tp * dp,
        kv_cache_dtype=_kv_cache_dtype(args.kv_cache_dtype),
        spec_method=method,
        spec_steps=tokens,
        spec_topk=1 if method else 0,
        spec_draft_tokens=tokens + 1 if method else 0,
        mem_fraction_static=args.gpu_memory_utilization,
        attention_backend=_attention_backend(args.attention_backend),
        context_length=args.max_model_len,
        chunked_prefill_size=args.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS,
        max_running_requests=args.max_num_seqs or DEFAULT_MAX_NUM_SEQS,
        load_format=args.load_format,
        model_override_args=args.hf_overrides or {},
        cuda_graphs=not args.enforce_eager,
    )
