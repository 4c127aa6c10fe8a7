"""Triage end to end: API, tracebacks and rank folding, budget, signature, burial, memory, the CLI."""

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from triage_noise import bury, noise_lines
from twin_tasks import QUICK_SCALE

import porter.triage
from porter.triage import scanner, triage_file, triage_main, triage_text

VLLM_WORKER = "(Worker_TP{rank} pid=29145{rank}) ERROR 03-01 04:24:{second:02d} [multiproc_executor.py:863] "
TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", line 600, in worker_main',
    "    worker = WorkerProc(*args, **kwargs)",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/model_loader/loader.py", line 456, in load',
    "    loaded_weights = model.load_weights(weights)",
    '  File "/usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py", line 1739, in _wrapped_call_impl',
    "    return self._call_impl(*args, **kwargs)",
    '  File "/usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py", line 1750, in _call_impl',
    "    return forward_call(*args, **kwargs)",
    '  File "/usr/lib/python3.12/functools.py", line 909, in wrapper',
    "    return dispatch(args[0].__class__)(*args, **kw)",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/glm.py", line 791, in load_weights',
    "    param = params_dict[name]",
    "            ~~~~~~~~~~~^^^^^^",
    "KeyError: 'model.layers.3.mlp.experts.w2_weight_scale'",
]


def interleaved_rank_tracebacks(ranks: int = 8, second: int = 25) -> str:
    """What vLLM prints when every worker dies the same way: the ranks' lines interleave."""
    lines = []
    for line in TRACEBACK:
        for rank in range(ranks):
            lines.append(VLLM_WORKER.format(rank=rank, second=second) + line)
    return "\n".join(lines) + "\n"


def test_the_entry_points_agree_and_the_dict_has_the_contract_fields(tmp_path):
    text = interleaved_rank_tracebacks()
    path = tmp_path / "server.log"
    path.write_text(text)
    from_text = triage_text(text)
    from_file = triage_file(path)
    assert from_text.to_dict() == from_file.to_dict()
    fields = {"category", "key_line", "key_line_no", "implicated", "signature", "excerpt", "excerpt_tokens", "findings"}
    assert fields <= from_text.to_dict().keys()


def test_interleaved_rank_tracebacks_fold_into_one_with_the_frames_that_matter():
    result = triage_text(interleaved_rank_tracebacks())
    assert result.category == "quant_config_mismatch"
    assert result.key_line == "KeyError: 'model.layers.3.mlp.experts.w2_weight_scale'"
    assert result.key_line_no == 8 * (len(TRACEBACK) - 1) + 1
    assert result.implicated == "vllm/model_executor/models/glm.py:791 (load_weights)"
    assert "[x8 from 8 ranks" in result.excerpt
    assert result.excerpt.count("KeyError") == 1 + result.excerpt.count("also ")
    assert "module.py" not in result.excerpt and "functools.py" not in result.excerpt
    assert "3 frames omitted" in result.excerpt and "loader.py" in result.excerpt
    assert result.excerpt.count("Traceback (most recent call last)") == 1


def test_the_root_exception_beats_the_wrapper_that_re_raised_it():
    log = (
        "Traceback (most recent call last):\n"
        '  File "/sgl/srt/layers/attention.py", line 120, in build\n'
        "    kernel = compile_kernel(src)\n"
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072, "
        "Hardware limit: 65536.\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/sgl/srt/managers/scheduler.py", line 2300, in run_scheduler_process\n'
        "    scheduler = Scheduler(server_args)\n"
        "RuntimeError: Scheduler initialisation failed\n"
    )
    result = triage_text(log)
    assert (result.category, result.key_line_no) == ("compile_error", 4)
    assert result.facts["required"] == 131072 and result.facts["limit"] == 65536
    assert "[chained" in result.excerpt


def test_an_error_introduced_by_the_line_before_takes_its_class():
    log = (
        "Process group watchdog thread terminated with exception:\n"
        "HIP error: operation not permitted when stream is capturing\n"
    )
    result = triage_text(log)
    assert (result.category, result.key_line_no) == ("comm_error", 2)


