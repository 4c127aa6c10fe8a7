"""The checks against the twin engine (sandboxes/twin) laid out locally and served as a subprocess.

The twin speaks the prompt formats and /tokenize the checks rely on; this proves the two agree:
the built-in sets score near the twin's documented accuracy, prompt lengths are exact and the
achieved prefix-cache hit rate is the asked one. Twin figures are the twin's, not hardware numbers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import free_port
from twin_tasks import QUICK_SCALE

from porter.checks.quality import QualityCheckSpec, run_quality
from porter.checks.throughput import SingleStreamSpec, ThroughputCheckSpec, run_single_stream, run_throughput

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = ROOT / "sandboxes" / "twin" / "layout.py"
sys.path.insert(0, str(ROOT / "sandboxes" / "twin" / "device"))

from twin_device.host import running_device  # noqa: E402


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    root = tmp_path_factory.mktemp("twin")
    subprocess.run([sys.executable, str(LAYOUT), str(root)], check=True, capture_output=True, timeout=120)
    with running_device(root / "run" / "twin-device") as socket_path:  # the simulated GPUs live outside the engine
        yield from _serve(root, socket_path)


def _serve(root: Path, socket_path: Path):
    port = free_port()
    log = (root / "server.log").open("w")
    command = [
        sys.executable,
        "-m",
        "twin.launch_server",
        "--model-path",
        str(root / "models" / "glm-5.2-mxfp4"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--tp",
        "8",
    ]
    environment = {**os.environ, "TWIN_DEVICE_SOCKET": str(socket_path), "TWIN_TIME_SCALE": str(QUICK_SCALE)}
    server = subprocess.Popen(
        command, cwd=root / "sgl-workspace" / "twin", stdout=log, stderr=subprocess.STDOUT, env=environment
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log_tail = (root / "server.log").read_text()[-2000:]
                    raise RuntimeError(f"the twin did not come up: {log_tail}") from None
                time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()


@pytest.mark.parametrize(
    "kind, dataset, metric, reference",
    [
        ("gsm8k", "builtin:twin-gsm8k", "flexible_match", 0.96),
        ("multiple_choice", "builtin:twin-gpqa", "accuracy", 0.83),
    ],
)
def test_builtin_sets_score_near_the_twin_reference(twin, kind, dataset, metric, reference):
    spec = QualityCheckSpec(
        name=kind,
        kind=kind,
        dataset=dataset,
        samples=60,
        metric=metric,
        max_tokens=256,
        reference=reference,
        tolerance=0.2,
    )
    result = run_quality(twin, spec)
    assert result.errors == 0 and result.n == 60
    assert result.ci_low <= reference + 0.05 and result.score >= reference - 0.15, result.verdict


def test_throughput_level_has_exact_lengths_and_the_asked_cache_hit_rate(twin):
    spec = ThroughputCheckSpec.model_validate(
        {
            "workload": {"input_tokens": 2000, "output_tokens": 16, "cache_hit_rate": 0.6, "duration_s": 4, "seed": 1},
            "rps": [1],
            "slo": {"ttft_s": 5},
            "metric": "output_throughput",
            "target_tok_s_per_node": 1,
        }
    )
    result = run_throughput(twin, spec)
    level = result.levels[0]
    assert level.metrics["exact_input_lengths"] is True
    assert level.metrics["errors"] == 0 and level.metrics["completed"] == level.offered > 0
    assert level.metrics["total_input_tokens"] == 2000 * level.metrics["completed"]
    assert level.metrics["cache_hit_rate"] == pytest.approx(0.6, abs=0.01)


def test_single_stream_against_the_twin(twin):
    spec = SingleStreamSpec(input_tokens=200, output_tokens=40, num_requests=1, target_output_tok_s=1)
    result = run_single_stream(twin, spec)
    assert result.completed == 1 and result.errors == 0 and result.output_tok_s > 1
