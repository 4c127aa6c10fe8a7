"""How often does porter's throughput keep rule keep a no-op change, and how often a real gain? Noise and power.

Lays the twin out (as benchmarks/twin_perf.py does) and, for each of N seeds (one seed = one task's
workload seed), sweeps the RPS levels the way porter's throughput check does (common random numbers,
`min_requests` per level, two bisection steps):
  - configuration A four times: two samples as "accepted", two as "pending" (a no-op change);
  - configuration B (a genuinely faster one) twice, as the "pending" side of a real change.
Then applies each keep rule to the same samples:
  - before: medians of two samples a side, kept when they differ by more than max(3%, a one-sided 95% t
    bound from the pooled spread) -- the rule porter had before the resolution floor;
  - after: the same, with the bar never below 1.5 times the sweep's resolution at the knee (porter.noise).
Noise = share of seeds whose no-op change is kept (A vs A); power = share whose real change is kept (A's
accepted samples vs B). The true ratio of B over A is stated as the ratio of all their samples' medians.
Every sweep is written to --out (JSON lines) as it ends, so the rules can be re-applied to a finished run
with --from FILE (no sweeps). Prints one line per seed and, last, one JSON object with the figures and a
binomial (Clopper-Pearson) 95% upper bound on each rate. Twin numbers on a shared 2-core VM, not hardware.
Usage: python3 benchmarks/decision_noise.py [--seeds 20] [--time-scale 0.25] [--config tp4dp2-tuned]
       [--better tp4dp2-tuned-fp8] [--rates 3,3.5,4,...] [--out sweeps.jsonl] [--from sweeps.jsonl]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from twin_perf import CONFIGS, lay_out, running_device, start_server, wait_healthy  # noqa: E402

from porter.checks.throughput import run_throughput  # noqa: E402
from porter.noise import compare, knee_resolution  # noqa: E402
from porter.task import ThroughputCheckSpec  # noqa: E402

MINIMUM = 0.03  # the flagship task's min_improvement
METRIC = "output_throughput_per_node"


def spec(seed: int, args) -> ThroughputCheckSpec:
    scale = args.time_scale
    return ThroughputCheckSpec.model_validate(
        {
            "workload": {
                "input_tokens": 2000,
                "output_tokens": 64,
                "cache_hit_rate": 0.6,
                "duration_s": args.level_seconds * scale,
                "warmup_s": 1.0 * scale,
                "seed": seed,
                "min_requests": args.min_requests,
            },
            "rps": [rate / scale for rate in args.rates],
            "slo": {"ttft_s": 2.0 * scale, "percentile": 99},
            "metric": "output_throughput",
            "target_tok_s_per_node": 1e9,
            "bisect_steps": 2,
        }
    )


def sweep(url: str, config: str, seed: int, index: int, args) -> dict:
    result = run_throughput(url, spec(seed, args)).to_dict()
    levels = [{"rps": level["rps"], "passed": level["passed"]} for level in result["levels"]]
    row = {"config": config, "seed": seed, "index": index, METRIC: result[METRIC], "knee_rps": result["knee_rps"]}
    return {**row, "levels": levels}


@contextlib.contextmanager
def serving(config: str, root: Path, port: int) -> Iterator[str]:
    """One twin server (and its simulated device) of a configuration, laid out under `root`."""
    flags, tuned = CONFIGS[config]
    tree = lay_out(root, tuned)
    with running_device(root / "run" / "twin-device"):
        server = start_server(root, tree, flags, port)
        try:
            url = f"http://127.0.0.1:{port}"
            asyncio.run(wait_healthy(url))
            yield url
        finally:
            server.terminate()
            server.wait()


def measure(args, out) -> None:
    """Both servers up (the idle one sleeps), seed by seed: A four sweeps, then B two, so any prefix of
    seeds is a complete result."""
    with contextlib.ExitStack() as stack:
        urls = {}
        for offset, config in enumerate((args.config, args.better)):
            root = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            urls[config] = stack.enter_context(serving(config, root, args.port + offset))
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for config, sweeps in ((args.config, 4), (args.better, 2)):
                for index in range(sweeps):
                    row = sweep(urls[config], config, seed, index, args)
                    print(json.dumps({k: v for k, v in row.items() if k != "levels"}), flush=True)
                    out.write(json.dumps(row) + "\n")
                    out.flush()


def decide(accepted: list[dict], pending: list[dict], floor: bool) -> dict:
    """One keep decision on recorded sweeps: before (no resolution floor) or after (porter's rule now)."""
    resolution = knee_resolution(accepted + pending) if floor else 0.0
    values = [[row[METRIC] for row in side] for side in (accepted, pending)]
    comparison = compare("throughput", METRIC, *values, MINIMUM, resolution=resolution)
    return {"kept": comparison.better, "change": round(comparison.change, 4), "bar": round(comparison.threshold, 4)}


def upper_bound(kept: int, n: int) -> float:
    """The two-sided Clopper-Pearson 95% upper bound on a rate seen `kept` times in `n` (bisection)."""
    from math import comb

    if kept >= n:
        return 1.0
    low, high = kept / n, 1.0
    for _ in range(60):  # P(X <= kept | p) = 2.5% at the upper bound
        p = (low + high) / 2
        tail = sum(comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(kept + 1))
        low, high = (p, high) if tail > 0.025 else (low, p)
    return high


def evaluate(rows: list[dict], config: str, better: str) -> dict:
    by = {(r["config"], r["seed"], r["index"]): r for r in rows}
    seeds = sorted({r["seed"] for r in rows if (better, r["seed"], 1) in by and (config, r["seed"], 3) in by})
    figures: dict[str, int] = {}
    for seed in seeds:
        a = [by[(config, seed, i)] for i in range(4)]
        b = [by[(better, seed, i)] for i in range(2)]
        line = {"seed": seed, "knees_a": [r["knee_rps"] for r in a], "knees_b": [r["knee_rps"] for r in b]}
        for rule in ("before", "after"):
            floor = rule == "after"
            noop, real = decide(a[:2], a[2:], floor), decide(a[:2], b, floor)
            line[rule] = {"no_op": noop, "real": real}
            figures[f"no_op_kept_{rule}"] = figures.get(f"no_op_kept_{rule}", 0) + noop["kept"]
            figures[f"real_kept_{rule}"] = figures.get(f"real_kept_{rule}", 0) + real["kept"]
        print(json.dumps(line), flush=True)
    n = len(seeds)
    ratio = statistics.median(r[METRIC] for r in rows if r["config"] == better) / statistics.median(
        r[METRIC] for r in rows if r["config"] == config
    )
    summary = {"config": config, "better": better, "true_ratio": round(ratio, 4), "seeds": n}
    for name, kept in figures.items():
        summary[name] = f"{kept}/{n}"
        summary[f"{name}_rate"] = round(kept / n, 4) if n else None
        summary[f"{name}_95_upper"] = round(upper_bound(kept, n), 4) if n else None
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0, help="to split the seeds over processes")
    parser.add_argument("--config", default="tp4dp2-tuned", choices=sorted(CONFIGS))
    parser.add_argument("--better", default="tp4dp2-tuned-fp8", choices=sorted(CONFIGS))
    parser.add_argument("--time-scale", type=float, default=0.25, help="TWIN_TIME_SCALE: the twin's clock speed")
    parser.add_argument("--level-seconds", type=float, default=12.0, help="level length at time scale 1")
    parser.add_argument("--min-requests", type=int, default=32)
    parser.add_argument(
        "--rates",
        type=lambda text: [float(x) for x in text.split(",")],
        default=[3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5, 8],
        help="levels at time scale 1 (the flagship task's 0.5 RPS grid, from below both knees)",
    )
    parser.add_argument("--port", type=int, default=31871)
    parser.add_argument("--out", type=Path, default=Path("decision_noise_sweeps.jsonl"))
    parser.add_argument("--from", dest="source", type=Path, nargs="+", help="apply the rules to recorded sweeps only")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on a kill too (finally blocks)
    if args.source is None:
        os.environ["TWIN_TIME_SCALE"] = str(args.time_scale)
        with open(args.out, "w", encoding="utf-8") as out:
            measure(args, out)
    sources = args.source or [args.out]
    rows = [json.loads(line) for path in sources for line in path.read_text().splitlines() if line.strip()]
    summary = evaluate(rows, args.config, args.better)
    summary.update(time_scale=args.time_scale, rates=args.rates, engine="twin (simulated device), shared 2-core VM")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
