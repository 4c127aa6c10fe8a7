"""vLLM, declared once: its launch, flags and start-up lines as vLLM 0.25.1 spells them.

Read in the vLLM 0.25.1 wheel (the version of vllm/vllm-openai-rocm:v0.25.1): `vllm serve MODEL` with
EngineArgs.add_cli_args (vllm/engine/arg_utils.py): `--tensor-parallel-size/-tp`, `--data-parallel-size/-dp`,
`--pipeline-parallel-size/-pp`, `--enable-expert-parallel`, `--kv-cache-dtype` (vllm/config/cache.py
CacheDType), `--gpu-memory-utilization`, `--attention-backend`, `--served-model-name`, and the draft as one
JSON flag `--speculative-config '{"method": "mtp", "num_speculative_tokens": N}'`; port 8000. Start-up
lines: default_loader.py "Loading weights took", gpu_model_runner.py "Model loading took", "Graph capturing
finished", v1/engine/core.py "init engine (profile, create kv cache, warmup model) took", api_server.py
"Starting vLLM server", uvicorn's "Application startup complete.". vLLM 0.34.0's engine/arg_utils.py spells
every flag above alike (no respellings).
What `porter init` plans with: without `--enable-expert-parallel` the MoE layers shard over tp x dp ranks
(model_executor/layers/fused_moe/config.py, FusedMoEParallelConfig.make: flatten_tp_across_dp_and_pcp), with it each
of those ranks holds whole experts; `--max-num-batched-tokens` bounds one step; `--gpu-memory-utilization` defaults to
0.92 (config/cache.py) and covers weights, profiled activations and the KV cache; VLLM_ROCM_USE_AITER is off unless
set (envs.py), on in the public ROCm recipes.
Its PRs: `[ROCm]` titles, Purpose / Test Plan / Test Result, as report/pr_draft.py had them (not re-read).
Its client, `vllm bench serve` (vllm/benchmarks/serve.py, datasets/datasets.py): `--backend vllm --host --port
--model --dataset-name random --random-prefix-len` (one prefix shared by every request) `--random-input-len` (the
part after it) `--random-output-len --ignore-eos --request-rate --num-prompts --max-concurrency --seed`.
"""

from __future__ import annotations

import shlex

from porter.engines.engine import BenchLoad, Engine, PrStyle, json_draft

SPECULATIVE_CONFIG = "speculative-config"
draft_flags, read_draft = json_draft(SPECULATIVE_CONFIG)


def bench_client(port: int, model: str, load: BenchLoad) -> list[str]:
    shared = f"--random-prefix-len {load.prefix_tokens} " if load.prefix_tokens else ""
    return [
        f"vllm bench serve --backend vllm --host 127.0.0.1 --port {port} --model {shlex.quote(model)} --dataset-name "
        f"random {shared}--random-input-len {load.input_tokens - load.prefix_tokens} --random-output-len "
        f"{load.output_tokens} --ignore-eos {load.pacing}"
    ]


ENGINE = Engine(
    name="vllm",
    launch="vllm serve {model_path} --host {host} --port {port} {flags}",
    launched_by=r"(^|[\s/])vllm(\s|$)|vllm\.entrypoints",
    default_port=8000,
    version="0.25.1",
    tensor_parallel=("tensor-parallel-size",),
    data_parallel=("data-parallel-size",),
    pipeline_parallel=("pipeline-parallel-size",),
    expert_parallel=("enable-expert-parallel",),
    dp_attention=None,
    memory_fraction="gpu-memory-utilization",
    model_flags=("model",),
    speculative_flags=(SPECULATIVE_CONFIG,),
    draft_flags=draft_flags,
    read_draft=read_draft,
    stages=(
        ("weights loaded", r"Loading weights took|Model loading took"),
        ("graphs captured", r"Graph capturing finished"),
        ("engine ready", r"init engine \(profile, create kv cache, warmup model\) took"),
        ("serving", r"Starting vLLM (API )?server|Application startup complete"),
    ),
    one_batch="vllm bench latency --model MODEL --batch-size 8 --input-len 1024 --output-len 32 (plus the serve "
    "flags): end-to-end latency of one batch, without the HTTP server",
    expert_parallel_switch=True,
    moe_over_data_parallel=True,
    memory_share=0.92,
    max_batched_tokens="max-num-batched-tokens",
    config_override="hf-overrides",  # arg_utils.py at 0.25.1 and 0.34.0: config/model.py ModelConfig.hf_overrides
    eager=(("enforce-eager", True),),  # arg_utils.py at 0.25.1 and 0.34.0
    mtp_method="mtp",
    rocm_environment=(("VLLM_ROCM_USE_AITER", "1"),),
    pr_style=PrStyle(
        "[ROCm] ",
        (
            ("Purpose", ("problem", "cause", "fix")),
            ("Test Plan", ("tested", "environment", "reproduce")),
            ("Test Result", ("speed", "accuracy")),
        ),
    ),
    bench_client=bench_client,
    kernel_lines=(  # platforms/rocm.py "Using %s backend out of ..."; fused_moe/oracle/*.py "Using X Fp8 MoE backend"
        ("attention backend", r"\bUsing \w+ (?:attention )?backend (?:out of|\(selected via)"),
        ("MoE backend", r"\bMoE backend\b"),
    ),
    # config/vllm.py: the hybrid KV cache manager, which keeps a sliding layer's window only, is on where the
    # platform supports it (platforms/rocm.py support_hybrid_kv_cache: True) and off by default with chunked local
    # attention (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE unset): chunked layers keep every token's KV
    bounds_window=lambda architecture, mixer: mixer == "sliding",
)
