"""The twin's vLLM front (sandboxes/twin/fronts/vllm) on the --local layout: `vllm serve` parses as vLLM 0.25.1 parses
(names, short forms, value choices, JSON for --speculative-config, defaults), starts the shared engine with vLLM's
log lines in vLLM's order, serves vLLM's API, and logs vLLM's periodic statistics. Everything that imports the
`vllm` package runs in a subprocess: it loads the engine under the name `twin`, which other test files import from
the source tree. The crash wording of each scenario on this front: test_twin_scenarios.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers import free_port, wait_until_healthy
from twin_tasks import QUICK_SCALE, running_device

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "sandboxes" / "twin"
sys.path.insert(0, str(TWIN))
from layout import SITE_PACKAGES  # noqa: E402

SCENARIO = "corvid3-fp8-block-tp8"  # the second family with its day-0 build and tuning fixed
SPEC = '{"method": "mtp", "num_speculative_tokens": 2}'

pytestmark = pytest.mark.usefixtures("needs_gxx")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vllm-front")
    command = [str(TWIN / "build.sh"), "--local", str(root), "--scenario", SCENARIO, "--front", "vllm"]
    subprocess.run(command, check=True, capture_output=True)
    return root


def vllm(root: Path, *arguments: str, timeout: float = 60) -> subprocess.CompletedProcess:
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(root), "TWIN_TIME_SCALE": str(QUICK_SCALE)}
    environment["PYTHONPATH"] = str(root / SITE_PACKAGES)
    command = [sys.executable, str(root / "usr/local/bin/vllm"), *arguments]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=timeout, cwd=root)


def test_the_console_script_reports_its_version_and_serve_flags(root: Path) -> None:
    assert vllm(root, "--version").stdout.strip() == "0.25.1"
    help_text = vllm(root, "serve", "--help").stdout
    for flag in (
        "--tensor-parallel-size TENSOR_PARALLEL_SIZE, -tp",
        "--enable-expert-parallel, --no-enable-expert-parallel, -ep",
    ):
        assert flag in help_text
    assert "--speculative-config SPECULATIVE_CONFIG, -sc" in help_text
    assert "vllm serve [model_tag] [options]" in help_text


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--kv-cache-dtype", "fp4_e2m1"], "argument --kv-cache-dtype: invalid choice: 'fp4_e2m1'"),
        (["--speculative-config", "mtp"], "expected a JSON object, got 'mtp'"),
        (["--max-num-batched-tokens", "lots"], "Invalid number: 'lots'"),
    ],
)
def test_a_bad_flag_is_refused_by_the_parser(root: Path, arguments: list[str], error: str) -> None:
    result = vllm(root, "serve", "/models/x", *arguments)
    assert result.returncode == 2 and error in result.stderr


def test_flags_parse_as_vllm_parses_them(root: Path) -> None:
    """Underscores or dashes, `--flag=value`, BooleanOptionalAction, human-readable numbers, vLLM's defaults."""
    probe = (
        "import json, sys\n"
        "from vllm.entrypoints.cli.main import make_parser\n"
        "args = make_parser().parse_args(['serve', '--model', 'M', '--tensor_parallel_size=4', '-dp', '2',\n"
        f"    '--enable-expert-parallel', '--max-num-batched-tokens', '16k', '-sc', {SPEC!r}])\n"
        "print(json.dumps({k: v for k, v in vars(args).items() if k != 'dispatch_function'}))\n"
    )
    result = _python(root, probe)
    parsed = json.loads(result.stdout.splitlines()[-1])
    assert parsed["model_tag"] == "M" and parsed["tensor_parallel_size"] == 4 and parsed["data_parallel_size"] == 2
    assert parsed["enable_expert_parallel"] is True and parsed["max_num_batched_tokens"] == 16000
    assert parsed["speculative_config"] == json.loads(SPEC)
    assert (parsed["port"], parsed["host"], parsed["gpu_memory_utilization"]) == (8000, None, 0.92)
    assert "With `vllm serve`, you should provide the model as a positional argument" in result.stdout