def test_a_crash_and_a_slow_fallback_are_both_reported():
    log = (
        "[aiter] shape is M:64, N:7168, K:2048, not found tuned config in /tmp/aiter_configs/bf16_tuned_gemm.csv\n"
        "Memory access fault by GPU node-2 (Agent handle: 0x2381c400) on address 0x79eaf1a00000. Reason: Unknown.\n"
    )
    result = triage_text(log)
    assert [finding.category for finding in result.findings] == ["gpu_memory_fault", "slow_fallback_perf"]
    assert result.findings[1].facts["config_path"] == "/tmp/aiter_configs/bf16_tuned_gemm.csv"


@pytest.mark.parametrize(
    ("log", "category"),
    [
        ("\n".join(noise_lines(2_000, seed=3)) + "\n", "ok"),
        ("[2026-07-14 10:00:00 TP0] Load weight begin.\nValueError: something nobody has a rule for\n", "other"),
        ("", "ok"),
    ],
)
def test_healthy_logs_are_ok_and_unknown_failures_are_other(log, category):
    result = triage_text(log)
    assert result.category == category
    assert result.excerpt_tokens >= 1


@pytest.mark.parametrize("budget", [300, 1_000, 4_000])
def test_the_excerpt_keeps_to_its_budget_and_always_keeps_the_key_line(budget):
    deep = [
        f'  File "/app/engine/layer_{index}.py", line {index}, in forward\n    return self.inner(x)'
        for index in range(400)
    ]
    log = "\n".join(
        [*(f"WARNING: odd thing number {index} happened, Error-ish {index % 7}" for index in range(200))]
        + [f"ValueError: distinct unknown failure {chr(65 + index % 26)}{index}" for index in range(60)]
        + ["Traceback (most recent call last):", *deep, "RuntimeError: HIP error: invalid device function"]
    )
    result = triage_text(log + "\n", token_budget=budget)
    assert result.category == "unsupported_arch_or_kernel"
    assert result.key_line in result.excerpt
    assert result.excerpt_tokens <= budget
    assert result.excerpt_tokens == -(-len(result.excerpt) // 4)


def test_the_signature_ignores_timestamps_pids_addresses_and_ranks_but_not_the_failure():
    first = triage_text(interleaved_rank_tracebacks(ranks=8, second=11)).signature
    second = triage_text(interleaved_rank_tracebacks(ranks=4, second=59).replace("29145", "777")).signature
    fault = "Memory access fault by GPU node-{node} (Agent handle: {handle}) on address {address}. Reason: Unknown.\n"
    fault_one = triage_text(fault.format(node=2, handle="0x2381c400", address="0x79eaf1a00000")).signature
    fault_two = triage_text(fault.format(node=6, handle="0x501def90", address="0x7f5e50c00000")).signature
    assert first == second and fault_one == fault_two
    assert first != fault_one


def test_a_failure_buried_in_noise_is_found_unchanged():
    log = interleaved_rank_tracebacks()
    plain = triage_text(log)
    buried_text, first_line = bury(log, count=20_000, seed=5)
    buried = triage_text(buried_text)
    assert (buried.category, buried.key_line) == (plain.category, plain.key_line)
    assert buried.key_line_no == plain.key_line_no + first_line - 1
    assert buried.key_line in buried.excerpt and buried.excerpt_tokens <= 4000


def test_memory_stays_flat_as_the_log_grows(monkeypatch, tmp_path):
    # Smaller caps and chunks than in production so that both sizes below are many chunks long.
    monkeypatch.setattr(scanner, "MAX_TEMPLATES", 2_000)
    monkeypatch.setattr(porter.triage, "CHUNK_BYTES", 1 << 18)

    def peak(count: int) -> int:
        path = tmp_path / f"noise-{count}.log"
        path.write_text("\n".join(noise_lines(count, seed=1)) + "\n")
        tracemalloc.start()
        triage_file(path)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    small, large = peak(20_000), peak(160_000)
    assert large < 1.5 * small, f"peak grew from {small} to {large} bytes for 8x the lines"


def test_cli_prints_the_view_and_a_json_last_line(tmp_path, capsys):
    path = tmp_path / "crash.log"
    path.write_text(interleaved_rank_tracebacks())
    assert triage_main(str(path), as_json=True) == 0
    output = capsys.readouterr().out.strip().splitlines()
    record = json.loads(output[-1])
    assert record["category"] == "quant_config_mismatch" and record["key_line_no"] == 8 * (len(TRACEBACK) - 1) + 1
    assert any(line.startswith("== triage: quant_config_mismatch") for line in output)


def test_cli_reads_stdin_and_names_a_missing_file(tmp_path):
    code = "import sys; from porter.triage import triage_main; sys.exit(triage_main('-', True))"
    done = subprocess.run(
        [sys.executable, "-c", code], input=interleaved_rank_tracebacks(), capture_output=True, text=True
    )
    assert done.returncode == 0 and json.loads(done.stdout.splitlines()[-1])["category"] == "quant_config_mismatch"
    missing = tmp_path / "nope.log"
    code = f"import sys; from porter.triage import triage_main; sys.exit(triage_main({str(missing)!r}, False))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2 and "nope.log" in done.stderr


TWIN = Path(__file__).resolve().parents[1] / "sandboxes" / "twin"


@pytest.mark.skipif(not (TWIN / "build.sh").exists(), reason="the twin engine is not in this checkout")
def test_the_twins_real_mtp_load_crash_is_a_shape_mismatch_naming_both_prefixes(tmp_path):
    subprocess.run(["bash", str(TWIN / "build.sh"), "--local", str(tmp_path)], check=True, capture_output=True)
    workdir = tmp_path / "sgl-workspace" / "twin"
    command = [sys.executable, "-m", "twin.launch_server", "--model-path", str(tmp_path / "models" / "glm-5.2-mxfp4")]
    command += ["--port", "39561", "--tp", "8", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "5"]
    command += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "6"]
    environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(workdir), "ROCM_PATH": str(tmp_path / "opt" / "rocm")}
    environment["TWIN_TIME_SCALE"] = str(QUICK_SCALE)
    log = tmp_path / "server.log"
    sys.path.insert(0, str(TWIN / "device"))
    from twin_device.host import running_device  # the simulated GPUs live outside the engine (twin v2)

    with running_device(tmp_path / "run" / "twin-device") as socket_path, open(log, "wb") as output:
        environment["TWIN_DEVICE_SOCKET"] = str(socket_path)
        subprocess.run(command, cwd=workdir, env=environment, stdout=output, stderr=subprocess.STDOUT, timeout=60)
    result = triage_file(log)
    assert result.category == "shape_mismatch", result.excerpt
    assert result.key_line in result.excerpt
    prefixes = " ".join(result.facts["module_prefixes"])
    assert "model.decoder." in prefixes and "model.layers." in prefixes
    assert len(result.facts["shapes"]) == 2


