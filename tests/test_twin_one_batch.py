"""The twin's one-batch benchmarks on the --local layout: `python3 -m twin.bench_one_batch` in the shape of sglang's
`python -m sglang.bench_one_batch` (the server's flags and one_batch's own, its lines and its result file), and
`vllm bench latency` on the vLLM front (vLLM's flags, lines and JSON). Each step they time runs on the simulated
device, so a measured latency is never below the device's own time for that step (times from the device's model,
never asserted on wall time from above)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from twin_tasks import QUICK_SCALE, running_device

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "sandboxes" / "twin"
sys.path.insert(0, str(TWIN))
sys.path.insert(0, str(TWIN / "device"))
from layout import SITE_PACKAGES  # noqa: E402
from twin_device.server import scenario_device  # noqa: E402

pytestmark = pytest.mark.usefixtures("needs_gxx")
ENVIRONMENT = {"PATH": "/usr/bin:/bin", "TWIN_TIME_SCALE": str(QUICK_SCALE)}


def layout(tmp_path: Path, scenario: str, front: str) -> Path:
    command = [str(TWIN / "build.sh"), "--local", str(tmp_path), "--scenario", scenario, "--front", front]
    subprocess.run(command, check=True, capture_output=True)
    return tmp_path


def test_bench_one_batch_prints_sglangs_lines_and_results(tmp_path):
    root = layout(tmp_path / "twin", "glm52-day0", "sglang")
    model = root / "models/glm-5.2-mxfp4"
    results = tmp_path / "result.jsonl"
    command = [sys.executable, "-m", "twin.bench_one_batch", "--model-path", str(model), "--tp", "8"]
    command += ["--batch-size", "1", "8", "100000", "--input-len", "1024", "--output-len", "8"]
    command += ["--result-filename", str(results)]
    environment = {**ENVIRONMENT, "HOME": str(root)}
    with running_device(root / "run" / "twin-device"):
        run = subprocess.run(command, cwd=root / "sgl-workspace/twin", env=environment, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert out.index("Warmup ...") < out.index("Benchmark ...")
    assert "skipping (100000, 1024, 8) due to max batch size limit" in out
    assert re.search(r"^Prefill\. latency: \d\.\d{5} s, throughput: +\d+\.\d\d token/s$", out, re.MULTILINE)
    assert re.search(r"^Decode 4\. Batch size: 8, latency: \d\.\d{5} s, throughput: +\d+\.\d\d token/s$", out, re.M)
    assert "Decode 5." not in out  # the first five decode steps, as one_batch logs them without --log-decode-step
    assert re.search(r"^Decode\.  median latency: \d\.\d{5} s, median throughput: +\d+\.\d\d token/s$", out, re.M)
    assert re.search(r"^Total\. latency: +\d\.\d{3} s, throughput: +\d+\.\d\d token/s$", out, re.MULTILINE)
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(row["batch_size"], row["input_len"], row["output_len"]) for row in rows] == [(1, 1024, 8), (8, 1024, 8)]
    device = scenario_device("glm52-day0")
    for row in rows:
        config = {"tp": 8, "kv_cache_dtype": "auto"}
        prefill_s = device.prefill_ms(config, row["batch_size"] * 1024, 0) / 1000 * QUICK_SCALE
        assert row["prefill_latency"] >= prefill_s  # the device's time for the batch, at least
        assert set(row) >= {"median_decode_latency", "total_latency", "overall_throughput", "prefill_throughput"}


def test_vllm_bench_latency_prints_vllms_lines_and_json(tmp_path):
    root = layout(tmp_path / "vllm", "corvid3-fp8-block-tp8", "vllm")
    output = tmp_path / "latency.json"
    command = [sys.executable, str(root / "usr/local/bin/vllm"), "bench", "latency", "--model"]
    command += [str(root / "models/corvid-v3-fp8"), "-tp", "8", "--enable-expert-parallel", "--batch-size", "4"]
    command += ["--input-len", "256", "--output-len", "16", "--num-iters-warmup", "1", "--num-iters", "3"]
    command += ["--output-json", str(output)]
    environment = {**ENVIRONMENT, "HOME": str(root), "PYTHONPATH": str(root / SITE_PACKAGES)}
    with running_device(root / "run" / "twin-device", "corvid3-fp8-block-tp8"):
        run = subprocess.run(command, cwd=root, env=environment, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Warming up..." in run.stdout and re.search(r"^Avg latency: \d+\.\d+ seconds$", run.stdout, re.MULTILINE)
    for share in (10, 25, 50, 75, 90, 99):
        assert re.search(rf"^{share}% percentile latency: \d+\.\d+ seconds$", run.stdout, re.MULTILINE)
    results = json.loads(output.read_text())
    assert len(results["latencies"]) == 3 and set(results["percentiles"]) == {"10", "25", "50", "75", "90", "99"}
    device = scenario_device("corvid3-fp8-block-tp8")
    lower = device.prefill_ms({"tp": 8, "moe_tp": 1}, 4 * 256, 0) / 1000 * QUICK_SCALE
    assert min(results["latencies"]) >= lower  # a batch takes its prefill on the device at least
    refused = subprocess.run([*command, "--n", "2"], cwd=root, env=environment, capture_output=True, text=True)
    assert refused.returncode == 2 and "one sequence per prompt" in refused.stdout
