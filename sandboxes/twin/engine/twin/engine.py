"""The engine behind every front: start-up (load, kernels, memory, graphs) and serving, in the front's words.

A front (sglang's `python3 -m twin.launch_server`, or vLLM's `vllm serve` in the vLLM image) parses its own CLI
into `ServeOptions` and gives a `Wording`: the log lines, crash output and batch statistics of that engine. Start-
up builds the parameter slots from the quantization config, loads the checkpoint, JIT-builds the C++ kernels with
hipcc, chooses the kernels (MLA prefill, FP8 GEMM, DSA top-k, fused MoE for the captured batch sizes) and plans
memory. The model implementation comes from the checkpoint's architectures (models/). Does not cover request
handling (openai_api.py) or how fast anything runs (the device, device.py).
"""

import asyncio
import json
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from twin import attention, device, fp8_block, jit, memory, mla_prefill, moe, mxfp4, solver
from twin.environ import envs
from twin.http_server import make_connection_handler
from twin.model_loader import load_config, loader
from twin.models import model_for
from twin.openai_api import Api
from twin.quantization import QuarkConfig, from_config
from twin.scheduler import Replica, Router

CAPTURE_BATCH_SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256]
PREFIX_CACHE_TOKEN_LIMIT = 1_000_000
TORCH_INIT_GB = 1.09  # what the process group and the runtime hold on each GPU before the weights


@dataclass(frozen=True)
class ServeOptions(load_config.LoadConfig):
    """What a front asks the engine for, in the engine's terms (each front maps its own flags onto these)."""

    model_path: str
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 30000
    tp: int = 1
    dp: int = 1
    ep: int = 1  # expert-parallel ranks: each holds 1/ep of the routed experts, whole
    moe_tp: int = 1  # the ranks one routed expert's width is split over
    moe_pad_to: int = 0  # the MoE kernels pad each rank's expert width to a multiple of this (0: they do not)
    kv_cache_dtype: str = "auto"  # auto, bf16, fp8_e4m3, fp8_e5m2, fp4_e2m1
    spec_method: str | None = None
    spec_steps: int = 0
    spec_topk: int = 0
    spec_draft_tokens: int = 0
    allreduce_fusion: bool = False
    mem_fraction_static: float = 0.85  # the share of each GPU's memory for weights and the KV cache
    attention_backend: str | None = None
    context_length: int | None = None
    chunked_prefill_size: int = 16384
    max_running_requests: int = 256
    dsa_decode_backend: str | None = None  # the sparse-attention decode backend a DSA model reads its KV cache with
    # the front's switch (an EnvBool) for the fused DSA top-k v2 kernel, read when the graphs are captured and
    # built then if true; None: the front has no such kernel
    dsa_topk_v2_env: str | None = None


class Wording(Protocol):
    """One engine's log lines and crash output (each front implements it)."""

    api_owner: str  # the `owned_by` of /v1/models
    sglang_routes: bool  # /get_server_info, /flush_cache, /health_generate

    def stage(self, name: str, **values) -> None: ...  # a start-up milestone (names: see Engine)

    def info(self, message: str) -> None: ...

    def memory_error(self, weights: float, static: float, fraction: float) -> Exception: ...

    def batch_stats(self, rank: str, max_total_tokens: int, draft_tokens: int): ...  # prefill(...), decode(...)

    def replica_ranks(self) -> list[str]: ...

    def crash(self, traceback_text: str) -> None: ...


