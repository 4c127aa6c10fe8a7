"""The twin without Docker: the --local layout, the server's API over real HTTP on a device served from the
host, the solver against the built-in eval sets, nothing of the device inside the engine's tree, and the
device model's directions (pure functions, no wall-time assertions)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from helpers import free_port, wait_until_healthy
from twin_tasks import QUICK_SCALE

from porter.engines import sglang
from porter.triage.log_digest import digest

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "sandboxes" / "twin"
sys.path.insert(0, str(TWIN / "engine"))
sys.path.insert(0, str(TWIN / "device"))

from twin import jit, solver, tokenizer  # noqa: E402
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


@contextlib.contextmanager
def twin_server(layout: Path, log: Path, *flags: str, home: Path | None = None, socket: Path | None = None):
    """A twin server on the --local layout (the device must be served, at `socket` if not the layout's), its URL
    while it runs. Its JIT cache is under `home` (the layout by default)."""
    port = free_port()
    command = [sys.executable, "-m", "twin.launch_server", "--model-path", str(layout / "models/glm-5.2-mxfp4")]
    with open(log, "w") as handle:
        process = subprocess.Popen(
            [*command, "--port", str(port), *flags],
            cwd=layout / "sgl-workspace/twin",
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={
                "PATH": "/usr/bin:/bin",
                "HOME": str(home or layout),
                "ROCM_PATH": "",
                "TWIN_TIME_SCALE": str(QUICK_SCALE),
                **({"TWIN_DEVICE_SOCKET": str(socket)} if socket else {}),
            },
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, process, log)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def server(layout: Path, device: Path, tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "server.log"
    with twin_server(layout, log, "--tp", "8") as url:
        yield url, log


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


def test_serve_reads_the_twins_start_up_as_its_warnings_and_kernel_choices(server) -> None:
    """The digest `serve` shows of the twin's sglang-worded log: its warning line, the attention backend and aiter's
    lookups (the baseline has no tuned row), each per-rank line once."""
    _, log = server
    shown = digest(enumerate(log.read_text().splitlines(), start=1), sglang.ENGINE.kernel_lines).render()
    assert shown.startswith("Warnings and errors in the log: 1\n") and "WARNING Set DSA backends" in shown
    assert "- attention backend: " in shown and "Attention backend: aiter" in shown
    assert re.search(r"aiter tuned MoE configs: 0 keys with a tuned row, \d+ on the default; first missed key", shown)


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
    """aiter's key, looked up by padded M: the captured decode sizes at start-up, a prefill's size when it runs
    (inter_dim is one TP8 rank's share of 2048)."""
    url, log = server
    key = "[fused_moe] using 2stage default for ('gfx950', 256, {}, 6144, 256, 256, 8, 'ActivationType.Silu'"
    text = log.read_text()
    assert key.format(1) in text and key.format(256) in text
    assert text.count("Load weight begin") == 8  # one per simulated TP rank
    assert key.format(2048) not in text
    post(url + "/v1/completions", {"prompt": " ".join(["oscar"] * 1500), "max_tokens": 2, "ignore_eos": True})
    assert key.format(2048) in log.read_text()  # 1500 new tokens pad to 2048


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


def test_batches_are_logged_as_sglang_logs_them(server) -> None:
    url, log = server
    post(url + "/v1/completions", {"prompt": " ".join(["kilo"] * 300), "max_tokens": 90, "ignore_eos": True})
    text = log.read_text()
    assert re.search(
        r"\[[-0-9 :]+ TP0\] Prefill batch, #new-seq: 1, #new-token: \d+, #cached-token: \d+, token usage: 0\.\d\d, "
        r"#running-req: 1, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput \(token/s\): "
        r"\d+\.\d\d$",  # sglang 0.5.20's fields, in its order (scheduler_components/metrics_reporter.py)
        text,
        re.MULTILINE,
    )
    assert re.search(
        r"Decode batch, #running-req: 1, #token: \d+, token usage: 0\.\d\d, cuda graph: True, "
        r"gen throughput \(token/s\): \d+\.\d\d, #queue-req: 0$",
        text,
        re.MULTILINE,
    )
    assert "gen throughput (token/s): " in text and "accept len" not in text  # no drafts without MTP


def test_a_full_kv_pool_queues_the_next_request(layout: Path, device: Path, tmp_path: Path) -> None:
    """A static pool that holds one request at a time: the second waits in the queue until the first ends."""
    log = tmp_path / "server.log"
    with twin_server(layout, log, "--tp", "8", "--mem-fraction-static", "0.1742") as url:
        pool = int(re.search(r"KV Cache is allocated\. #tokens: (\d+)", log.read_text()).group(1))
        assert 1000 < pool < 20000
        payload = {"prompt": " ".join(["lima"] * (pool // 2)), "max_tokens": 60, "ignore_eos": True, "stream": True}
        with concurrent.futures.ThreadPoolExecutor(2) as pool_threads:
            first, second = pool_threads.map(lambda _: stream_times(url, payload), range(2))
    (early, late) = sorted([first, second])
    # the second request's first token comes once the first request has streamed (as its client thread saw it:
    # two threads on a loaded machine can read the server's last and first token in either order by a millisecond),
    # not after its first token as two requests batched together would
    assert late[0] >= early[0] + 0.9 * (early[1] - early[0])
    assert "#queue-req: 1" in log.read_text()


def test_a_relaunch_reads_the_weights_from_the_page_cache_and_loads_the_built_kernels(layout: Path, tmp_path: Path):
    """The first start-up of a node reads the checkpoint cold and builds the JIT kernels; the next one is faster
    in wall time and says why in its log."""
    logs = [tmp_path / "first.log", tmp_path / "again.log"]
    with running_device(tmp_path / "node") as socket:  # a node of its own: nothing read, nothing built
        for log in logs:
            with twin_server(layout, log, "--tp", "8", home=tmp_path, socket=socket):
                pass
    first, again = (log.read_text() for log in logs)
    load = [float(re.search(r"Load weight end\. elapsed=([\d.]+) s", text).group(1)) for text in (first, again)]
    assert load[1] < load[0] / 2
    assert "start build [mla_rope_and_cache]" in first and "start build" not in again
    assert re.search(r"Init torch distributed ends\. elapsed=[\d.]+ s", again)
    assert re.search(r"Capture cuda graph end\. Time elapsed: [\d.]+ s", again)


def test_start_up_takes_minutes_at_scale_1_and_a_relaunch_less_than_half() -> None:
    node = Device()
    shards = {f"model-0000{n}-of-00004.safetensors": 101.3 for n in range(1, 5)}

    def launch(spec_steps: int = 0, builds: tuple[str, ...] = ()) -> float:
        seconds = node.startup_seconds("init_distributed", {})
        seconds += sum(node.startup_seconds("load_shard", {"shard": name, "gb": gb}) for name, gb in shards.items())
        seconds += sum(node.startup_seconds("jit_build", {"module": module}) for module in builds)
        seconds += node.startup_seconds("capture", {"batch_sizes": 14})
        if spec_steps:
            seconds += node.startup_seconds("capture_draft", {"batch_sizes": 14, "steps": spec_steps})
        return seconds

    first, again = launch(builds=("mla_rope_and_cache",)), launch()
    assert 120 <= first <= 600 and again < first / 2
    assert launch(spec_steps=5) > launch(spec_steps=3) > again
    failed = node.startup_seconds("jit_build", {"module": "x", "failed": True})
    assert failed < node.startup_seconds("jit_build", {"module": "x"})


def stream_times(url: str, payload: dict) -> tuple[float, float]:
    """Monotonic times of a streamed completion's first and last chunk."""
    request = urllib.request.Request(
        url + "/v1/completions", json.dumps(payload).encode(), {"Content-Type": "application/json"}
    )
    stamps = []
    with urllib.request.urlopen(request, timeout=60) as response:
        for line in response:
            if line.startswith(b"data: {"):
                stamps.append(time.monotonic())
    return stamps[0], stamps[-1]


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


def knee_capacity(device: Device, config: dict, replicas: int, kernel: str = "") -> float:
    """Uncached prompt tokens per second a node can prefill (the quantity the knee follows), with the MoE kernel
    the engine launches for a prefill of that size."""
    overhead = device.prefill_ms(config, 0, 0, kernel)
    return replicas * 8000 / (device.prefill_ms(config, 8000, 0, kernel) - overhead) * 1000


def single_stream(device: Device, config: dict, context: int = 10000, kernel: str = "") -> float:
    """Tokens/s of one request at a context of `context` tokens (the flagship's 10k single stream)."""
    return 1000 * device.advance(config) / device.decode_ms(config, 1, context, kernel)


TUNED = "moe_ck2stages_gemm1_256x128x128x128_2x2_MXFP4_v3"
SPEC_3 = {"spec_steps": 3, "spec_draft_tokens": 4}
SPEC_5 = {"spec_steps": 5, "spec_draft_tokens": 6}
LIGHT = {"kv_cache_dtype": "fp8_e4m3", "allreduce_fusion": True}
PUBLIC_ACCEPTANCE = [0.94, 0.67, 0.28, 0.08, 0.02]  # by draft position, a public GLM-5.2 MTP run on MI355X


def test_device_model_directions_of_the_story() -> None:
    """Prefill sets the knee (topology and the tuned MoE move it; the KV dtype does not); decode sets single-stream
    speed (MTP, the fp8 KV cache's reads at long context, the fused all-reduce, which saves most at TP8)."""
    device = Device()
    tp8, tp4 = {"tp": 8}, {"tp": 4}
    capacities = [knee_capacity(device, tp8, 1), knee_capacity(device, tp4, 2), knee_capacity(device, tp4, 2, TUNED)]
    assert capacities == sorted(capacities) and capacities[-1] > 1.6 * capacities[0]
    assert knee_capacity(device, {**tp4, "kv_cache_dtype": "fp8_e4m3"}, 2, TUNED) == capacities[-1]
    assert single_stream(device, {**tp8, "kv_cache_dtype": "fp8_e4m3"}) > 1.2 * single_stream(device, tp8)
    assert single_stream(device, {**tp8, "kv_cache_dtype": "fp8_e4m3"}, 500) < 1.05 * single_stream(device, tp8, 500)
    fusion_gain = {
        tp: single_stream(device, {"tp": tp, "allreduce_fusion": True}) / single_stream(device, {"tp": tp})
        for tp in (4, 8)
    }
    assert fusion_gain[8] > fusion_gain[4] > 1
    assert device.prefill_ms(tp8, 100, 1900) < device.prefill_ms(tp8, 2000, 0) / 5


def test_mtp_trades_single_stream_speed_for_batch_cost() -> None:
    """With the public acceptance profile depth 5 is no faster than depth 3 (about 0.1 more accepted tokens for
    two more draft steps), and verifying drafts costs more the larger the batch."""
    device = Device()
    shallow, deep = single_stream(device, {"tp": 8, **SPEC_3}), single_stream(device, {"tp": 8, **SPEC_5})
    assert abs(deep / shallow - 1) < 0.05
    gain = [
        device.advance(SPEC_5) * device.decode_ms({}, batch, 0) / device.decode_ms(SPEC_5, batch, 0)
        for batch in (1, 32, 128)
    ]
    assert gain == sorted(gain, reverse=True) and gain[0] > 2.2 and gain[-1] < 1.6


def test_mtp_stack_is_about_three_times_the_baseline_single_stream() -> None:
    """The story: ~213 tok/s with fp8 KV + fusion + MTP 5/1/6, from about a third of that without MTP."""
    device = Device()
    final = single_stream(device, {"tp": 4, **SPEC_5, **LIGHT}, kernel=TUNED)  # the story's configuration
    assert abs(final / single_stream(device, {"tp": 8}) / 3.0 - 1) < 0.10
    assert abs(final / 213 - 1) < 0.10


def test_draft_acceptance_by_position_follows_the_public_profile_and_the_text() -> None:
    """Averaged over many texts the acceptance by position is the public figure within 10%; each text has its
    own (a predictable text accepts more), the same text always the same."""
    device = Device()
    rows = [device.acceptance_by_position(SPEC_5, f"text-{index}") for index in range(500)]
    average = [sum(column) / len(rows) for column in zip(*rows, strict=True)]
    for twin, public in zip(average, PUBLIC_ACCEPTANCE, strict=True):
        assert abs(twin / public - 1) < 0.10, (average, PUBLIC_ACCEPTANCE)
    assert len({round(sum(row), 3) for row in rows}) > 50
    assert device.acceptance_by_position(SPEC_5, "text-7") == rows[7]
    assert len(device.acceptance_by_position(SPEC_3)) == 3 and device.acceptance_by_position({}) == []


def test_a_made_up_kernel_name_does_not_run_at_tuned_speed() -> None:
    device, tp4 = Device(), {"tp": 4}
    made_up = "moe_ck2stages_gemm1_fastest_ever"
    assert device.prefill_ms(tp4, 8000, 0, made_up) == device.prefill_ms(tp4, 8000, 0)
    assert device.prefill_ms(tp4, 8000, 0, TUNED) < device.prefill_ms(tp4, 8000, 0, made_up)
    assert device.decode_ms(tp4, 16, 4000, TUNED) < device.decode_ms(tp4, 16, 4000, made_up)


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
        (({"tp": 4}, 2), ({"tp": 4}, 2, TUNED), 2626 / 1944),  # the tuned MoE config, at the prefill's size
    ],
    ids=["tp8-to-tp4dp2", "tuned-moe"],
)
def test_prefill_capacity_moves_follow_the_story_within_10_percent(before, after, story) -> None:
    """At a prefill-bound knee the move's gain is the node's prefill capacity ratio (benchmarks/twin_perf.py
    measures the knees themselves)."""
    device = Device()
    ratio = knee_capacity(device, *after) / knee_capacity(device, *before)
    assert abs(ratio / story - 1) < 0.10, ratio


def test_twin_perf_sweeps_the_flagship_and_salts_each_level(monkeypatch) -> None:
    """benchmarks/twin_perf.py: the flagship's sweep converted to the clock it runs at, and each level's prompts
    shared up to the cached prefix only (a level replaying another's whole prompts would be served from the
    prefix cache and read a knee too high)."""
    spec = importlib.util.spec_from_file_location("twin_perf", ROOT / "benchmarks" / "twin_perf.py")
    twin_perf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(twin_perf)
    task = yaml.safe_load((ROOT / "tasks" / "twin_glm52.yaml").read_text())
    clock = float(task["sandbox"]["env"]["TWIN_TIME_SCALE"])
    monkeypatch.setenv("TWIN_TIME_SCALE", "1")
    sweep = twin_perf.flagship_sweep()
    throughput = task["checks"]["throughput"]
    assert sweep["levels"] == [rps * clock for rps in throughput["rps"]]
    assert sweep["slo"] == throughput["slo"]["ttft_s"] / clock
    assert sweep["input_tokens"] == throughput["workload"]["input_tokens"]
    first, second = (twin_perf.make_prompt(random.Random(0), 2000, 0.6, level) for level in ("1", "2"))
    shared = len(os.path.commonprefix([tokenizer.token_ids(first), tokenizer.token_ids(second)]))
    assert shared == 1200
    assert len(tokenizer.token_ids(first)) >= 2000


def test_use_rocm_comes_from_the_build_flags_not_from_hipcc(layout: Path, tmp_path: Path) -> None:
    """As on a ROCm node: hipcc defines the HIP platform, the extension build (twin/jit.py, as torch's
    cpp_extension) adds -DUSE_ROCM=1, so a guard on USE_ROCM holds only in what the engine builds."""
    source = tmp_path / "probe.cpp"
    source.write_text("#ifndef __HIP_PLATFORM_AMD__\n#error no platform\n#endif\n#ifdef USE_ROCM\n#error built\n#endif")
    hipcc = str(layout / "opt" / "rocm" / "bin" / "hipcc")
    bare = subprocess.run([hipcc, "-c", str(source)], capture_output=True, text=True, cwd=tmp_path)
    assert bare.returncode == 0, bare.stderr
    built = subprocess.run([hipcc, *jit.HIP_FLAGS, "-c", str(source)], capture_output=True, text=True, cwd=tmp_path)
    assert built.returncode != 0 and "#error built" in built.stderr