def test_a_progress_bar_redrawn_on_one_line_shows_its_last_state():
    bar = "".join(f"Loading safetensors checkpoint shards: {index}%|\r" for index in range(50_000))
    result = triage_text(f"{bar}\nRuntimeError: HIP error: invalid device function\n{bar}\n")
    assert (result.category, result.key_line_no) == ("unsupported_arch_or_kernel", 2)
    assert "shards: 49999%|" in result.excerpt and result.excerpt_tokens < 200


def test_a_file_with_no_newline_is_read_in_bounded_pieces_and_its_redraws_are_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(porter.triage, "CHUNK_BYTES", 1 << 16)
    redraws = "".join(f"\rLoading shards: {index % 100:3d}%|####      | {index}/9999" for index in range(40_000))
    path = tmp_path / "tqdm.log"
    path.write_text(redraws + "\rtorch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB" + redraws)
    with open(path, "rb") as stream:
        pieces = list(porter.triage._file_chunks(stream))
    assert len(pieces) > 20 and max(len(piece) for piece, _ in pieces) <= 2 * (1 << 16) + 1
    assert all(continues for _, continues in pieces[:-1]) and not pieces[-1][1]
    result = triage_file(path)
    assert (result.category, result.key_line_no, result.line_count) == ("out_of_memory", 1, 1)
    assert result.key_line.startswith("torch.OutOfMemoryError: HIP out of memory")