def _python(root: Path, code: str) -> subprocess.CompletedProcess:
    environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root / SITE_PACKAGES)}
    result = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, cwd=root)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def get(url: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, None


@pytest.fixture(scope="module")
def server(root: Path):
    port, log = free_port(), root / "server.log"
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(root), "TWIN_TIME_SCALE": str(QUICK_SCALE)}
    environment["PYTHONPATH"] = str(root / SITE_PACKAGES)
    model = str(root / "models/corvid-v3-fp8")
    flags = ["-tp", "8", "--enable-expert-parallel", "--served-model-name", "corvid", "--speculative-config", SPEC]
    with running_device(root / "run" / "twin-device", SCENARIO), open(log, "w") as handle:
        process = subprocess.Popen(
            [sys.executable, str(root / "usr/local/bin/vllm"), "serve", model, "--port", str(port), *flags],
            env=environment,
            cwd=root,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until_healthy(url, process, log)
            yield url, log
        finally:
            process.terminate()
            process.wait(timeout=10)


def test_start_up_speaks_vllms_lines_in_vllms_order(server) -> None:
    _, log = server
    text = log.read_text()
    order = [
        "(APIServer pid=",
        "non-default args: {",
        "Resolved architecture: DeepseekV3ForCausalLM",
        "Enabling num_speculative_tokens > 1 will run multiple times of forward on same MTP layer",
        "Initializing a V1 LLM engine (v0.25.1) with config: model=",
        "rank 7 in world size 8 is assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank 7, EP rank 7",
        "Using ROCM_AITER_MLA backend out of potential backends:",
        "Loading weights took",
        "Model loading took",
        "Loading drafter model...",
        "GPU KV cache size:",
        "Graph capturing finished in",
        "init engine (profile, create kv cache, warmup model) took",
        "Starting vLLM server on http://0.0.0.0:",
        "INFO:     Application startup complete.",
    ]
    positions = [text.find(line) for line in order]
    assert -1 not in positions, [line for line, at in zip(order, positions, strict=True) if at == -1]
    assert positions == sorted(positions)
    assert "(Worker_TP3 pid=" in text and "(EngineCore_DP0 pid=" in text
    assert "Scheduler" not in text and "ready to roll" not in text  # nothing of sglang's wording


def test_serve_reads_vllms_start_up_as_its_kernel_choices(server) -> None:
    """What `serve` shows of this log: the attention backend line in vLLM's words and aiter's MoE lookups."""
    from porter.engines import vllm
    from porter.triage.log_digest import digest

    _, log = server
    shown = digest(enumerate(log.read_text().splitlines(), start=1), vllm.ENGINE.kernel_lines).render()
    assert "- attention backend: " in shown and "Using ROCM_AITER_MLA backend out of potential backends" in shown
    assert "- aiter tuned MoE configs: " in shown


def test_the_api_is_vllms(server) -> None:
    url, _ = server
    status, models = get(url + "/v1/models")
    assert status == 200 and models["data"][0]["id"] == "corvid" and models["data"][0]["owned_by"] == "vllm"
    assert get(url + "/version") == (200, {"version": "0.25.1"})
    assert get(url + "/get_server_info")[0] == 404 and get(url + "/flush_cache")[0] == 404


def test_statistics_lines_are_vllms(server) -> None:
    """Busy for longer than the stats interval on the twin's clock: the engine and speculative-decoding lines."""
    url, log = server
    payload = {"model": "corvid", "prompt": " ".join(["kilo"] * 400), "max_tokens": 120, "ignore_eos": True}
    request = urllib.request.Request(
        url + "/v1/completions", json.dumps(payload).encode(), {"Content-Type": "application/json"}
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "SpecDecoding metrics" not in log.read_text():
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.loads(response.read())["usage"]["completion_tokens"] == 120
    text = log.read_text()
    assert "Engine 000: Avg prompt throughput: " in text and ", Prefix cache hit rate: " in text
    assert "SpecDecoding metrics: Mean acceptance length: " in text and "Avg Draft acceptance rate: " in text
