"""`python3 -m twin.launch_server`: launch the inference server.

Flags in sglang's names (python/sglang/srt/server_args.py); `--ep-size` splits the routed experts over that many of
the TP ranks (sglang's moe_tp_size = tp_size // ep_size). For a DSA model the server arguments resolve the DSA
backends (`--dsa-prefill-backend` / `--dsa-decode-backend`) and run the model's ROCm hook (dsa.py), as sglang's
arg_groups/overrides.py does. Start-up and batch lines are sglang's (`Init torch distributed ends. elapsed=...`,
`Load weight end. elapsed=...`, `KV Cache is allocated. #tokens: ...`, `Capture cuda graph end. Time elapsed: ...`,
`The server is fired up and ready to roll!`), one per rank; a start-up exception is printed per rank the way
sglang's scheduler processes print it, and the process exits with status 1.

Does not cover the engine itself (engine.py).
"""

import argparse
import json
import sys
from pathlib import Path

from twin import __version__, attention, dsa, logs
from twin.batch_stats import BatchStats
from twin.engine import ServeOptions, run
from twin.environ import envs
from twin.memory import HipOutOfMemoryError


def make_parser(prog: str = "python3 -m twin.launch_server") -> argparse.ArgumentParser:
    """The server's flags (bench_one_batch takes them too, as sglang's one_batch takes ServerArgs)."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--tp", "--tp-size", dest="tp", type=int, default=1)
    parser.add_argument("--dp", "--dp-size", dest="dp", type=int, default=1)
    parser.add_argument("--ep", "--ep-size", "--expert-parallel-size", dest="ep_size", type=int, default=1)
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
    return add_load_args(parser)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = make_parser()
    return checked(parser, parser.parse_args(argv))


def checked(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """The speculative defaults and the parallel sizes' rule, as sglang's ServerArgs applies them."""
    if args.speculative_algorithm and args.speculative_num_steps is None:
        args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens = 3, 1, 4
    if args.tp % args.ep_size:
        parser.error(f"tp_size ({args.tp}) must be divisible by ep_size ({args.ep_size})")
    return args


AITER_PADDING_SIZE = 128  # sglang srt/layers/moe/utils.py: aiter's fused MoE pads each rank's expert width to 128s


def use_aiter() -> bool:
    """sglang's SGLANG_USE_AITER (srt/environ.py, default off; lmsysorg/sglang-rocm's image sets it to 1)."""
    return envs.SGLANG_USE_AITER.get()


def dsa_options(args: argparse.Namespace) -> dict:
    """The DSA choices sglang's server arguments make for a DSA checkpoint (none for another model)."""
    try:
        config = json.loads((Path(args.model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}  # the engine reports the checkpoint it cannot read
    if not dsa.is_dsa(config):
        return {}
    _, decode = dsa.resolve_backends(args.dsa_prefill_backend, args.dsa_decode_backend, args.kv_cache_dtype)
    dsa.rocm_model_hook()
    return {"dsa_decode_backend": decode, "dsa_topk_v2_env": dsa.TOPK_V2}


def serve_options(args: argparse.Namespace) -> ServeOptions:
    speculative = bool(args.speculative_algorithm)
    return ServeOptions(
        model_path=args.model_path,
        served_model_name=args.served_model_name,
        host=args.host,
        port=args.port,
        tp=args.tp,
        dp=args.dp,
        ep=args.ep_size,
        moe_tp=args.tp // args.ep_size,
        moe_pad_to=AITER_PADDING_SIZE if use_aiter() else 0,
        kv_cache_dtype=args.kv_cache_dtype,
        spec_method=args.speculative_algorithm,
        spec_steps=(args.speculative_num_steps or 0) if speculative else 0,
        spec_topk=(args.speculative_eagle_topk or 1) if speculative else 0,
        spec_draft_tokens=(args.speculative_num_draft_tokens or 0) if speculative else 0,
        allreduce_fusion=args.enable_aiter_allreduce_fusion,
        mem_fraction_static=args.mem_fraction_static,
        attention_backend=args.attention_backend,
        context_length=args.context_length,
        chunked_prefill_size=args.chunked_prefill_size,
        max_running_requests=args.max_running_requests,
        load_format=getattr(args, "load_format", "auto"),
        model_override_args=json.loads(getattr(args, "json_model_override_args", "{}")),
        cuda_graphs=getattr(args, "cuda_graph_backend_decode", None) != "disabled",
        **dsa_options(args),
    )


class SglangWording:
    """sglang's start-up lines, per rank where sglang prints them per rank (engine.Wording)."""

    api_owner = "sglang"
    sglang_routes = True

    def __init__(self, tp: int, dp: int):
        self.tp, self.dp = tp, dp

    def _ranks(self, message: str) -> None:
        logs.per_rank(message, self.tp, self.dp)

    def info(self, message: str) -> None:
        logs.info(message)

    def stage(self, name: str, **values) -> None:
        getattr(self, f"_{name}")(**values)

    def _init_begin(self) -> None:
        self._ranks("Init torch distributed begin.")

    def _init_end(self, elapsed: float) -> None:
        self._ranks(f"Init torch distributed ends. elapsed={elapsed:.2f} s, mem usage=0.89 GB")

    def _attention_backend(self, backend: str, arch: str, kv_cache_dtype: str) -> None:
        logs.info(f"Attention backend: {backend}, arch={arch}, kv_cache_dtype={kv_cache_dtype}")

    def _load_begin(self, available: float, draft: bool) -> None:
        self._ranks(f"Load weight begin. avail mem={available:.2f} GB")

    def _load_end(self, elapsed: float, kind: str, available: float, used: float, draft: bool) -> None:
        self._ranks(
            f"Load weight end. elapsed={elapsed:.2f} s, type={kind}, dtype=torch.bfloat16, "
            f"avail mem={available:.2f} GB, mem usage={used:.2f} GB."
        )

    def _draft_begin(self, layer: int, method: str, available: float) -> None:
        logs.info(f"Loading draft model (MTP layer {layer}) for {method}")
        self._load_begin(available, draft=True)

    def _loaded(self, count: int) -> None:
        logs.info(f"Loaded {count} checkpoint tensors")

    def _kv_cache(self, tokens: int, gb: float, context: int) -> None:
        self._ranks(f"KV Cache is allocated. #tokens: {tokens}, KV size: {gb:.2f} GB")

    def _capture_begin(self, available: float, batch_sizes: list[int]) -> None:
        self._ranks(f"Capture cuda graph begin. This can take up to several minutes. avail mem={available:.2f} GB")
        logs.info(f"Capture cuda graph bs {batch_sizes}", logs.rank_names(self.tp, self.dp)[0])

    def _draft_capture_begin(self, available: float) -> None:
        logs.info(f"Capture draft cuda graph begin. This can take up to several minutes. avail mem={available:.2f} GB")

    def _capture_end(self, elapsed: float, used: float, available: float, draft: bool) -> None:
        what = "draft cuda graph" if draft else "cuda graph"
        line = f"Capture {what} end. Time elapsed: {elapsed:.2f} s. mem usage={used:.2f} GB. "
        line += f"avail mem={available:.2f} GB."
        if draft:
            logs.info(line)
        else:
            self._ranks(line)

    def _ready(self, host: str, port: int) -> None:
        logs.info(f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
        logs.info("The server is fired up and ready to roll!")

    def memory_error(self, weights: float, static: float, fraction: float) -> Exception:
        return HipOutOfMemoryError(
            f"Not enough memory for the KV cache: weights take {weights:.2f} GB per GPU but the static pool is "
            f"{static:.2f} GB (--mem-fraction-static {fraction}). Increase tp or the fraction."
        )

    def batch_stats(self, rank: str, max_total_tokens: int, draft_tokens: int) -> BatchStats:
        return BatchStats(rank, max_total_tokens, draft_tokens)

    def replica_ranks(self) -> list[str]:
        return logs.rank_names(self.tp, self.dp)[:: self.tp]  # each replica's first TP rank logs its batches

    def crash(self, traceback_text: str) -> None:
        for rank in logs.rank_names(self.tp, self.dp):
            logs.info(f"Scheduler hit an exception: {traceback_text}", rank)
        logs.info("Received sigquit from a child process. It usually means the child failed.")


LOAD_FORMAT_CHOICES = ["auto", "pt", "safetensors", "npcache", "dummy", "sharded_state", "presharded", "gguf"]
CUDA_GRAPH_BACKENDS = ["full", "breakable", "tc_piecewise", "disabled"]


def add_load_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """How the model is built and loaded (fields/model.py) and whether graphs are captured (fields/exec_.py); each
    is listed in server_args only when given."""
    unset = argparse.SUPPRESS
    parser.add_argument("--load-format", default=unset, choices=LOAD_FORMAT_CHOICES)
    parser.add_argument("--json-model-override-args", default=unset)
    parser.add_argument("--cuda-graph-backend-decode", default=unset, choices=CUDA_GRAPH_BACKENDS)
    parser.add_argument("--cuda-graph-backend-prefill", default=unset, choices=CUDA_GRAPH_BACKENDS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logs.info(f"server_args=ServerArgs({', '.join(f'{k}={v!r}' for k, v in vars(args).items())})")
    front_args = vars(args) | {"version": __version__}
    return run(serve_options(args), SglangWording(args.tp, args.dp), front_args)


if __name__ == "__main__":
    sys.exit(main())
