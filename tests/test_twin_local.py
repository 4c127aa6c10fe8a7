"""The twin without Docker: the --local layout, the server's API over real HTTP on a device served from the
host, the solver against the built-in eval sets, nothing of the device inside the engine's tree, and the
device model's directions (pure functions, no wall-time assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers import free_port

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "sandboxes" / "twin"
sys.path.insert(0, str(TWIN / "engine"))
sys.path.insert(0, str(TWIN / "device"))

from twin import solver, tokenizer  # noqa: E402
from twin_device.host import running_device  # noqa: E402
from twin_device.model import DEFAULTS, Device  # noqa: E402

DATA = ROOT / "porter" / "checks" / "data"


pytestmark = pytest.mark.usefixtures("needs_gxx")


def post(url: str, payload: dict, timeout: float = 30) -> dict:
    request = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def layout(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("twin-local")
    subprocess.run([str(TWIN / "build.sh"), "--local", str(root)], check=True, capture_output=True)
    return root


@pytest.fixture(scope="module")
def device(layout: Path):
    with running_device(layout / "run" / "twin-device") as socket_path:
        yield socket_path


@pytest.fixture(scope="module")
def server(layout: Path, device: Path, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("log") / "server.log"
    command = [
        sys.executable,
        "-m",
        "twin.launch_server",
        "--model-path",
        str(layout / "models/glm-5.2-mxfp4"),
        "--tp",
        "8",
        "--port",
        str(port),
    ]
    with open(log, "w") as handle:
        process = subprocess.Popen(
            command,
            cwd=layout / "sgl-workspace/twin",
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={"PATH": "/usr/bin:/bin", "HOME": str(layout), "ROCM_PATH": ""},
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if get(url + "/health")[0] == 200:
                break
        except OSError:
            time.sleep(0.2)
    assert process.poll() is None, log.read_text()[-3000:]
    yield url, log
    process.terminate()
    process.wait(timeout=10)


def test_local_layout_is_a_git_repo_with_a_stable_commit(layout: Path, tmp_path: Path) -> None:
    subprocess.run([str(TWIN / "build.sh"), "--local", str(tmp_path)], check=True, capture_output=True)
    heads = [
        subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root / "sgl-workspace/twin", capture_output=True, text=True, check=True
        ).stdout
        for root in (layout, tmp_path)
    ]
    assert heads[0] == heads[1]
    author = subprocess.run(
        ["git", "log", "-1", "--format=%an"], cwd=layout / "sgl-workspace/twin", capture_output=True, text=True
    ).stdout.strip()
    assert author == "twin upstream"
    assert (layout / "models/glm-5.2-mxfp4/config.json").exists()
    assert (layout / "opt/rocm/include/hip/hip_runtime.h").exists()
    assert not (layout / "opt/rocm/include/cuda_runtime.h").exists()


def test_unknown_flag_is_an_argparse_error(layout: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "twin.launch_server", "--model-path", "x", "--no-such-flag"],
        cwd=layout / "sgl-workspace/twin",
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in result.stderr


def test_baseline_log_warns_about_the_untuned_moe_shape(server) -> None:
    _, log = server
    text = log.read_text()
    assert "[fused_moe] using 2stage default for (256, 1, 6144, 2048, 256, 8, 'ActivationType.Silu'" in text
    assert "[fused_moe] using 2stage default for (256, 16384, 6144, 2048, 256, 8," in text
    assert text.count("Load weight begin") == 8  # one per simulated TP rank


def test_completion_usage_counts_tokens_exactly_and_reports_cached_prefix(server) -> None:
    url, _ = server
    prompt = " ".join(["alpha"] * 100)
    first = post(url + "/v1/completions", {"prompt": prompt, "max_tokens": 8, "ignore_eos": True})
    second = post(url + "/v1/completions", {"prompt": prompt, "max_tokens": 8, "ignore_eos": True})
    assert first["usage"]["prompt_tokens"] == 100
    assert first["usage"]["completion_tokens"] == 8
    assert first["choices"][0]["finish_reason"] == "length"
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == 96  # whole 16-token blocks
    post(url + "/flush_cache", {})
    third = post(url + "/v1/completions", {"prompt": prompt, "max_tokens": 8, "ignore_eos": True})
    assert third["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_tokenize_matches_the_documented_rule(server) -> None:
    url, _ = server
    reply = post(url + "/tokenize", {"prompt": "the answer is 17.\n#### 17"})
    assert reply["count"] == 10 and len(reply["tokens"]) == 10
    assert reply["max_model_len"] == 202752


def test_streaming_chat_with_usage_answers_a_choice_question(server) -> None:
    url, _ = server
    question = (
        "What is the correct answer to this question: A resistor of 4 ohms carries a current of 3 A. What is the "
        "voltage across it?\n\nChoices:\n(A) 7 V\n(B) 12 V\n(C) 1.333 V\n(D) 24 V\n\n"
        "Answer with the letter of the correct choice, as 'Answer: X'."
    )
    payload = {
        "messages": [{"role": "user", "content": question}],
        "max_tokens": 200,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(
        url + "/v1/chat/completions", json.dumps(payload).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        events = [line[6:] for line in response.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    text = "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks if chunk["choices"])
    usage = chunks[-1]["usage"]
    assert text.endswith("Answer: B") or solver._unit_hash(question.split("Choices:")[0]) < 0.2
    assert usage["completion_tokens"] == len(tokenizer.tokenize(text))


@pytest.mark.parametrize("path", ["/health", "/health_generate", "/v1/models", "/get_server_info"])
def test_info_endpoints_answer(server, path: str) -> None:
    url, _ = server
    status, body = get(url + path)
    assert status == 200
    if path == "/get_server_info":
        assert body["tp"] == 8 and body["moe_tuned"] is False


def test_unknown_route_is_404(server) -> None:
    url, _ = server
    assert get(url + "/nope")[0] == 404


@pytest.mark.parametrize(
    ("kv_cache_dtype", "corrupt", "low", "high"),
    [("auto", (), 0.93, 1.0), ("fp8_e4m3", (), 0.93, 1.0), ("fp8_e5m2", (), 0.7, 0.9), ("auto", ("x",), 0.0, 0.2)],
)
def test_solver_accuracy_on_the_builtin_gsm8k_set(kv_cache_dtype: str, corrupt: tuple, low: float, high: float) -> None:
    rows = [json.loads(line) for line in (DATA / "twin-gsm8k.jsonl").read_text().splitlines()]
    numerics = solver.Numerics(tuple(Device().error_rates(kv_cache_dtype, bool(corrupt))), corrupt)
    correct = 0
    for row in rows:
        reply = solver.reply(f"Question: {row['question']}\nAnswer:", numerics)
        correct += reply.rsplit("####", 1)[1].strip() == row["answer"].rsplit("####", 1)[1].strip()
    assert low <= correct / len(rows) <= high


def test_every_builtin_question_is_solvable_when_loaded_correctly() -> None:
    for line in (DATA / "twin-gsm8k.jsonl").read_text().splitlines():
        row = json.loads(line)
        steps, value = solver.solve_word_problem(row["question"])
        assert value == float(row["answer"].rsplit("####", 1)[1])
    rows = [json.loads(line) for line in (DATA / "twin-gpqa.jsonl").read_text().splitlines()]
    assert len(rows) == 100
    assert all(
        set(row) == {"Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"}
        for row in rows
    )


def test_eval_sets_are_reproducible(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(TWIN / "gen_evals.py"), "--out", str(tmp_path)], check=True, capture_output=True
    )
    for name in ("twin-gsm8k.jsonl", "twin-gpqa.jsonl"):
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes()


def knee_capacity(device: Device, config: dict, replicas: int) -> float:
    """Uncached prompt tokens per second a node can prefill (the quantity the knee follows)."""
    overhead = device.prefill_ms(config, 0, 0)
    return replicas * 8000 / (device.prefill_ms(config, 8000, 0) - overhead) * 1000


def single_stream(device: Device, config: dict) -> float:
    return 1000 * device.advance(config) / device.decode_ms(config, 1, 2000)


TUNED = ["moe_ck2stages_gemm1_256x128x128x128_2x2_MXFP4_v3"] * 13


def test_device_model_directions_of_the_story() -> None:
    device = Device()
    tp8, tp4 = {"tp": 8}, {"tp": 4}
    tuned = {"tp": 4, "moe_kernels": TUNED}
    fp8 = {**tuned, "kv_cache_dtype": "fp8_e4m3"}
    capacities = [knee_capacity(device, tp8, 1)] + [knee_capacity(device, c, 2) for c in (tp4, tuned, fp8)]
    assert capacities == sorted(capacities) and capacities[-1] > 2 * capacities[0]
    spec3 = {"tp": 8, "spec_steps": 3, "spec_draft_tokens": 4}
    spec5 = {"tp": 8, "spec_steps": 5, "spec_draft_tokens": 6}
    assert 2.7 < single_stream(device, spec3) / single_stream(device, tp8) < 3.3
    assert single_stream(device, spec5) > 1.15 * single_stream(device, spec3)
    assert device.prefill_ms(tp8, 100, 1900) < device.prefill_ms(tp8, 2000, 0) / 5


def test_a_made_up_kernel_name_does_not_run_at_tuned_speed() -> None:
    device = Device()
    made_up = {"tp": 4, "moe_kernels": ["moe_ck2stages_gemm1_fastest_ever"] * 13}
    assert device.prefill_ms(made_up, 8000, 0) == device.prefill_ms({"tp": 4}, 8000, 0)
    assert device.prefill_ms({"tp": 4, "moe_kernels": TUNED}, 8000, 0) < device.prefill_ms(made_up, 8000, 0)


def test_nothing_of_the_device_is_in_the_sandbox_tree(layout: Path) -> None:
    """The engine, checkpoint and toolchain hold no device code, parameter name or figure."""
    interface = set(Device().properties())  # the properties the engine asks for, by name
    needles = [name for name in DEFAULTS if "_" in name and name not in interface]
    needles += ["twin_device", "draft_acceptance", "0.9 ", "1.8x"]
    found = []
    for path in layout.rglob("*"):
        if path.is_file() and ".git" not in path.parts and path.suffix in (".py", ".json", ".csv", ".cpp", ".h", ""):
            text = path.read_text(errors="replace")
            found += [f"{path.relative_to(layout)}: {needle}" for needle in needles if needle in text]
    assert found == []


def test_without_a_device_the_engine_sees_no_gpu(layout: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "twin.launch_server", "--model-path", str(layout / "models/glm-5.2-mxfp4")],
        cwd=layout / "sgl-workspace/twin",
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TWIN_DEVICE_SOCKET": str(tmp_path / "none.sock")},
        timeout=60,
    )
    assert result.returncode == 1
    assert "No HIP GPUs are available" in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("before", "after", "story"),
    [
        (({"tp": 8}, 1), ({"tp": 4}, 2), 1944 / 1461),  # TP8 -> TP4xDP2, output tok/s/node at the knee
        (({"tp": 4}, 2), ({"tp": 4, "moe_kernels": TUNED}, 2), 2626 / 1944),  # the tuned MoE config
    ],
    ids=["tp8-to-tp4dp2", "tuned-moe"],
)
def test_prefill_capacity_moves_follow_the_story_within_10_percent(before, after, story) -> None:
    """At a prefill-bound knee the move's gain is the node's prefill capacity ratio (benchmarks/twin_perf.py
    measures the knees themselves)."""
    device = Device()
    ratio = knee_capacity(device, *after) / knee_capacity(device, *before)
    assert abs(ratio / story - 1) < 0.10, ratio
