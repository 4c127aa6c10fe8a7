"""Benchmark the twin's performance model over HTTP, without Docker: knee sweeps and single-stream speed.

Lays the twin out with `sandboxes/twin/build.sh --local`, starts `twin.launch_server` subprocesses with the
story's flag sets, and measures (aiohttp client, Poisson arrivals, 60% shared-prefix prompts):
  - the knee: highest offered RPS whose p99 TTFT stays within the SLO, and output tok/s there (from the first
    send to the last token, as bench_serving and porter count it);
  - single-stream output tok/s (after the first token), median of 3;
  - the twin's own CPU use during the heaviest level (process CPU time / wall time), to show the engine
    is not the bottleneck;
  - the speculative accept length the engine logged ("accept len" of its Decode batch lines, as sglang's);
  - start-up wall time on a fresh node and again on the same node (page cache warm, kernels built).
Then each move of the story as a ratio of measured knees (and of single-stream speeds) next to the story's
ratio, the device's draft acceptance by position (averaged over the texts sent) next to the public GLM-5.2
MI355X figures, and the measured accept length next to the public profile's 1 + sum.
Prints one line per configuration and, last, one JSON object, both naming the task. Twin numbers, not MI355X
figures. The sweep is the task's (--task, default the flagship tasks/twin_glm52.yaml: its workload, rates, TTFT
limit, level length and bisection, its single stream's lengths, the recipe's DSA flags and serve environment),
converted from the task's clock to the one this runs at (TWIN_TIME_SCALE, default 1: scale 1).
tasks/twin_glm52_real_shape.yaml carries the real task's proportions (an hour at scale 1: --jobs runs the
configurations side by side, each on its own node, which the twin's light CPU use allows at that clock).
Usage: TWIN_TIME_SCALE=0.25 python3 benchmarks/twin_perf.py [--task tasks/twin_glm52.yaml] [--configs tp8,...]
       [--level-seconds S] [--jobs N] [--port P]
"""

import argparse
import asyncio
import functools
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "sandboxes" / "twin" / "device"))
from twin_device.host import running_device  # noqa: E402
from twin_device.model import Device  # noqa: E402

# The story's figures (DESIGN.md): output tok/s per node at the knee, single-stream tok/s, and the public
# MTP acceptance by draft position of a GLM-5.2 MI355X run.
STORY_MOVES = [
    ("TP8 -> TP4xDP2", "tp8", "tp4dp2", "knee_output_tok_s", 1944 / 1461),
    ("untuned -> tuned MoE", "tp4dp2", "tp4dp2-tuned", "knee_output_tok_s", 2626 / 1944),
    ("no MTP -> MTP 5/1/6 + fp8 + fusion", "tp8", "final", "single_stream_tok_s", 3.0),
]
PUBLIC_ACCEPTANCE = [0.94, 0.67, 0.28, 0.08, 0.02]
MIN_REQUESTS = 32  # per level, as porter's sweeps
FLAGSHIP = ROOT / "tasks" / "twin_glm52.yaml"

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
    "tp8-spec516-fp8-fusion": (
        ["--tp", "8", "--kv-cache-dtype", "fp8_e4m3", "--enable-aiter-allreduce-fusion", *SPEC_516],
        False,
    ),
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
        patch = ROOT / "sandboxes/twin/fixes" / f"{fix}.patch"
        target = root / "models" / "glm-5.2-mxfp4" if "a/config.json" in patch.read_text() else tree
        subprocess.run(["git", "apply", str(patch)], cwd=target, check=True)
    return tree


def recipe(path: Path = FLAGSHIP) -> tuple[list[str], dict[str, str]]:
    """The DSA flags and serve environment every story configuration keeps: the task's (the recipe)."""
    task = yaml.safe_load(Path(path).read_text())
    flags = [f"--{flag}={value}" for flag, value in task["serve"]["flags"].items() if flag.startswith("dsa-")]
    return flags, {name: value for name, value in task["sandbox"]["env"].items() if name.startswith("SGLANG_")}


def start_server(
    root: Path, tree: Path, flags: list[str], port: int, log: Path, task: Path = FLAGSHIP
) -> subprocess.Popen:
    recipe_flags, recipe_environment = recipe(task)
    command = [
        sys.executable,
        "-m",
        "twin.launch_server",
        "--model-path",
        str(root / "models/glm-5.2-mxfp4"),
        "--port",
        str(port),
        *recipe_flags,
        *flags,
    ]
    environment = {**os.environ, **recipe_environment, "TWIN_JIT_CACHE": str(root / "jit")}
    with log.open("wb") as out:
        return subprocess.Popen(command, cwd=tree, env=environment, stdout=out, stderr=subprocess.STDOUT)


def logged_accept_length(log: Path) -> float | None:
    """The mean of the engine's accept lengths (sglang's "accept len: X" in its Decode batch lines, vLLM's "Mean
    acceptance length: X" in its SpecDecoding metrics lines), None without any."""
    pattern = r"(?:accept len|Mean acceptance length): ([0-9.]+)"
    values = [float(match) for match in re.findall(pattern, log.read_text(errors="replace"))]
    return round(statistics.mean(values), 3) if values else None


