"""vLLM's start-up and crash wording for the engine (twin.engine.Wording), from the processes that print it.

The lines are vllm 0.25.1's (file where vLLM logs each, in that wheel): "Initializing a V1 LLM engine (v0.25.1) with
config: ..." (v1/engine/core.py), "rank R in world size W is assigned as DP rank ..."
(distributed/parallel_state.py), "Using ROCM_AITER_MLA backend out of potential backends: [...]"
(platforms/rocm.py), "Starting to load model ...", "Loading drafter model..." and "Model loading took X GiB memory
and Y seconds" (v1/worker/gpu_model_runner.py), "Loading weights took X seconds"
(model_executor/model_loader/default_loader.py), "Available KV cache memory: X GiB" (v1/worker/gpu_worker.py), "GPU
KV cache size: N tokens" and "Maximum concurrency for N tokens per request: Xx" (v1/core/kv_cache_utils.py), "Graph
capturing finished in X secs, took Y GiB" (gpu_model_runner.py), "init engine (profile, create kv cache, warmup
model) took X s" (core.py), "Starting vLLM server on http://..." (entrypoints/openai/api_server.py), then uvicorn's
"Application startup complete."; a failed start-up is "EngineCore failed to start." with the traceback (core.py)
and, in the API server, "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s):
{...}" (v1/engine/utils.py); a KV pool with no room is vLLM's "No available memory for the cache blocks" ValueError
(kv_cache_utils.py). Does not cover the flags (arg_utils.py) or the periodic statistics (v1/metrics).
"""

import time

from twin.engine import ServeOptions

from vllm import __version__
from vllm.logger import emit, plain, process_pid
from vllm.v1.metrics.loggers import LoggingStatLogger

GIB = 2**30
MLA_BACKENDS = ("ROCM_AITER_MLA", "TRITON_MLA", "ROCM_AITER_TRITON_MLA")  # platforms/rocm.py, with aiter's MLA on
BACKEND_NAMES = {"aiter": "ROCM_AITER_MLA", "triton": "TRITON_MLA"}


def gib(gigabytes: float) -> float:
    """vLLM's format_gib of a size the engine counts in GB (1e9 bytes)."""
    return round(gigabytes * 1e9 / GIB, 2)