class Engine:
    """What start-up produces: the model's timing shape, its numerics, and the server info."""

    def __init__(self, options: ServeOptions, wording: Wording):
        self.options = options
        self.wording = wording
        self.model_path = Path(options.model_path)
        self.config = json.loads((self.model_path / "config.json").read_text()) | options.model_override_args
        self.model = model_for(self.config)
        self.context_length = options.context_length or self.config["max_position_embeddings"]
        self.moe: moe.Selector | None = None
        self.kernels: dict[str, str] = {}
        self.garbage: tuple[str, ...] = ()
        self.fp4_unit_scale = 1.0  # what the MXFP4 linear path multiplies a unit-scale group by (mxfp4.py)
        self.max_total_tokens = 0
        self.weights_gb = 0.0

    def start(self) -> None:
        options, say = self.options, self.wording.stage
        gpus = int(device.properties()["count"])
        if options.tp * options.dp > gpus:
            raise RuntimeError(f"tp_size * dp_size = {options.tp * options.dp} exceeds the {gpus} visible GPUs")
        say("init_begin")
        say("init_end", elapsed=device.wait("init_distributed"))
        backend = attention.select_backend(options.attention_backend, use_mla=True)
        say("attention_backend", backend=backend, arch=attention.gpu_arch(), kv_cache_dtype=options.kv_cache_dtype)
        attention.check_kv_dtype(backend, attention.kv_torch_dtype(options.kv_cache_dtype))
        quant = self._load_weights()
        self._select_kernels(backend, quant)
        self._plan_memory()

    def _per_gpu_gb(self, params: dict, quant) -> float:
        """The share of the slots one GPU holds: routed experts split over moe_tp x ep ranks (padded as the MoE
        kernels pad them), the rest over tp."""
        experts, other = loader.slot_bytes(params)
        experts *= getattr(quant, "moe_padding", 1.0)
        return (experts / (self.options.moe_tp * self.options.ep) + other / self.options.tp) / 1e9

    def _load_weights(self):
        options, config, say = self.options, self.config, self.wording.stage
        quant = from_config(config["quantization_config"], self.model_path / "config.json")
        self.wording.info(quant.describe())
        available = memory.total_memory_gb() - TORCH_INIT_GB
        say("load_begin", available=available, draft=False)
        started = time.monotonic()
        params = loader.build_params(self.model.target_params(config, quant, options))
        count = self.model.load_weights(params, loader.tensors(options), config, draft=False)
        self.weights_gb = self._per_gpu_gb(params, quant)
        available -= self.weights_gb
        kind = config["architectures"][0]
        elapsed = time.monotonic() - started
        say("load_end", elapsed=elapsed, kind=kind, available=available, used=self.weights_gb, draft=False)
        if options.spec_method:
            nextn = config["num_hidden_layers"]
            say("draft_begin", layer=nextn, method=options.spec_method, available=available)
            started = time.monotonic()
            draft = loader.build_params(self.model.draft_params(config, quant, options))
            tensors = loader.tensors(options, loader.shards(self.model_path, layer=nextn))
            count += self.model.load_weights(draft, tensors, config, draft=True)
            params.update({f"draft.{name}": param for name, param in draft.items()})
            used = self._per_gpu_gb(draft, quant)
            self.weights_gb += used
            elapsed = time.monotonic() - started
            say("load_end", elapsed=elapsed, kind=f"{kind}NextN", available=available - used, used=used, draft=True)
        self.garbage = loader.garbage_modules(params, options)
        say("loaded", count=count)
        return quant

    def _select_kernels(self, backend: str, quant) -> None:
        options, config = self.options, self.config
        attention.check_backend(backend, config["kv_lora_rank"], config["qk_rope_head_dim"])
        jit.mla_rope_and_cache()
        qk_head = config["qk_nope_head_dim"] + config["qk_rope_head_dim"]
        self.kernels["mla_prefill"] = mla_prefill.select(qk_head, config["v_head_dim"])
        if isinstance(quant, fp8_block.Fp8Config):
            self.kernels["gemm"] = fp8_block.select_gemm(quant)
        if isinstance(quant, QuarkConfig):
            self.fp4_unit_scale = mxfp4.unit_scale(attention.gpu_arch())
        shape = moe.MoeShape(
            config["hidden_size"],
            self._moe_inter_dim(),
            config["n_routed_experts"],
            config["num_experts_per_tok"],
            quant.moe_quant,
        )
        self.moe = moe.Selector(shape)
        if options.spec_steps >= 4:
            self.wording.info(f"Draft depth {options.spec_steps} >= 4: using the fused multi-step metadata kernel")
            jit.fused_multistep_metadata(options.spec_steps, options.spec_topk or 1)

    def _moe_inter_dim(self) -> int:
        """The expert width one rank's MoE kernel runs: aiter keys its configs by it (moe_tp ranks share an
        expert's width, padded to whole multiples when the front's kernels pad)."""
        width, pad = self.config["moe_intermediate_size"] // self.options.moe_tp, self.options.moe_pad_to
        return -(-width // pad) * pad if pad else width

    def tokens_per_decode_step(self) -> int:
        """Tokens one running request puts through the target model per decode step (its drafts when verifying)."""
        return (self.options.spec_draft_tokens or 1) if self.options.spec_method else 1

    def _plan_memory(self) -> None:
        options, config = self.options, self.config
        layers = config["num_hidden_layers"] + (1 if options.spec_method else 0)
        kv_dims = config["kv_lora_rank"] + config["qk_rope_head_dim"]
        fraction = options.mem_fraction_static
        static = memory.total_memory_gb() * fraction
        if static <= self.weights_gb:
            raise self.wording.memory_error(self.weights_gb, static, fraction)
        plan = memory.plan(self.weights_gb, kv_dims, fraction, options.kv_cache_dtype, layers, self.context_length)
        self.max_total_tokens = plan.max_total_tokens
        self.wording.stage("kv_cache", tokens=plan.max_total_tokens, gb=plan.kv_pool_gb, context=self.context_length)
        self._capture_graphs(plan)

    def _capture_graphs(self, plan: memory.MemoryPlan) -> None:
        """Capture the decode graphs (and the draft's, with speculative decoding), as the engines' runners do."""
        say, free = self.wording.stage, plan.workspace_free_gb
        say("capture_begin", available=free, batch_sizes=CAPTURE_BATCH_SIZES)
        memory.capture_graphs(plan)
        if self.options.dsa_topk_v2_env and getattr(envs, self.options.dsa_topk_v2_env).get():
            jit.topk_v2()
        for batch_size in CAPTURE_BATCH_SIZES:  # each captured decode runs the MoE at its own size
            self.moe.kernel(batch_size * self.tokens_per_decode_step())
        elapsed = device.wait("capture", batch_sizes=len(CAPTURE_BATCH_SIZES))
        used = plan.workspace_needed_gb
        say("capture_end", elapsed=elapsed, used=used, available=free - used, draft=False)
        if self.options.spec_method:
            say("draft_capture_begin", available=free - used)
            steps = self.options.spec_steps
            elapsed = device.wait("capture_draft", batch_sizes=len(CAPTURE_BATCH_SIZES), steps=steps)
            say("capture_end", elapsed=elapsed, used=0.52, available=free - used - 0.52, draft=True)

    def launch_config(self) -> dict:
        """What one replica launches on the device: its TP group, KV dtype, kernels and draft shape."""
        options = self.options
        return {
            "tp": options.tp,
            "dp": options.dp,
            "moe_tp": options.moe_tp,
            "kv_cache_dtype": options.kv_cache_dtype,
            "dsa_decode_backend": options.dsa_decode_backend,
            "kernels": self.kernels,
            "allreduce_fusion": options.allreduce_fusion,
            "spec_steps": options.spec_steps,
            "spec_topk": options.spec_topk,
            "spec_draft_tokens": options.spec_draft_tokens,
            "max_total_tokens": self.max_total_tokens,
        }

    def server_info(self, front_args: dict) -> dict:
        return front_args | {
            "context_length": self.context_length,
            "max_total_num_tokens": self.max_total_tokens,
            "moe_tuned": self.moe.all_tuned(),
        }


async def serve(engine: Engine, front_args: dict) -> None:
    options, wording = engine.options, engine.wording
    config = engine.launch_config()
    cache_tokens = min(engine.max_total_tokens, PREFIX_CACHE_TOKEN_LIMIT)
    replicas = [
        Replica(
            config,
            cache_tokens,
            options.chunked_prefill_size,
            options.max_running_requests,
            wording.batch_stats(rank, engine.max_total_tokens or 10**9, options.spec_draft_tokens),
            engine.moe,
        )
        for rank in wording.replica_ranks()
    ]
    router = Router(replicas)
    router.start()
    error_rates = device.call(
        "numerics",
        kv_cache_dtype=options.kv_cache_dtype,
        corrupt=bool(engine.garbage),
        fp4_unit_scale=engine.fp4_unit_scale,
    )
    numerics = solver.Numerics(tuple(error_rates["error_rates"]), engine.garbage)
    name = options.served_model_name or options.model_path
    api = Api(router, name, engine.server_info(front_args), numerics, wording.api_owner, wording.sglang_routes)
    server = await asyncio.start_server(make_connection_handler(api.handle), options.host, options.port, limit=2**24)
    wording.stage("ready", host=options.host, port=options.port)
    async with server:
        await server.serve_forever()


def started(options: ServeOptions, wording: Wording) -> Engine | None:
    """The engine after start-up, or None when start-up failed (its traceback said in the front's words)."""
    engine = (Engine if options.cuda_graphs else eager_engine())(options, wording)
    try:
        engine.start()
    except Exception:
        wording.crash(traceback.format_exc())
        return None
    return engine


def run(options: ServeOptions, wording: Wording, front_args: dict) -> int:
    """Start up and serve until interrupted; 1 when start-up fails (its traceback in the front's words)."""
    engine = started(options, wording)
    if engine is None:
        return 1
    try:
        asyncio.run(serve(engine, front_args))
    except KeyboardInterrupt:
        return 0
    return 0


def eager_engine() -> type[Engine]:
    """The engine for a start-up with graphs disabled: every forward runs eagerly (model_loader/eager_runner.py)."""
    from twin.model_loader.eager_runner import EagerEngine  # it builds on Engine

    return EagerEngine
