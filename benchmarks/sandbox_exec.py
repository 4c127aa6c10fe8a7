"""Round trip of a trivial command: DockerSandbox.exec, LocalSandbox.exec, and the `docker exec` CLI.

Runs `true` N times (after a warm-up) through each path on the same container, interleaved
round-robin (the CLI is the reference: it is what a shell-script harness would pay). Prints
median and p99 in milliseconds per path; the last line is one JSON object.
Target: the SDK path's median below the CLI's.

    python3 benchmarks/sandbox_exec.py [--runs 200] [--warmup 10] [--image porter-base:bookworm]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from porter.sandbox import DockerSandbox, LocalSandbox
from porter.task import Task


def make_task(kind: str, image: str) -> Task:
    sandbox = {"kind": kind, "workdir": "/"}
    if kind == "docker":
        sandbox["image"] = image
    return Task.model_validate(
        {
            "name": f"bench-{kind}",
            "model": {"id": "bench", "path": "/models/bench"},
            "hardware": {"gpu": "none", "count": 1},
            "sandbox": sandbox,
            "serve": {"command": "true"},
        }
    )


def timed(actions: dict, runs: int, warmup: int) -> dict[str, list[float]]:
    """Milliseconds per call of each action, taken round-robin so a load spike hits every path alike."""
    samples: dict[str, list[float]] = {name: [] for name in actions}
    for round_number in range(warmup + runs):
        for name, action in actions.items():
            started = time.perf_counter()
            action()
            if round_number >= warmup:
                samples[name].append((time.perf_counter() - started) * 1000)
    return samples


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
        "runs": len(ordered),
    }


def checked_exec(sandbox) -> None:
    result = sandbox.exec("true", timeout=30)
    if result.exit_code != 0:
        raise SystemExit(f"`true` failed in the sandbox: exit {result.exit_code}: {result.output}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--image", default="porter-base:bookworm")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="porter-bench-") as scratch:
        docker_box = DockerSandbox(make_task("docker", options.image), Path(scratch) / "docker", "bench-sandbox-exec")
        local_box = LocalSandbox(make_task("local", options.image), Path(scratch) / "local", "bench-sandbox-exec")
        try:
            docker_box.start()
            local_box.start()
            cli = ["docker", "exec", docker_box.container.name, "true"]
            actions = {
                "docker_sdk": lambda: checked_exec(docker_box),
                "docker_cli": lambda: subprocess.run(cli, check=True),
                "local": lambda: checked_exec(local_box),
            }
            results = {name: summary(samples) for name, samples in timed(actions, options.runs, options.warmup).items()}
        finally:
            docker_box.stop(remove=True)
    for name, figures in results.items():
        median, p99, runs = figures["median_ms"], figures["p99_ms"], figures["runs"]
        print(f"{name:>11}: median {median:7.2f} ms   p99 {p99:7.2f} ms   ({runs} runs)")
    results["sdk_below_cli"] = results["docker_sdk"]["median_ms"] < results["docker_cli"]["median_ms"]
    print(json.dumps(results))
    return 0 if results["sdk_below_cli"] else 1


if __name__ == "__main__":
    sys.exit(main())
