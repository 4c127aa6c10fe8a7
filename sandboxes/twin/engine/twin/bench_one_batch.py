"""`python3 -m twin.bench_one_batch`: the engine's one-batch benchmark, in the shape of sglang's
`python -m sglang.bench_one_batch` (sglang 0.5.20: a shim to sglang/benchmark/one_batch.py).

Takes the server's flags (launch_server.py) and the benchmark's own: --run-name, --batch-size, --input-len and
--output-len (several values each; every combination runs), --result-filename (JSON lines appended, default
result.jsonl), --log-decode-step. The engine starts as the server starts (weights, kernels, memory plan, graphs)
with no HTTP server and without the speculative draft (one_batch drives the target model's runner alone). Then a
warm-up on the first combination with at most 32 output tokens, and for each combination one prefill of batch x
input tokens and output - 1 decode steps of the whole batch, each timed as it runs on the GPUs. It prints
one_batch's lines (`Prefill. latency: ... s, throughput: ... token/s`, the first five `Decode i.` lines and every
--log-decode-step-th, `Decode.  median latency`, `Total. latency`), skips a batch the KV pool cannot hold the way
one_batch does, and writes one_batch's result fields. Does not cover serving (engine.serve).
"""

import argparse
import json
import statistics
import sys
import time

from twin import device, launch_server
from twin.engine import Engine, started

WARMUP_OUTPUT_LEN = 32  # one_batch's warm-up decodes at most this many tokens


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = launch_server.make_parser("python3 -m twin.bench_one_batch")
    parser.add_argument("--run-name", default="default")
    parser.add_argument("--batch-size", type=int, nargs="+", default=[1])
    parser.add_argument("--input-len", type=int, nargs="+", default=[1024])
    parser.add_argument("--output-len", type=int, nargs="+", default=[16])
    parser.add_argument("--result-filename", default="result.jsonl")
    parser.add_argument("--log-decode-step", type=int, default=0, help="Log decode latency every this many steps.")
    return launch_server.checked(parser, parser.parse_args(argv))


class OneBatch:
    """The started engine's target model, run one batch at a time on the device."""

    def __init__(self, engine: Engine):
        # the target model alone: one_batch's model runner builds no draft
        self.config = {**engine.launch_config(), "spec_steps": 0, "spec_topk": 0, "spec_draft_tokens": 0}
        self.max_total_tokens = engine.max_total_tokens

    def max_batch_size(self, input_len: int, output_len: int) -> int:
        return self.max_total_tokens // (input_len + output_len)

    def _timed(self, op: str, **arguments) -> float:
        """Run one step on the device and return the seconds it took, as one_batch times a synchronized step."""
        started = time.perf_counter()
        milliseconds = device.call(op, config=self.config, **arguments)["ms"]
        time.sleep(milliseconds * device.TIME_SCALE / 1000)
        return time.perf_counter() - started

    def run_once(self, run_name: str, batch: int, input_len: int, output_len: int, log_decode_step: int):
        if batch > self.max_batch_size(input_len, output_len):
            print(f"skipping ({batch}, {input_len}, {output_len}) due to max batch size limit", flush=True)
            return None
        result = {"run_name": run_name, "batch_size": batch, "input_len": input_len, "output_len": output_len}
        prefill = self._timed("prefill", uncached=batch * input_len, cached=0)
        total = prefill
        print(f"Prefill. latency: {prefill:6.5f} s, throughput: {input_len * batch / prefill:9.2f} token/s", flush=True)
        result.update(prefill_latency=prefill, prefill_throughput=input_len * batch / prefill)
        decodes = []
        for step in range(output_len - 1):
            context = batch * (input_len + step + 1)
            latency = self._timed("decode", batch=batch, context=context, requests=[""] * batch)
            decodes.append(latency)
            total += latency
            if step < 5 or (log_decode_step > 0 and step % log_decode_step == 0):
                print(
                    f"Decode {step}. Batch size: {batch}, latency: {latency:6.5f} s, "
                    f"throughput: {batch / latency:9.2f} token/s",
                    flush=True,
                )
        if output_len > 1:
            median = statistics.median(decodes)
            print(
                f"Decode.  median latency: {median:6.5f} s, median throughput: {batch / median:9.2f} token/s",
                flush=True,
            )
            result.update(median_decode_latency=median, median_decode_throughput=batch / median)
        throughput = (input_len + output_len) * batch / total
        print(f"Total. latency: {total:6.3f} s, throughput: {throughput:9.2f} token/s", flush=True)
        result.update(total_latency=total, overall_throughput=throughput)
        return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    engine = started(launch_server.serve_options(args), launch_server.SglangWording(args.tp, 1))
    if engine is None:
        return 1
    bench = OneBatch(engine)
    print("Warmup ...", flush=True)
    warmup_output = min(WARMUP_OUTPUT_LEN, args.output_len[0])
    bench.run_once(args.run_name, args.batch_size[0], args.input_len[0], warmup_output, 0)
    print("Benchmark ...", flush=True)
    results = []
    for batch in args.batch_size:
        for input_len in args.input_len:
            for output_len in args.output_len:
                result = bench.run_once(args.run_name, batch, input_len, output_len, args.log_decode_step)
                if result is not None:
                    results.append(result)
    if args.result_filename:
        with open(args.result_filename, "a") as out:
            for result in results:
                out.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
