"""`vllm bench latency`: the latency of one batch of requests, as vllm 0.25.1's vllm/benchmarks/latency.py measures
it (its CLI: --input-len 32, --output-len 128, --batch-size 8, --n 1, --use-beam-search, --num-iters-warmup 10,
--num-iters 30, --profile, --output-json, --disable-detokenize, and the engine's flags of arg_utils.py).

The engine starts as `vllm serve` starts it (weights, kernels, memory plan, graphs; with --speculative-config the
draft too, as vLLM's LLM engine runs it), without the HTTP server. One iteration generates --output-len tokens
for each of --batch-size prompts of --input-len tokens: the prompts are prefilled in steps of
--max-num-batched-tokens, then every request decodes (advancing by its accepted drafts with a draft) until each
has its tokens, each step timed as it runs on the GPUs. After the warm-up iterations it prints vLLM's lines (`Avg
latency: ... seconds` and the 10/25/50/75/90/99% percentiles, interpolated as numpy.percentile does) and writes
--output-json as vLLM writes it. --n above 1, beam search and --profile are refused (this engine does not run them).
Does not cover serving (entrypoints/cli/serve.py).
"""

import argparse
import json
import statistics
import time
from pathlib import Path

from twin import device
from twin.engine import Engine, started

from vllm.engine import arg_utils
from vllm.engine.wording import VllmWording
from vllm.entrypoints.cli.serve import DEFAULT_MODEL, engine_options
from vllm.logger import plain

PERCENTAGES = (10, 25, 50, 75, 90, 99)


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--n", type=int, default=1, help="Number of generated sequences per prompt.")
    parser.add_argument("--use-beam-search", action="store_true")
    parser.add_argument("--num-iters-warmup", type=int, default=10, help="Number of iterations to run for warmup.")
    parser.add_argument("--num-iters", type=int, default=30, help="Number of iterations to run.")
    parser.add_argument("--profile", action="store_true", help="profile the generation process of a single batch")
    parser.add_argument("--output-json", type=str, default=None, help="Path to save the latency results in JSON.")
    parser.add_argument("--disable-detokenize", action="store_true")
    arg_utils.add_cli_args(parser)


class Generator:
    """The started engine generating one batch at a time (what `llm.generate` runs), timed on the device."""

    def __init__(self, engine: Engine, options):
        self.config = engine.launch_config()
        self.chunk = options.chunked_prefill_size

    def _step(self, op: str, **arguments) -> dict:
        reply = device.call(op, config=self.config, **arguments)
        time.sleep(reply["ms"] * device.TIME_SCALE / 1000)
        return reply

    def generate(self, batch: int, input_len: int, output_len: int) -> float:
        started = time.perf_counter()
        remaining = batch * input_len
        while remaining > 0:  # chunked prefill: at most the step's token budget each step
            self._step("prefill", uncached=min(remaining, self.chunk), cached=0)
            remaining -= self.chunk
        produced = [1.0] * batch  # each request's first token comes with its prefill
        contents = [f"latency-{index}" for index in range(batch)]
        while min(produced) < output_len:
            running = [index for index in range(batch) if produced[index] < output_len]
            context = sum(input_len + int(produced[index]) for index in running)
            requests = [contents[index] for index in running]
            reply = self._step("decode", batch=len(running), context=context, requests=requests)
            for index, advance in zip(running, reply["advance"], strict=True):
                produced[index] += advance
        return time.perf_counter() - started


def percentile(values: list[float], share: float) -> float:
    """numpy.percentile's default (linear) interpolation."""
    ordered = sorted(values)
    position = share / 100 * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def main(args: argparse.Namespace) -> int:
    if args.n != 1 or args.use_beam_search or args.profile:
        plain("the twin's `vllm bench latency` runs one sequence per prompt, without beam search or profiling")
        return 2
    args.model, args.host, args.port = args.model or DEFAULT_MODEL, None, 8000
    read = engine_options(args)
    if read is None:
        return 1
    config, options = read
    engine = started(options, VllmWording(options, config, args.attention_backend))
    if engine is None:
        return 1
    context = engine.context_length
    if context < args.input_len + args.output_len:
        plain("AssertionError: Please ensure that max_model_len is greater than the sum of input_len and output_len.")
        return 1
    generator = Generator(engine, options)
    print("Warming up...", flush=True)
    for _ in range(args.num_iters_warmup):
        generator.generate(args.batch_size, args.input_len, args.output_len)
    latencies = [generator.generate(args.batch_size, args.input_len, args.output_len) for _ in range(args.num_iters)]
    print(f"Avg latency: {statistics.fmean(latencies)} seconds", flush=True)
    percentiles = {share: percentile(latencies, share) for share in PERCENTAGES}
    for share, value in percentiles.items():
        print(f"{share}% percentile latency: {value} seconds", flush=True)
    if args.output_json:
        results = {"avg_latency": statistics.fmean(latencies), "latencies": latencies, "percentiles": percentiles}
        Path(args.output_json).write_text(json.dumps(results, indent=4))
    return 0