class VllmWording:
    api_owner = "vllm"
    sglang_routes = False

    def __init__(self, options: ServeOptions, config: dict, selected_backend: str | None):
        self.options, self.config, self.selected_backend = options, config, selected_backend
        self.cores = [f"EngineCore_DP{rank}" for rank in range(options.dp)]
        self.workers = [
            f"Worker_TP{tp_rank}" if options.dp == 1 else f"Worker_DP{dp_rank}_TP{tp_rank}"
            for dp_rank in range(options.dp)
            for tp_rank in range(options.tp)
        ]
        self.started = time.monotonic()

    def _each(self, processes: list[str], message: str, level: str = "INFO") -> None:
        for process in processes:
            emit(level, message, process, depth=2)

    def info(self, message: str) -> None:
        emit("INFO", message, self.cores[0])

    def stage(self, name: str, **values) -> None:
        getattr(self, f"_{name}")(**values)

    def _init_begin(self) -> None:
        options, config = self.options, self.config
        quantization = (config.get("quantization_config") or {}).get("quant_method")
        speculative = f"{{'method': 'mtp', 'num_spec_tokens': {options.spec_steps}}}" if options.spec_method else None
        self._each(
            self.cores,
            f"Initializing a V1 LLM engine (v{__version__}) with config: model='{options.model_path}', "
            f"speculative_config={speculative}, dtype=torch.bfloat16, "
            f"max_seq_len={options.context_length or config['max_position_embeddings']}, "
            f"tensor_parallel_size={options.tp}, data_parallel_size={options.dp}, "
            f"enable_expert_parallel={options.ep > 1}, quantization={quantization}, "
            f"kv_cache_dtype={options.kv_cache_dtype}, "
            f"served_model_name={options.served_model_name or options.model_path}",
        )

    def _init_end(self, elapsed: float) -> None:
        world = self.options.tp * self.options.dp
        for rank, worker in enumerate(self.workers):
            dp_rank, tp_rank = divmod(rank, self.options.tp)
            ep_rank = rank if self.options.ep > 1 else 0
            emit(
                "INFO",
                f"rank {rank} in world size {world} is assigned as DP rank {dp_rank}, PP rank 0, PCP rank 0, "
                f"TP rank {tp_rank}, EP rank {ep_rank}, EPLB rank N/A",
                worker,
            )

    def _attention_backend(self, backend: str, arch: str, kv_cache_dtype: str) -> None:
        name = BACKEND_NAMES.get(backend, backend)
        if self.selected_backend:
            message = f"Using {name} backend (selected via --attention-backend)."
        else:
            message = f"Using {name} backend out of potential backends: {list(MLA_BACKENDS)}."
        self._each(self.workers, message)

    def _load_begin(self, available: float, draft: bool) -> None:
        self._each(self.workers, f"Starting to load model {self.options.model_path}...")

    def _load_end(self, elapsed: float, kind: str, available: float, used: float, draft: bool) -> None:
        self._each(self.workers, f"Loading weights took {elapsed:.2f} seconds")
        if not draft:
            self._each(self.workers, f"Model loading took {gib(used)} GiB memory and {elapsed:.6f} seconds")

    def _draft_begin(self, layer: int, method: str, available: float) -> None:
        self._each(self.workers, "Loading drafter model...")

    def _loaded(self, count: int) -> None:
        return  # vLLM does not count the tensors it loaded

    def _kv_cache(self, tokens: int, gb: float, context: int) -> None:
        self._each(self.workers, f"Available KV cache memory: {gib(gb)} GiB")
        self._each(self.cores, f"GPU KV cache size: {tokens:,} tokens")
        self._each(self.cores, f"Maximum concurrency for {context:,} tokens per request: {tokens / context:.2f}x")

    def _capture_begin(self, available: float, batch_sizes: list[int]) -> None:
        return  # vLLM shows a progress bar here

    def _draft_capture_begin(self, available: float) -> None:
        return  # the drafter's graphs are captured with the model's

    def _capture_end(self, elapsed: float, used: float, available: float, draft: bool) -> None:
        if draft:
            return
        self._each(self.workers, f"Graph capturing finished in {elapsed:.0f} secs, took {gib(used)} GiB")
        took = time.monotonic() - self.started
        self._each(self.cores, f"init engine (profile, create kv cache, warmup model) took {took:.2f} s")

    def _ready(self, host: str, port: int) -> None:
        emit("INFO", f"Starting vLLM server on http://{host}:{port}")
        plain(f"INFO:     Started server process [{process_pid('APIServer')}]")
        plain("INFO:     Waiting for application startup.")
        plain("INFO:     Application startup complete.")

    def memory_error(self, weights: float, static: float, fraction: float) -> Exception:
        return ValueError(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
            "the engine (this flag also controls CPU memory reservation on the CPU backend, despite its name). See "
            "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
        )

    def batch_stats(self, rank: str, max_total_tokens: int, draft_tokens: int) -> LoggingStatLogger:
        return LoggingStatLogger(int(rank), max_total_tokens, draft_tokens)

    def replica_ranks(self) -> list[str]:
        return [str(rank) for rank in range(self.options.dp)]

    def crash(self, traceback_text: str) -> None:
        core = self.cores[0]
        emit("ERROR", "EngineCore failed to start.", core)
        emit("ERROR", traceback_text.rstrip("\n"), core)
        failed = {name: 1 for name in self.cores}
        plain("Traceback (most recent call last):")
        plain('  File "/usr/local/bin/vllm", line 8, in <module>')
        plain("    sys.exit(main())")
        plain(f"RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {failed}")
