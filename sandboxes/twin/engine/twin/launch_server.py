"""`python3 -m twin.launch_server`: sglang-style flags, start-up (load, kernels, memory), then the HTTP server.

Start-up runs the real code paths that carry the day-0 defects: the Quark exclude lookup while building
parameter slots, the weight loader's shape check, the JIT build of C++ kernels through hipcc, the DSA
backends and top-k path, the MoE tuned-config lookup for the captured batch sizes and the memory plan. Any
start-up exception is printed per rank the way sglang's scheduler processes print it, and the process exits
with status 1. Does not cover request handling (openai_api.py) or how fast anything runs (the device,
device.py).
"""

import argparse
import asyncio
import json
import sys
import time
import traceback
from pathlib import Path

from twin import attention, device, dsa, jit, logs, memory, moe, solver
from twin.http_server import make_connection_handler
from twin.model_loader import loader
from twin.models import glm5
from twin.openai_api import Api
from twin.quantization import QuarkConfig
from twin.scheduler import Replica, Router

CAPTURE_BATCH_SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256]
PREFIX_CACHE_TOKEN_LIMIT = 1_000_000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 -m twin.launch_server")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--tp", "--tp-size", dest="tp", type=int, default=1)
    parser.add_argument("--dp", "--dp-size", dest="dp", type=int, default=1)
    parser.add_argument(
        "--kv-cache-dtype", default="auto", choices=["auto", "bf16", "fp8_e4m3", "fp8_e5m2", "fp4_e2m1"]
    )
    parser.add_argument("--speculative-algorithm", default=None, choices=["EAGLE", "NEXTN", "EAGLE3"])
    parser.add_argument("--speculative-num-steps", type=int, default=None)
    parser.add_argument("--speculative-eagle-topk", type=int, default=None)
    parser.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    parser.add_argument("--enable-aiter-allreduce-fusion", action="store_true")
    parser.add_argument("--mem-fraction-static", type=float, default=0.85)
    parser.add_argument("--attention-backend", default=None, choices=list(attention.BACKENDS))
    parser.add_argument("--dsa-prefill-backend", default=None, choices=list(dsa.BACKEND_CHOICES))
    parser.add_argument("--dsa-decode-backend", default=None, choices=list(dsa.BACKEND_CHOICES))
    parser.add_argument("--context-length", type=int, default=None)
    parser.add_argument("--chunked-prefill-size", type=int, default=16384)
    parser.add_argument("--max-running-requests", type=int, default=256)
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    if args.speculative_algorithm and args.speculative_num_steps is None:
        args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens = 3, 1, 4
    return args


