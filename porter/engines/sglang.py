"""sglang, declared once: its launch, flags and start-up lines as sglang 0.5.20 spells them.

Read in the sglang 0.5.20 wheel (the version of lmsysorg/sglang-rocm:v0.5.20-rocm720-mi35x, the real task's image):
flags are dataclass fields of sglang/srt/arg_groups/fields/*.py turned into argparse options (`--tp-size` alias
`--tensor-parallel-size` and `--dp-size` alias `--data-parallel-size` in parallel.py, `--ep-size` alias
`--expert-parallel-size`, `--enable-dp-attention`; speculative-* in spec.py, EAGLE being also the MTP/NEXTN head's
algorithm; `--kv-cache-dtype` and `--attention-backend` in model.py/choices.py; `--mem-fraction-static`;
`--served-model-name`), the port's default 30000 (fields/serving.py). `--tp` and `--dp` are argparse abbreviations
sglang's own recipes use (`--pp` is ambiguous). DP attention at 0.5.20 is `--enable-dp-attention --dp-size N` (N
attention groups within the TP ranks; its help names "DeepSeek-V2 and Qwen 2/3 MoE models" as supported,
`dp_attention_architectures`: their model classes in models/deepseek_v2.py, qwen2_moe.py, qwen3_moe.py); 0.5.23 adds
`--attn-dp-size` and keeps `--enable-dp-attention` as a deprecated DeprecatedStoreTrueAction (server_args.py, "TODO:
remove ... after 2026-12-31") that arg_groups/parallel_hook.py handle_deprecated_dp_attention turns into attn_dp_size
= dp_size, dp_size = 1: `respellings`. Start-up lines (checked per release by tests/conformance): bootstrap.py "Init
torch distributed ends" (0.5.23: "Init parallel ends"), model_runner.py "Load weight end", cuda_graph_setup.py
"Capture {target|draft} ... CUDA graph end".
What `porter init` plans with: `--ep-size` is a group size within the TP ranks; without DP attention each
`--dp-size` replica holds its own copy of the model, MoE split over its own TP ranks; `--chunked-prefill-size`
bounds the tokens of a prefill step (fields/schedule.py); `--trust-remote-code`. `--mem-fraction-static` is
(weights + KV pool) / device memory and defaults to an estimate, (memory - reserve) / memory with a reserve of
0.5 GB + 1.5 MB per chunked-prefill token + 1 GB x tp x pp / 8 + graphs, at least 10 GB above 60 GB
(arg_groups/memory_hook.py, handle_gpu_memory_settings): about 0.9 on a 288 GB GPU with 16k-token chunks; init writes
0.85, the value of the public GLM-5.2 MI355X recipe (SemiAnalysisAI/InferenceX glm5.2_fp4_mi355x_sglang_mtp.sh
uses 0.80-0.85), a tunable. SGLANG_USE_AITER is off in srt/environ.py (EnvBool(False)) and on in the ROCm image.
Its PRs: `[AMD]` titles and its pull request template's headings, as report/pr_draft.py had them (not re-read:
the copy of .github/pull_request_template.md read at 0a218a4c has Benchmark & Profiling, no Accuracy Tests). Its
client, `python3 -m sglang.bench_serving` (a shim of sglang/benchmark/serving.py): `--backend sglang --host --port
--dataset-name random --random-input-len --random-output-len --random-range-ratio` (lengths drawn from
[len x ratio, len], datasets/common.py compute_random_lens: 1 fixes them) `--request-rate --num-prompts
--max-concurrency --seed`, and the shared-prefix dataset `--dataset-name generated-shared-prefix
--gsp-system-prompt-len --gsp-question-len --gsp-output-len`; requests ignore EOS unless --disable-ignore-eos.
"""

from __future__ import annotations

from porter.engines.engine import BenchLoad, Draft, Engine, PrStyle, Respelling
from porter.schema import FlagValue

DATA_PARALLEL = ("dp-size", "data-parallel-size", "dp")
ALGORITHM, STEPS, TOPK, DRAFT_TOKENS = (
    "speculative-algorithm",
    "speculative-num-steps",
    "speculative-eagle-topk",
    "speculative-num-draft-tokens",
)


def draft_flags(draft: Draft) -> dict[str, FlagValue]:
    tokens = draft.draft_tokens or draft.steps + 1
    return {ALGORITHM: draft.method, STEPS: draft.steps, TOPK: draft.topk, DRAFT_TOKENS: tokens}


def read_draft(flags: dict[str, FlagValue]) -> Draft | None:
    method, steps = flags.get(ALGORITHM), flags.get(STEPS)
    if not method or not isinstance(steps, int):
        return None
    topk, tokens = flags.get(TOPK), flags.get(DRAFT_TOKENS)
    return Draft(str(method), steps, topk if isinstance(topk, int) else 1, tokens if isinstance(tokens, int) else None)


