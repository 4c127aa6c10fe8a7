"""What the system prompt tells a model a tool costs: the figures follow the task's own check settings."""

from __future__ import annotations

from twin_tasks import ROOT

from porter.checks.workload import level_arrivals, level_send_seconds
from porter.loop.prompt import cost_lines
from porter.task import load_task


def test_the_sweep_cost_counts_levels_bisections_minimum_requests_and_repeated_samples() -> None:
    twin = "\n".join(cost_lines(load_task(ROOT / "tasks" / "twin_glm52.yaml")))
    # 8 RPS must send 32 requests after its 1 s warm-up (5 s); faster rates send for the level's 3 s
    assert "up to 6 rates and 3 bisection steps" in twin and "each level sending for 3-5 s" in twin
    assert "first measurement runs 2 sweeps" in twin and "2 times on a configuration's first measurement" in twin
    assert "`serve` with reduced: true checks a crash fix on the engine's reduced start-up" in twin
    real = "\n".join(cost_lines(load_task(ROOT / "tasks" / "glm52_mi355x.yaml")))
    assert "each level sending for 300 s" in real and "up to about 40.0 min plus those waits" in real


def test_a_level_sends_for_about_what_its_arrivals_take() -> None:
    """The estimate is level_arrivals' rule: the duration, or the warm-up plus the minimum after it."""
    for rps, duration, warmup in ((8, 3.0, 1.0), (28, 3.0, 1.0), (0.5, 300.0, 30.0)):
        arrivals = level_arrivals(rps, 0, duration, None, 32, warmup)
        expected = level_send_seconds(rps, duration, None, 32, warmup)
        assert abs(arrivals[-1] - expected) / expected < 0.35, (rps, arrivals[-1], expected)
    assert level_send_seconds(4, None, 20) == 5.0


def test_the_rules_state_the_keep_bar_as_the_comparisons_compute_it(tmp_path) -> None:
    from local_tasks import open_local_run

    from porter.ledger import noise
    from porter.loop.prompt import speed_rules, system_prompt

    ctx = open_local_run(tmp_path)
    try:
        text = " ".join(system_prompt(ctx, "has python3").split())
    finally:
        ctx.transcript.close()
        ctx.sandbox.stop(remove=True)
    rules = " ".join(speed_rules(ctx.task).split())  # what a task with a speed target is told
    assert f"the larger of {ctx.task.checks.min_improvement:.0%} and a 95% bound" in rules
    assert f"plus {noise.RESOLUTION_STEPS:g} x the knee's bracket" in rules
    assert "Beyond noise" not in text  # this task declares no speed check
    assert "porter ends the run itself once the accepted configuration meets every target" in text


def test_the_engines_one_batch_benchmark_is_named_as_this_image_runs_it() -> None:
    """Upstream's tool on a real task; on the twin, the same tool beside the package the serve command launches."""
    real = "\n".join(cost_lines(load_task(ROOT / "tasks" / "glm52_mi355x.yaml")))
    assert "python3 -m sglang.bench_one_batch --model-path MODEL" in real
    twin = "\n".join(cost_lines(load_task(ROOT / "tasks" / "twin_glm52.yaml")))
    assert "python3 -m twin.bench_one_batch --model-path MODEL" in twin and "Upstream sglang has it" in twin
    vllm = "\n".join(cost_lines(load_task(ROOT / "tests" / "data" / "twin_corvid3_vllm.yaml")))
    assert "vllm bench latency --model MODEL" in vllm and "Upstream vllm has it" in vllm


def test_the_programs_line_finds_the_rocm_toolchain_off_path(tmp_path) -> None:
    """The prompt said the sandbox lacks hipcc while the log showed the engine's JIT building with it: a ROCm
    image keeps hipcc in $ROCM_PATH/bin, off PATH, and the probe looks there too."""
    import yaml
    from local_tasks import local_task

    from porter.evaluate import runs
    from porter.loop.prompt import probe_programs

    rocm = tmp_path / "rocm"
    (rocm / "bin").mkdir(parents=True)
    (rocm / "bin" / "hipcc").write_text("#!/bin/sh\n")
    (rocm / "bin" / "hipcc").chmod(0o755)
    path = local_task(tmp_path)
    task = yaml.safe_load(path.read_text())
    task["sandbox"]["env"] = {"ROCM_PATH": str(rocm)}
    path.write_text(yaml.safe_dump(task))
    ctx = runs.open_run(load_task(path), str(path))
    try:
        programs = probe_programs(ctx)
    finally:
        ctx.transcript.close()
        ctx.sandbox.stop(remove=True)
    assert f"hipcc (at {rocm}/bin/hipcc, not on PATH)" in programs and "python3" in programs.split(";")[0]
    assert "hipcc" not in programs.split("lacks")[1]


def test_a_quality_only_task_is_not_told_how_speed_is_judged() -> None:
    """A bring-up whose targets are all quality (a seat recording's task): no tuning, no one-batch benchmark, no
    noise bar in its prompt; the flagship, with speed targets, has them."""
    from porter.loop.prompt import has_speed_target

    quality_only = load_task(ROOT / "transcripts" / "seat-corvid3-fp8-fnuz-gfx950" / "task.yaml")
    flagship = load_task(ROOT / "tasks" / "twin_glm52.yaml")
    assert quality_only.tune and not has_speed_target(quality_only) and has_speed_target(flagship)
    assert not any("tune " in line or "one batch" in line for line in cost_lines(quality_only, speed=False))
    assert any(line.startswith("- tune ") for line in cost_lines(flagship)) and "one batch" in cost_lines(flagship)[-2]
