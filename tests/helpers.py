"""Small helpers shared by the test modules (conftest.py holds the shared fixtures)."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import urllib.request
from pathlib import Path

from porter.checks.throughput import LevelResult, SloSpec, ThroughputResult, find_knee


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def free_port() -> int:
    """A port nothing listens on right now, on 127.0.0.1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


SWEEP_RATES = [3, 3.5, 4, 4.5, 5, 5.5, 6]  # a 0.5 RPS grid; two bisection steps refine it to 0.125


def sweep(true_knee: float) -> dict:
    """A throughput result as porter's sweep records it (find_knee, ThroughputResult), against a server whose
    p99 TTFT holds the SLO up to `true_knee` RPS; a level's output throughput is its rate x 64 tokens. Only
    the server's answers are stood in for."""

    async def level(rate: float) -> LevelResult:
        passed = rate <= true_knee
        figures = {"output_throughput": rate * 64, "total_throughput": rate * 2064}
        return LevelResult(rate, 32, passed, [] if passed else ["p99 TTFT over the SLO"], figures)

    knee, levels = asyncio.run(find_knee(SWEEP_RATES, 2, level))
    return ThroughputResult.of(levels, knee, slo=SloSpec(ttft_s=2), metric="output_throughput", model="m").to_dict()


def wait_until_healthy(url: str, process, log: Path, timeout_s: float = 60) -> None:
    """Poll URL/health until it answers 200 or the server's process exits; fail with its log's tail if it did."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as response:
                if response.status == 200:
                    break
        except OSError:  # refused while it starts, or an HTTP error
            time.sleep(0.2)
    assert process.poll() is None, log.read_text()[-3000:]