def bench_client(port: int, model: str, load: BenchLoad) -> list[str]:
    command = (
        f"python3 -m sglang.bench_serving --backend sglang --host 127.0.0.1 --port {port} --dataset-name random "
        f"--random-input-len {load.input_tokens} --random-output-len {load.output_tokens} --random-range-ratio 1 "
        f"{load.pacing}"
    )
    if not load.prefix_tokens:
        return [command]
    return [
        command,
        f"# {load.prefix_tokens / load.input_tokens:.0%} of each prompt ({load.prefix_tokens} tokens) is a prefix "
        "shared by a group of requests in porter's workload; bench_serving's shared-prefix dataset is the closest: "
        f"--dataset-name generated-shared-prefix --gsp-system-prompt-len {load.prefix_tokens} "
        f"--gsp-question-len {load.input_tokens - load.prefix_tokens} --gsp-output-len {load.output_tokens}",
    ]


# The architectures whose sliding-window and chunked layers sglang 0.5.20 keeps in its hybrid pool, a window each
# (configs/model_config.py is_hybrid_swa_model, with SWA_SINK_ARCHS and MIMO_V2_MODEL_ARCHS; Laguna only with a
# sliding_window); any other model's windowed layers keep every token's KV. Checked against the wheel by
# tests/conformance/test_conformance_windows.py.
HYBRID_SWA = frozenset(
    "Llama4ForConditionalGeneration DeepseekV4ForCausalLM DeepseekV4ForCausalLMNextN DeepseekV4ForCausalLMDSpark "
    "GptOssForCausalLM GraniteSWAForCausalLM GraniteMoeSWAForCausalLM MiMoV2ForCausalLM MiMoV2FlashForCausalLM "
    "MiMoV2MTP Step3p5ForCausalLM Step3p5MTP Step3p7ForConditionalGeneration Gemma4ForCausalLM "
    "Gemma4ForConditionalGeneration Gemma4UnifiedForConditionalGeneration LagunaForCausalLM MellumForCausalLM "
    "MuseGlimmerForCausalLM MuseGlimmerForConditionalGeneration InklingForConditionalGeneration "
    "InklingForConditionalGenerationMTP UnlimitedOCRForCausalLM".split()
)

ENGINE = Engine(
    name="sglang",
    launch="python3 -m sglang.launch_server --model-path {model_path} --host {host} --port {port} {flags}",
    launched_by=r"\bsglang\.launch_server\b",
    default_port=30000,
    version="0.5.20",
    tensor_parallel=("tp-size", "tensor-parallel-size", "tp"),
    data_parallel=DATA_PARALLEL,
    pipeline_parallel=("pp-size", "pipeline-parallel-size"),
    expert_parallel=("ep-size", "expert-parallel-size"),
    dp_attention="enable-dp-attention",
    memory_fraction="mem-fraction-static",
    model_flags=("model-path",),
    speculative_flags=(ALGORITHM, STEPS, TOPK, DRAFT_TOKENS),
    draft_flags=draft_flags,
    read_draft=read_draft,
    stages=(
        ("process group", r"Init (torch distributed|parallel) ends"),
        ("weights loaded", r"Load weight end"),
        ("memory pool", r"KV Cache is allocated|Memory pool end"),
        ("graphs captured", r"Capture (target |draft )?(decode |verify |extend |prefill )?(cuda|CUDA) graph end"),
        ("serving", r"The server is fired up and ready to roll"),
    ),
    one_batch="python3 -m sglang.bench_one_batch --model-path MODEL --batch-size 1 8 32 --input-len 1024 "
    "--output-len 32 (plus the serve flags): prefill and decode time per batch, without the HTTP server",
    expert_parallel_switch=False,
    moe_over_data_parallel=False,
    memory_share=0.85,
    max_batched_tokens="chunked-prefill-size",
    config_override="json-model-override-args",  # fields/model.py at 0.5.20 and 0.5.23, default "{}"
    # fields/exec_.py at 0.5.20 and 0.5.23; server_args.py keeps --disable-cuda-graph as their deprecated spelling
    eager=(("cuda-graph-backend-decode", "disabled"), ("cuda-graph-backend-prefill", "disabled")),
    mtp_method="EAGLE",
    rocm_environment=(("SGLANG_USE_AITER", "1"),),
    pr_style=PrStyle(
        "[AMD] ",
        (
            ("Motivation", ("problem", "cause")),
            ("Modifications", ("fix",)),
            ("Accuracy Tests", ("accuracy",)),
            ("Speed Tests and Profiling", ("speed", "tested")),
            ("Reproduction", ("environment", "reproduce")),
        ),
    ),
    bench_client=bench_client,
    kernel_lines=(  # arg_groups/model_hook.py, model_overrides/*.py, moe_hook.py; the arguments dump (server_args=)
        ("attention backend", r"\battention backends?\b|\bDSA backends\b|\battention_backend='"),
        ("MoE backend", r"\bMoE runner backend\b|\bmoe_runner_backend[=`']"),
    ),
    respellings=(Respelling("0.5.23", "enable-dp-attention", "attn-dp-size", value_of=DATA_PARALLEL),),
    dp_attention_architectures=tuple(
        "DeepseekV2ForCausalLM DeepseekV3ForCausalLM Qwen2MoeForCausalLM Qwen3MoeForCausalLM".split()
    ),
    bounds_window=lambda architecture, mixer: architecture in HYBRID_SWA,
)
