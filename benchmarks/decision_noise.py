"""How often does porter's throughput keep rule keep a no-op change, and how often a real gain? Noise and power.

Lays the twin out (as benchmarks/twin_perf.py does) and, for each of N seeds (one seed = one task's
workload seed), sweeps the RPS levels the way porter's throughput check does (common random numbers,
`min_requests` per level, two bisection steps):
  - configuration A four times: two samples as "accepted", two as "pending" (a no-op change);
  - configuration B (a genuinely faster one) twice, as the "pending" side of a real change.
Then applies each keep rule to the same samples:
  - before: medians of two samples a side, kept when they differ by more than max(3%, a one-sided 95% t
    bound from the pooled spread) -- the rule porter had before the resolution term;
  - after: porter's rule now, the bar max(3%, that t bound + 1.5 times the sweeps' resolution at the knee).
Noise = share of seeds whose no-op change is kept (A0,A1 vs A2,A3); power = share whose real change is
kept (A0,A1 vs B0,B1), each with a two-sided Clopper-Pearson 95% upper bound (0 of 20 still allows ~17%).
The same sweeps dealt every other way (each 2 + 2 split of A, both ways; each pair of A against B) give
six correlated decisions a seed: a finer rate, not independent trials. The true ratio of B over A is the
median over seeds of the ratio of their sweeps' medians.
Every sweep is written to --out (JSON lines) as it ends; --from FILE... re-applies the rules to recorded
sweeps without measuring (give the measuring run's options again: the summary prints them).
Twin numbers on a shared 2-core VM, not hardware figures: a busy machine stalls whole levels.
Usage: python3 benchmarks/decision_noise.py [--seeds 20] [--first-seed 0] [--time-scale 0.25]
       [--level-seconds 6] [--rates 2.5,3,...,8] [--config tp4dp2-tuned] [--better tp4dp2-tuned-fp8]
       [--out sweeps.jsonl] [--from sweeps.jsonl ...]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
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

from porter.checks.throughput import (  # noqa: E402
    ThroughputCheckSpec,  # noqa: E402
    run_throughput,  # noqa: E402
)
from porter.ledger.noise import compare, knee_resolution  # noqa: E402

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
    """One keep decision on recorded sweeps: before (no resolution term) or after (porter's rule now)."""
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


SPLITS = [((0, 1), (2, 3)), ((0, 2), (1, 3)), ((0, 3), (1, 2))]  # the ways to deal A's four sweeps 2 + 2


def seed_decisions(a: list[dict], b: list[dict], floor: bool) -> dict:
    """One seed under one rule: the primary decisions (A0,A1 accepted) and every other deal of the sweeps.

    The other deals (each 2 + 2 split of A both ways; each pair of A against B) reuse the same sweeps, so
    they are correlated: their rates are a finer estimate, not independent trials."""
    noop, real = decide(a[:2], a[2:], floor), decide(a[:2], b, floor)
    deals = [(first, second) for one, two in SPLITS for first, second in ((one, two), (two, one))]
    noops = [decide([a[i] for i in x], [a[i] for i in y], floor)["kept"] for x, y in deals]
    reals = [decide([a[i] for i in x], b, floor)["kept"] for x, _ in deals]
    return {"no_op": noop, "real": real, "no_op_deals": sum(noops), "real_deals": sum(reals), "deals": len(deals)}


def evaluate(rows: list[dict], config: str, better: str) -> dict:
    by = {(r["config"], r["seed"], r["index"]): r for r in rows}
    seeds = sorted({r["seed"] for r in rows if (better, r["seed"], 1) in by and (config, r["seed"], 3) in by})
    counts: collections.Counter = collections.Counter()
    ratios = []
    for seed in seeds:
        a = [by[(config, seed, i)] for i in range(4)]
        b = [by[(better, seed, i)] for i in range(2)]
        line = {"seed": seed, "knees_a": [r["knee_rps"] for r in a], "knees_b": [r["knee_rps"] for r in b]}
        for rule in ("before", "after"):
            line[rule] = decided = seed_decisions(a, b, floor=rule == "after")
            for name in ("no_op", "real"):
                counts[f"{name}_kept_{rule}"] += decided[name]["kept"]
                counts[f"{name}_deals_kept_{rule}"] += decided[f"{name}_deals"]
        base = statistics.median(r[METRIC] for r in a)
        if base:
            ratios.append(statistics.median(r[METRIC] for r in b) / base)
        print(json.dumps(line), flush=True)
    n = len(seeds)
    # The true ratio of B over A: per seed the ratio of the medians of all its sweeps, the median over seeds.
    ratio = round(statistics.median(ratios), 4) if ratios else None
    summary = {"config": config, "better": better, "true_ratio": ratio, "seeds": n}
    for name, kept in counts.items():
        trials = n * len(SPLITS) * 2 if "_deals_" in name else n
        summary[name] = f"{kept}/{trials}"
        if "_deals_" not in name and n:
            summary[f"{name}_95_upper"] = round(upper_bound(kept, n), 4)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0, help="to split the seeds over processes")
    parser.add_argument("--config", default="tp4dp2-tuned", choices=sorted(CONFIGS))
    parser.add_argument("--better", default="tp4dp2-tuned-fp8", choices=sorted(CONFIGS))
    parser.add_argument("--time-scale", type=float, default=0.25, help="TWIN_TIME_SCALE: the twin's clock speed")
    parser.add_argument("--level-seconds", type=float, default=6.0, help="level length at time scale 1")
    parser.add_argument("--min-requests", type=int, default=32)
    parser.add_argument(
        "--rates",
        type=lambda text: [float(x) for x in text.split(",")],
        default=[2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5, 8],
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