async def wait_healthy(url: str, timeout_s: float = 1200, server: subprocess.Popen | None = None) -> None:
    """Until /health answers; a server that exits first (a failed start-up, a port taken) fails at once."""
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if server is not None and server.poll() is not None:
                raise RuntimeError(f"the server for {url} exited with {server.returncode} before it was healthy")
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


def make_prompt(rng: random.Random, input_tokens: int, shared_fraction: float, level: str = "") -> str:
    """The shared prefix (the same at every level), the level's marker, then text drawn from `rng`: a level
    replays its seeded pattern with its own marker, so no prompt is cached past its prefix from an earlier
    level (as porter's workload salts each level)."""
    shared = int(input_tokens * shared_fraction)
    prefix = " ".join(WORDS[i % len(WORDS)] for i in range(shared))
    rest = [f"level{level}", *(rng.choice(WORDS) for _ in range(input_tokens - shared - 1))]
    return prefix + " " + " ".join(rest)


def flagship_sweep() -> dict:
    """The flagship task's sweep (task_sweep of tasks/twin_glm52.yaml)."""
    return task_sweep(FLAGSHIP)


def task_sweep(path: Path) -> dict:
    """A twin task's sweep and single stream, its times and rates converted from the task's clock to this
    process's."""
    task = yaml.safe_load(Path(path).read_text())
    factor = float(os.environ.get("TWIN_TIME_SCALE", 1)) / float(task["sandbox"]["env"]["TWIN_TIME_SCALE"])
    throughput = task["checks"]["throughput"]
    workload = throughput["workload"]
    return {
        "input_tokens": workload["input_tokens"],
        "output_tokens": workload["output_tokens"],
        "cache_hit_rate": workload["cache_hit_rate"],
        "levels": [rps / factor for rps in throughput["rps"]],
        "slo": throughput["slo"]["ttft_s"] * factor,
        "level_seconds": workload["duration_s"] * factor,
        "warmup_seconds": workload["warmup_s"] * factor,
        "bisect_steps": throughput["bisect_steps"],
        "single_input_tokens": task["checks"]["single_stream"]["input_tokens"],
        "single_output_tokens": task["checks"]["single_stream"]["output_tokens"],
    }


async def run_level(url: str, rps: float, seconds: float, workload: dict, seed: int) -> dict:
    input_tokens, output_tokens = workload["input_tokens"], workload["output_tokens"]
    rng, level = random.Random(seed), f"{time.time_ns()}"
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks, started = [], time.monotonic()
        while time.monotonic() - started < seconds:
            prompt = make_prompt(rng, input_tokens, workload["cache_hit_rate"], level)
            tasks.append(asyncio.ensure_future(one_request(session, url, prompt, output_tokens)))
            await asyncio.sleep(rng.expovariate(rps))
        results = await asyncio.gather(*tasks)
        elapsed = time.monotonic() - started
    ttfts = sorted(result[0] for result in results)
    p99 = ttfts[min(int(len(ttfts) * 0.99), len(ttfts) - 1)]
    output = sum(result[2] for result in results)
    return {"rps": rps, "requests": len(results), "p99_ttft_s": round(p99, 3), "output_tok_s": round(output / elapsed)}


async def sweep(url: str, workload: dict, label: str = "") -> dict:
    """Levels upwards until one fails, then the task's bisections between the last pass and the first fail
    (porter's sweep does the same); each level runs its length or long enough for MIN_REQUESTS arrivals."""
    levels, slo_s, seconds = workload["levels"], workload["slo"], workload["level_seconds"]
    # warm-up: fill the prefix cache, as porter's warmup_s does
    await run_level(url, levels[0], workload["warmup_seconds"], workload, seed=1)

    async def passes(rps: float) -> dict | None:
        # one seeded arrival pattern divided by the rate at every level, as porter's sweeps do: a knee then
        # depends on the rate, not on which random bursts a level happened to draw
        level = await run_level(url, rps, max(seconds, MIN_REQUESTS / rps), workload, seed=0)
        print(f"    {label}{level}", flush=True)
        return level if level["p99_ttft_s"] <= slo_s else None

    knee, low, high = None, 0.0, None
    for rps in levels:
        level = await passes(rps)
        if level is None:
            high = rps
            break
        knee, low = level, rps
    for _ in range(workload["bisect_steps"] if high is not None else 0):
        middle = (low + high) / 2
        level = await passes(middle)
        knee, low, high = (level, middle, high) if level else (knee, low, middle)
    return knee or {"rps": 0, "output_tok_s": 0}


async def single_stream(url: str, input_tokens: int, output_tokens: int = 256) -> float:
    speeds = []
    async with aiohttp.ClientSession() as session:
        for index in range(3):
            prompt = make_prompt(random.Random(index), input_tokens, 0)
            _, _, count, first, end = await one_request(session, url, prompt, output_tokens)
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
        with running_device(root / "run" / "twin-device"):
            start = functools.partial(start_server, task=args.task)
            return await _measure_on(name, args, port, root, tree, flags, start)


