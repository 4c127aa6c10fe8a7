"""Benchmark the twin's performance model over HTTP, without Docker: knee sweeps and single-stream speed.

Lays the twin out with `sandboxes/twin/build.sh --local`, starts `twin.launch_server` subprocesses with the
story's flag sets, and measures (aiohttp client, Poisson arrivals, 60% shared-prefix prompts):
  - the knee: highest offered RPS whose p99 TTFT stays within the SLO, and total tok/s there;
  - single-stream output tok/s (after the first token), median of 3;
  - the twin's own CPU use during the heaviest level (process CPU time / wall time), to show the engine
    is not the bottleneck.
Prints one line per configuration and, last, one JSON object. Twin numbers, not MI355X figures.
Usage: python3 benchmarks/twin_perf.py [--configs tp8,tp4dp2,...] [--level-seconds 12] [--quick]
"""

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
WORDS = "alpha bravo delta echo golf hotel india kilo lima mike oscar papa quebec romeo sierra tango uniform".split()
SPEC_516 = [
    "--speculative-algorithm",
    "EAGLE",
    "--speculative-num-steps",
    "5",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "6",
]
SPEC_314 = [
    "--speculative-algorithm",
    "EAGLE",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
]
CONFIGS = {
    "tp8": (["--tp", "8"], False),
    "tp4dp2": (["--tp", "4", "--dp", "2"], False),
    "tp4dp2-tuned": (["--tp", "4", "--dp", "2"], True),
    "tp4dp2-tuned-fp8": (["--tp", "4", "--dp", "2", "--kv-cache-dtype", "fp8_e4m3"], True),
    "tp8-tuned-fp8-fusion": (["--tp", "8", "--kv-cache-dtype", "fp8_e4m3", "--enable-aiter-allreduce-fusion"], True),
    "tp8-spec314": (["--tp", "8", *SPEC_314], False),
    "tp8-spec516": (["--tp", "8", *SPEC_516], False),
    "final": (
        ["--tp", "4", "--dp", "2", "--kv-cache-dtype", "fp8_e4m3", "--enable-aiter-allreduce-fusion", *SPEC_516],
        True,
    ),
}
FIXES = ["a-quark-exclude-mtp", "b-rocm-guard-metadata"]


def lay_out(root: Path, tuned: bool) -> Path:
    subprocess.run([str(ROOT / "sandboxes/twin/build.sh"), "--local", str(root)], check=True, capture_output=True)
    tree = root / "sgl-workspace" / "twin"
    for fix in FIXES + (["c-tuned-moe-fp4"] if tuned else []):
        subprocess.run(["git", "apply", str(ROOT / "sandboxes/twin/fixes" / f"{fix}.patch")], cwd=tree, check=True)
    return tree


def start_server(root: Path, tree: Path, flags: list[str], port: int) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "twin.launch_server",
        "--model-path",
        str(root / "models/glm-5.2-mxfp4"),
        "--port",
        str(port),
        *flags,
    ]
    environment = {**os.environ, "TWIN_JIT_CACHE": str(root / "jit")}
    return subprocess.Popen(command, cwd=tree, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def wait_healthy(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url + "/health") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not become healthy in {timeout_s} s")


async def one_request(session: aiohttp.ClientSession, url: str, prompt: str, output_tokens: int) -> tuple:
    started, first, count = time.monotonic(), None, 0
    payload = {
        "prompt": prompt,
        "max_tokens": output_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with session.post(url + "/v1/completions", json=payload) as response:
        async for raw in response.content:
            line = raw.decode().strip()
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk["choices"] and first is None:
                first = time.monotonic()
            if chunk.get("usage"):
                count = chunk["usage"]["completion_tokens"]
    return first - started, time.monotonic() - started, count, first, time.monotonic()


def make_prompt(rng: random.Random, input_tokens: int, shared_fraction: float) -> str:
    shared = int(input_tokens * shared_fraction)
    prefix = " ".join(WORDS[i % len(WORDS)] for i in range(shared))
    return prefix + " " + " ".join(rng.choice(WORDS) for _ in range(input_tokens - shared))


async def run_level(url: str, rps: float, seconds: float, input_tokens: int, output_tokens: int, seed: int) -> dict:
    rng = random.Random(seed)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks, started = [], time.monotonic()
        while time.monotonic() - started < seconds:
            prompt = make_prompt(rng, input_tokens, 0.6)
            tasks.append(asyncio.ensure_future(one_request(session, url, prompt, output_tokens)))
            await asyncio.sleep(rng.expovariate(rps))
        results = await asyncio.gather(*tasks)
        elapsed = time.monotonic() - started
    ttfts = sorted(result[0] for result in results)
    p99 = ttfts[min(int(len(ttfts) * 0.99), len(ttfts) - 1)]
    tokens = len(results) * input_tokens + sum(result[2] for result in results)
    return {"rps": rps, "requests": len(results), "p99_ttft_s": round(p99, 3), "total_tok_s": round(tokens / elapsed)}


async def sweep(url: str, levels: list[float], slo_s: float, seconds: float, workload: tuple[int, int]) -> dict:
    knee = None
    for rps in levels:
        level = await run_level(url, rps, seconds, *workload, seed=int(rps * 100))
        print(f"    {level}", flush=True)
        if level["p99_ttft_s"] > slo_s:
            break
        knee = level
    return knee or {"rps": 0, "total_tok_s": 0}


async def single_stream(url: str) -> float:
    speeds = []
    async with aiohttp.ClientSession() as session:
        for index in range(3):
            _, _, count, first, end = await one_request(session, url, make_prompt(random.Random(index), 2000, 0), 256)
            speeds.append((count - 1) / (end - first))
    return round(statistics.median(speeds), 1)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(name: str, args: argparse.Namespace, port: int) -> dict:
    flags, tuned = CONFIGS[name]
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        tree = lay_out(root, tuned)
        server = start_server(root, tree, flags, port)
        try:
            url = f"http://127.0.0.1:{port}"
            await wait_healthy(url)
            speed = await single_stream(url)
            cpu_before, wall_before = cpu_seconds(server.pid), time.monotonic()
            knee = await sweep(url, args.levels, args.slo, args.level_seconds, (args.input_tokens, args.output_tokens))
            cpu_share = (cpu_seconds(server.pid) - cpu_before) / (time.monotonic() - wall_before)
        finally:
            server.terminate()
            server.wait()
    result = {
        "config": name,
        "single_stream_tok_s": speed,
        "knee_rps": knee["rps"],
        "knee_total_tok_s": knee["total_tok_s"],
        "engine_cpu_share": round(cpu_share, 3),
    }
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="tp8,tp4dp2,tp4dp2-tuned,tp4dp2-tuned-fp8")
    parser.add_argument(
        "--levels",
        type=lambda text: [float(x) for x in text.split(",")],
        default=[1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6, 7],
    )
    parser.add_argument("--slo", type=float, default=2.0)
    parser.add_argument("--level-seconds", type=float, default=12)
    parser.add_argument("--input-tokens", type=int, default=2000)
    parser.add_argument("--output-tokens", type=int, default=64)
    args = parser.parse_args()
    results = [asyncio.run(measure(name, args, 31500 + index)) for index, name in enumerate(args.configs.split(","))]
    print(json.dumps({"benchmark": "twin_perf", "results": results}))


if __name__ == "__main__":
    main()
