"""How often would porter keep a change that changes nothing? Decision noise of the throughput rule, before/after.

Lays the twin out (as benchmarks/twin_perf.py does), starts one twin server, and for each of N seeds (one
seed = one task's workload seed) measures the same configuration as "accepted" and again as "pending"
(a no-op change), then applies each keep rule:
  - before: the rule porter had: one sweep a side, each level drawing its own arrivals (seeded by seed and
    rate), fixed-duration levels, no bisection, kept when the knee's throughput rose by more than 3%; and the
    same rule when the agent re-runs the pending sweep up to three times (each run overwrote the last: best of 3);
  - after: porter's rule now: two sweeps a side, every level replaying one seeded unit-rate pattern scaled by
    its rate (common random numbers), at least `min_requests` measured requests per level, two bisection
    steps, kept when the medians differ by more than max(3%, a one-sided 95% t bound from the spread).
Prints one line per seed and, last, one JSON object with the share of no-op changes each rule would keep.
Twin numbers on a shared 2-core VM, not hardware figures.
Usage: python3 benchmarks/decision_noise.py [--seeds 20] [--time-scale 0.5] [--config tp8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from twin_perf import CONFIGS, lay_out, start_server, wait_healthy  # noqa: E402

from porter.checks.throughput import run_throughput  # noqa: E402
from porter.noise import compare  # noqa: E402
from porter.task import ThroughputCheckSpec  # noqa: E402

OLD_MARGIN = 0.03
RATES = [1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6]  # the flagship task's levels (time scale 1)


def spec(rates: list[float], seed: int, args, bisect_steps: int, min_requests: int) -> ThroughputCheckSpec:
    scale = args.time_scale
    return ThroughputCheckSpec.model_validate(
        {
            "workload": {
                "input_tokens": args.input_tokens,
                "output_tokens": args.output_tokens,
                "cache_hit_rate": 0.6,
                "duration_s": args.level_seconds * scale,
                "warmup_s": 1.0 * scale,
                "seed": seed,
                "min_requests": min_requests,
            },
            "rps": [rate / scale for rate in rates],
            "slo": {"ttft_s": 2.0 * scale, "percentile": 99},
            "metric": "output_throughput",
            "target_tok_s_per_node": 1e9,
            "bisect_steps": bisect_steps,
        }
    )


def old_sweep(url: str, seed: int, args) -> float:
    """The former sweep: each level its own arrival seed, duration only, stop at the first failure."""
    best = 0.0
    for rate in RATES:
        level_seed = hash((seed, rate)) % 2**31  # the old code seeded arrivals by (seed, rate)
        result = run_throughput(url, spec([rate], level_seed, args, bisect_steps=0, min_requests=1))
        if result.knee is None:
            break
        best = result.tok_s_per_node
    return best


def new_sweep(url: str, seed: int, args) -> float:
    return run_throughput(url, spec(RATES, seed, args, bisect_steps=2, min_requests=args.min_requests)).tok_s_per_node


def one_seed(url: str, seed: int, args) -> dict:
    before = [old_sweep(url, seed, args) for _ in range(4)]
    gains = [value / before[0] - 1 if before[0] else 0.0 for value in before[1:]]
    after = [new_sweep(url, seed, args) for _ in range(4)]
    comparison = compare("throughput", "output_throughput_per_node", after[:2], after[2:], OLD_MARGIN)
    row = {
        "seed": seed,
        "before": [round(v, 1) for v in before],
        "before_kept": gains[0] > OLD_MARGIN,
        "before_best_of_3_kept": max(gains) > OLD_MARGIN,
        "after": [round(v, 1) for v in after],
        "after_change": round(comparison.change, 4),
        "after_threshold": round(comparison.threshold, 4),
        "after_kept": comparison.better,
    }
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--config", default="tp8", choices=sorted(CONFIGS))
    parser.add_argument("--time-scale", type=float, default=0.5, help="TWIN_TIME_SCALE: the twin's clock speed")
    parser.add_argument("--level-seconds", type=float, default=12.0, help="level length at time scale 1")
    parser.add_argument("--min-requests", type=int, default=32)
    parser.add_argument("--input-tokens", type=int, default=2000)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--port", type=int, default=31871)
    args = parser.parse_args()
    os.environ["TWIN_TIME_SCALE"] = str(args.time_scale)
    flags, tuned = CONFIGS[args.config]
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        server = start_server(root, lay_out(root, tuned), flags, args.port)
        try:
            url = f"http://127.0.0.1:{args.port}"
            asyncio.run(wait_healthy(url))
            rows = []
            for seed in range(args.seeds):
                rows.append(one_seed(url, seed, args))
                kept = [sum(row[f"{rule}_kept"] for row in rows) for rule in ("before", "before_best_of_3", "after")]
                print(
                    f"{len(rows)} seeds: no-op kept before {kept[0]} (best of 3: {kept[1]}), after {kept[2]}",
                    flush=True,
                )
        finally:
            server.terminate()
            server.wait()
    summary = {
        "config": args.config,
        "seeds": args.seeds,
        "no_op_kept_before": sum(row["before_kept"] for row in rows) / len(rows),
        "no_op_kept_before_best_of_3": sum(row["before_best_of_3_kept"] for row in rows) / len(rows),
        "no_op_kept_after": sum(row["after_kept"] for row in rows) / len(rows),
        "time_scale": args.time_scale,
        "engine": "twin (simulated device), shared 2-core VM",
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