async def _measure_on(
    name: str, args: argparse.Namespace, port: int, root: Path, tree: Path, flags: list, start=start_server
) -> dict:
    """Start-ups, single stream and the sweep of one configuration; `start` launches its server (another front's
    command in benchmarks/twin_family_perf.py)."""
    url, log = f"http://127.0.0.1:{port}", root / "server.log"
    starts = []  # on a fresh node, then again: the checkpoint in the page cache, the kernels built
    for _ in range(2):
        started = time.monotonic()
        server = start(root, tree, flags, port, log)
        try:
            await wait_healthy(url, server=server)
        except BaseException:
            server.kill()
            raise
        starts.append(round(time.monotonic() - started, 1))
        if len(starts) < 2:
            server.terminate()
            server.wait()
    try:
        workload = args.workload
        speed = await single_stream(url, workload["single_input_tokens"], workload.get("single_output_tokens", 256))
        cpu_before, wall_before = cpu_seconds(server.pid), time.monotonic()
        knee = await sweep(url, workload, f"{name} " if getattr(args, "jobs", 1) > 1 else "")
        cpu_share = (cpu_seconds(server.pid) - cpu_before) / (time.monotonic() - wall_before)
    finally:
        server.terminate()
        server.wait()
    result = {
        "config": name,
        "single_stream_tok_s": speed,
        "knee_rps": knee["rps"],
        "knee_output_tok_s": knee["output_tok_s"],
        "engine_cpu_share": round(cpu_share, 3),
        "accept_length": logged_accept_length(log),
        "start_s": starts[0],
        "restart_s": starts[1],
    }
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=Path, default=FLAGSHIP, help="the twin task whose sweep this runs")
    parser.add_argument("--configs", default="tp8,tp4dp2,tp4dp2-tuned,final")
    parser.add_argument("--level-seconds", type=float, help="each level's length (default: the task's)")
    parser.add_argument("--jobs", type=int, default=1, help="configurations measured at once, each on its own node")
    # below Linux's ephemeral range (32768-60999): a port in it can be a client connection's, and the bind fails
    parser.add_argument("--port", type=int, default=31500, help="the first configuration's port (the next +1, ...)")
    args = parser.parse_args()
    args.workload = task_sweep(args.task)
    if args.level_seconds:
        args.workload["level_seconds"] = args.level_seconds
    task = task_name(args.task)
    shape = {key: value for key, value in args.workload.items() if key != "levels"}
    print(f"task {task}: levels {[round(rate, 3) for rate in args.workload['levels']]} RPS, {shape}", flush=True)
    names = args.configs.split(",")
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futures = [pool.submit(asyncio.run, measure(name, args, args.port + index)) for index, name in enumerate(names)]
        results = [future.result() for future in futures]
    print(f"story moves on {task} (twin vs story):")
    moves = story_moves({result["config"]: result for result in results})
    acceptance = sent_text_acceptance(args)
    print("draft acceptance by position, 5/1/6 (twin device over the texts sent vs public):")
    for position, (twin, public) in enumerate(zip(acceptance, PUBLIC_ACCEPTANCE, strict=True), start=1):
        print(f"  {position}: {twin:.2f}  vs  {public:.2f}")
    logged = [r["accept_length"] for r in results if r["accept_length"]]
    if logged:
        public = 1 + sum(PUBLIC_ACCEPTANCE)
        print(f"accept length logged by the engine: {statistics.mean(logged):.2f}  vs  {public:.2f}")
    summary = {"benchmark": "twin_perf", "task": task, "workload": args.workload, "results": results}
    summary.update({"moves": moves, "acceptance": acceptance})
    print(json.dumps(summary))


def task_name(path: Path) -> str:
    """The task file as the command line gave it, relative to the checkout when inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def sent_text_acceptance(args: argparse.Namespace) -> list[float]:
    """The device's acceptance by position at 5/1/6, averaged over the prompts a sweep level sends (each
    text has its own predictability, read from its last block as the engine passes it)."""
    sys.path.insert(0, str(ROOT / "sandboxes" / "twin" / "engine"))
    from twin.prefix_cache import content_key
    from twin.tokenizer import token_ids

    rng, config = random.Random(0), {"spec_steps": 5, "spec_draft_tokens": 6}
    texts = [make_prompt(rng, args.workload["input_tokens"], args.workload["cache_hit_rate"]) for _ in range(200)]
    rows = [Device().acceptance_by_position(config, content_key(token_ids(text))) for text in texts]
    return [round(statistics.mean(column), 3) for column in zip(*rows, strict=True)]


def story_moves(by_config: dict) -> list[dict]:
    """Each story move measured here (when both of its configurations ran), next to the story's ratio."""
    moves = []
    for label, before, after, metric, story in STORY_MOVES:
        if before in by_config and after in by_config and by_config[before][metric]:
            ratio = by_config[after][metric] / by_config[before][metric]
            moves.append({"move": label, "twin": round(ratio, 3), "story": round(story, 3)})
            print(f"{label:<36} twin x{ratio:.2f}   story x{story:.2f}", flush=True)
    return moves


if __name__ == "__main__":
    main()