class Engine:
    """What start-up produces: the model's timing shape, its numerics, and the server info."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.model_path = Path(args.model_path)
        self.config = json.loads((self.model_path / "config.json").read_text())
        self.context_length = args.context_length or self.config["max_position_embeddings"]
        self.moe: moe.Selector | None = None
        self.dsa_backends: tuple[str, str] | None = None
        self.garbage: tuple[str, ...] = ()
        self.max_total_tokens = 0

    def start(self) -> None:
        args = self.args
        gpus = int(device.properties()["count"])
        if args.tp * args.dp > gpus:
            raise RuntimeError(f"tp_size * dp_size = {args.tp * args.dp} exceeds the {gpus} visible GPUs")
        logs.per_rank("Init torch distributed begin.", args.tp, args.dp)
        elapsed = device.wait("init_distributed")
        logs.per_rank(f"Init torch distributed ends. elapsed={elapsed:.2f} s, mem usage=0.89 GB", args.tp, args.dp)
        backend = attention.select_backend(args.attention_backend, use_mla=True)
        logs.info(f"Attention backend: {backend}, arch={attention.gpu_arch()}, kv_cache_dtype={args.kv_cache_dtype}")
        attention.check_kv_dtype(backend, attention.kv_torch_dtype(args.kv_cache_dtype))
        if dsa.is_dsa(self.config):
            self.dsa_backends = dsa.resolve_backends(
                args.dsa_prefill_backend, args.dsa_decode_backend, args.kv_cache_dtype
            )
        self._load_weights()
        self._select_kernels(backend)
        self._plan_memory()

    def _load_weights(self) -> None:
        args, config = self.args, self.config
        quant = QuarkConfig.from_config(config["quantization_config"], self.model_path / "config.json")
        logs.info(f"Using Quark config from {quant.source} (exclude: {len(quant.exclude)} patterns)")
        logs.per_rank("Load weight begin. avail mem=286.91 GB", args.tp, args.dp)
        started = time.monotonic()
        params = loader.build_params(glm5.target_params(config, quant))
        count = loader.load_weights(params, loader.iterate_checkpoint(self.model_path), config, draft=False)
        kind = config["architectures"][0]
        logs.per_rank(
            f"Load weight end. elapsed={time.monotonic() - started:.2f} s, type={kind}, dtype=torch.bfloat16, "
            "avail mem=237.30 GB, mem usage=49.61 GB.",
            args.tp,
            args.dp,
        )
        if args.speculative_algorithm:
            nextn = config["num_hidden_layers"]
            logs.info(f"Loading draft model (MTP layer {nextn}) for {args.speculative_algorithm}")
            logs.per_rank("Load weight begin. avail mem=237.30 GB", args.tp, args.dp)
            started = time.monotonic()
            draft = loader.build_params(glm5.draft_params(config, quant))
            tensors = loader.iterate_checkpoint(self.model_path, loader.shards(self.model_path, layer=nextn))
            count += loader.load_weights(draft, tensors, config, draft=True)
            params.update({f"draft.{name}": param for name, param in draft.items()})
            logs.per_rank(
                f"Load weight end. elapsed={time.monotonic() - started:.2f} s, type={kind}NextN, "
                "dtype=torch.bfloat16, avail mem=235.82 GB, mem usage=1.48 GB.",
                args.tp,
                args.dp,
            )
        self.garbage = loader.garbage_modules(params)
        logs.info(f"Loaded {count} checkpoint tensors")

    def _select_kernels(self, backend: str) -> None:
        args, config = self.args, self.config
        attention.check_backend(backend, config["kv_lora_rank"], config["qk_rope_head_dim"])
        jit.mla_rope_and_cache()
        # each TP rank holds 1/tp of every expert's intermediate width, and aiter keys its configs by that width
        shape = moe.MoeShape(
            config["hidden_size"],
            config["moe_intermediate_size"] // args.tp,
            config["n_routed_experts"],
            config["num_experts_per_tok"],
        )
        self.moe = moe.Selector(shape)
        if args.speculative_algorithm and args.speculative_num_steps >= 4:
            logs.info(f"Draft depth {args.speculative_num_steps} >= 4: using the fused multi-step metadata kernel")
            jit.fused_multistep_metadata(args.speculative_num_steps, args.speculative_eagle_topk or 1)

    def _plan_memory(self) -> None:
        args = self.args
        layers = self.config["num_hidden_layers"] + (1 if args.speculative_algorithm else 0)
        memory_plan = memory.plan(args.tp, args.mem_fraction_static, args.kv_cache_dtype, layers, self.context_length)
        self.max_total_tokens = memory_plan.max_total_tokens
        logs.per_rank(
            f"KV Cache is allocated. #tokens: {memory_plan.max_total_tokens}, KV size: {memory_plan.kv_pool_gb:.2f} GB",
            args.tp,
            args.dp,
        )
        self._capture_graphs(memory_plan)

    def _capture_graphs(self, memory_plan: memory.MemoryPlan) -> None:
        """Capture the decode graphs (and the draft's, with speculative decoding), as sglang's runners do."""
        args = self.args
        free = memory_plan.workspace_free_gb
        logs.per_rank(
            f"Capture cuda graph begin. This can take up to several minutes. avail mem={free:.2f} GB", args.tp, args.dp
        )
        logs.info(f"Capture cuda graph bs {CAPTURE_BATCH_SIZES}", logs.rank_names(args.tp, args.dp)[0])
        memory.capture_graphs(memory_plan)
        if self.dsa_backends and dsa.use_topk_v2():
            jit.topk_v2()
        for batch_size in CAPTURE_BATCH_SIZES:  # each captured decode runs the MoE at its own size
            self.moe.kernel(batch_size * self.tokens_per_decode_step())
        elapsed = device.wait("capture", batch_sizes=len(CAPTURE_BATCH_SIZES))
        used = memory_plan.workspace_needed_gb
        logs.per_rank(
            f"Capture cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage={used:.2f} GB. "
            f"avail mem={free - used:.2f} GB.",
            args.tp,
            args.dp,
        )
        if args.speculative_algorithm:
            logs.info(
                f"Capture draft cuda graph begin. This can take up to several minutes. avail mem={free - used:.2f} GB"
            )
            steps = args.speculative_num_steps
            elapsed = device.wait("capture_draft", batch_sizes=len(CAPTURE_BATCH_SIZES), steps=steps)
            logs.info(
                f"Capture draft cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage=0.52 GB. "
                f"avail mem={free - used - 0.52:.2f} GB."
            )

    def tokens_per_decode_step(self) -> int:
        """Tokens one running request puts through the target model per decode step (its drafts when verifying)."""
        args = self.args
        return (args.speculative_num_draft_tokens or 1) if args.speculative_algorithm else 1

    def launch_config(self) -> dict:
        """What one replica launches on the device: its TP group, KV dtype, kernels and draft shape."""
        args = self.args
        speculative = bool(args.speculative_algorithm)
        return {
            "tp": args.tp,
            "dp": args.dp,
            "kv_cache_dtype": args.kv_cache_dtype,
            "dsa_decode_backend": self.dsa_backends[1] if self.dsa_backends else None,
            "allreduce_fusion": args.enable_aiter_allreduce_fusion,
            "spec_steps": (args.speculative_num_steps or 0) if speculative else 0,
            "spec_topk": (args.speculative_eagle_topk or 1) if speculative else 0,
            "spec_draft_tokens": (args.speculative_num_draft_tokens or 0) if speculative else 0,
            "max_total_tokens": self.max_total_tokens,
        }

    def server_info(self) -> dict:
        info = {key: value for key, value in vars(self.args).items()}
        return info | {
            "context_length": self.context_length,
            "max_total_num_tokens": self.max_total_tokens,
            "moe_tuned": self.moe.all_tuned(),
            "version": "0.5.6.twin",
        }


def report_crash(args: argparse.Namespace) -> None:
    text = traceback.format_exc()
    for rank in logs.rank_names(args.tp, args.dp):
        logs.info(f"Scheduler hit an exception: {text}", rank)
    logs.info("Received sigquit from a child process. It usually means the child failed.")


async def serve(engine: Engine) -> None:
    args = engine.args
    config = engine.launch_config()
    cache_tokens = min(engine.max_total_tokens, PREFIX_CACHE_TOKEN_LIMIT)
    ranks = logs.rank_names(args.tp, args.dp)[:: args.tp]  # each replica's first TP rank logs its batches
    replicas = [
        Replica(config, cache_tokens, args.chunked_prefill_size, args.max_running_requests, rank, engine.moe)
        for rank in ranks
    ]
    router = Router(replicas)
    router.start()
    error_rates = device.call("numerics", kv_cache_dtype=args.kv_cache_dtype, corrupt=bool(engine.garbage))
    numerics = solver.Numerics(tuple(error_rates["error_rates"]), engine.garbage)
    api = Api(router, args.served_model_name or args.model_path, engine.server_info(), numerics)
    server = await asyncio.start_server(make_connection_handler(api.handle), args.host, args.port, limit=2**24)
    logs.info(f"Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    logs.info("The server is fired up and ready to roll!")
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logs.info(f"server_args=ServerArgs({', '.join(f'{k}={v!r}' for k, v in vars(args).items())})")
    engine = Engine(args)
    try:
        engine.start()
    except Exception:
        report_crash(args)
        return 1
    try:
        asyncio.run(serve(engine))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
