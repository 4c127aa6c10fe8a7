"""Task files and runs on the twin for the loop, playbook and output tests.

`fast_task_data` is tasks/twin_glm52.yaml on the twin's clock at twice its speed (TWIN_TIME_SCALE=0.5 in the
sandbox's env; every rate, latency limit and speed target is scaled from the task's own clock to match, so each
check sees the same requests), with the quality sets cut to 100 / 50 questions and two single-stream requests.
`fast_twin_task` writes it at the quick clock unless asked for another. The defects, the fixes, the targets and
the directions are the flagship's. The single-stream target has margin both ways: MTP with the fp8 KV cache
clears it by ~20% (a loaded machine's late clock reads slower, and replay compares met flags exactly), and MTP
alone stays ~8% below it (a late clock never reads faster).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from porter.evaluate import runs
from porter.ledger.transcript import read_state, read_transcript
from porter.loop import agent
from porter.models import ScriptedModel, make_model
from porter.redaction import redact
from porter.task import load_task

ROOT = Path(__file__).resolve().parents[1]
TIME_SCALE = 0.5  # the twin's clock for tests that compare speeds: the story, the playbook's runs
# ... and for tests that only start, crash, fault or check the quality of the twin: its start-up takes minutes at
# scale 1 (weights, kernel builds, graph capture), seconds at this clock
QUICK_SCALE = 0.1
# the twin images' name, as build.sh and the twin tasks spell it (a worktree sets its own on a shared daemon)
TWIN_TAG = os.environ.get("PORTER_TWIN_TAG") or "porter-twin2"
FIXES = ROOT / "sandboxes" / "twin" / "fixes"  # the known fixes, as patches
STORY_RECORDING = ROOT / "tests" / "data" / "story"  # the story's committed recording: task.yaml, transcript.jsonl
SPEC_516 = {  # the story's MTP depth (sglang's EAGLE flags)
    "speculative-algorithm": "EAGLE",
    "speculative-num-steps": 5,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 6,
}
SPEC_314 = {**SPEC_516, "speculative-num-steps": 3, "speculative-num-draft-tokens": 4}
sys.path.insert(0, str(ROOT / "sandboxes" / "twin" / "device"))
from twin_device.host import running_device  # noqa: E402

__all__ = ["running_device"]


def build_twin(scenario: str = "glm52-day0") -> str:
    """The image of a scenario (`NAME`) or of a scenario on vLLM's front (`NAME-vllm`, as build.sh tags it)."""
    name, front = (scenario.removesuffix("-vllm"), "vllm") if scenario.endswith("-vllm") else (scenario, "sglang")
    command = [str(ROOT / "sandboxes" / "twin" / "build.sh"), "--scenario", name, "--front", front]
    subprocess.run(command, check=True, capture_output=True)
    return f"{TWIN_TAG}:{scenario}"


def task_data(source: Path) -> dict:
    """A task file's data with its host commands (local_setup, image_build, services) made absolute, to be
    written anywhere."""
    data = yaml.safe_load(source.read_text())
    sandbox = data["sandbox"]
    commands = [sandbox.get("local_setup") or [], sandbox.get("image_build") or []]
    for command in commands + [service["command"] for service in sandbox.get("services", [])]:
        if command and "/" in command[0]:
            command[0] = str((source.parent / command[0]).resolve())
    return data


def fast_task_data(source: Path = ROOT / "tasks" / "twin_glm52.yaml", time_scale: float = TIME_SCALE) -> dict:
    data = task_data(source)
    env = data["sandbox"].setdefault("env", {})
    scale = time_scale / float(env.get("TWIN_TIME_SCALE", 1))
    env["TWIN_TIME_SCALE"] = str(time_scale)
    data["serve"]["startup_timeout_s"] *= scale
    _scale_progress(data, scale)
    checks = data["checks"]
    checks["quality"][0]["samples"] = 100
    checks["quality"][1]["samples"] = 50
    throughput = checks["throughput"]
    throughput["workload"].update(duration_s=throughput["workload"]["duration_s"] * scale, warmup_s=1)
    throughput["rps"] = [rate / scale for rate in throughput["rps"]]
    throughput["slo"]["ttft_s"] *= scale
    throughput["target_tok_s_per_node"] /= scale
    checks["single_stream"]["target_output_tok_s"] /= scale
    checks["single_stream"]["num_requests"] = 2
    return data


def bringup_task_data(source: Path) -> dict:
    """A twin task as a bring-up job: its quality checks only, on 50 / 30 questions, at the quick clock."""
    data = task_data(source)
    data["checks"] = {"quality": data["checks"]["quality"]}
    for check, samples in zip(data["checks"]["quality"], (50, 30), strict=True):
        check["samples"] = samples
    env = data["sandbox"].setdefault("env", {})
    _scale_progress(data, QUICK_SCALE / float(env.get("TWIN_TIME_SCALE", 1)))
    env["TWIN_TIME_SCALE"] = str(QUICK_SCALE)
    return data


def _scale_progress(data: dict, scale: float) -> None:
    """The progress log's longest silence stays the same stretch of the twin's clock."""
    outputs = data.setdefault("outputs", {})
    outputs["progress_every_s"] = outputs.get("progress_every_s", 30.0) * scale


def write_task(tmp_path: Path, data: dict, **changes) -> Path:
    """Write `data` (with dotted-path `changes`) as tmp_path/task.yaml, runs under tmp_path/runs."""
    data = json.loads(json.dumps(data))
    data["outputs"] = {**data.get("outputs", {}), "runs_dir": str(tmp_path / "runs")}
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = data
        for part in parents:
            node = node[part]
        node[last] = value
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def fast_twin_task(tmp_path: Path, time_scale: float = QUICK_SCALE, **changes) -> Path:
    """The fast twin task at the quick clock (a test that compares speeds passes TIME_SCALE)."""
    return write_task(tmp_path, fast_task_data(time_scale=time_scale), **changes)


def run_with(task_path: Path, model=None, fresh: bool = True):
    """Run the loop on a task (the task's own agent unless `model` is given); the container is removed after.

    Runs are --fresh unless asked otherwise: a test measures what it runs, not a figure cached by another test.
    """
    task = load_task(task_path)
    ctx = runs.open_run(task, str(task_path), fresh=fresh)
    try:
        agent.run_loop(ctx, model or make_model(task.agent, ctx.run_dir, task), redact)
    finally:
        runs.finish_outputs(ctx)
        ctx.sandbox.stop(remove=True)
    return ctx


def run_scripted(task_path: Path, script: list[dict]):
    return run_with(task_path, ScriptedModel(script))


def call(tool: str, **arguments) -> dict:
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


def fix(name: str) -> dict:
    """A known fix (sandboxes/twin/fixes) as the agent would send it: to the checkpoint overlay (repo `model`)
    or the engine."""
    patch = (FIXES / name).read_text()
    return call("apply_patch", repo="model" if "a/config.json" in patch else "twin", patch=patch)


def resume_scripted(porter: list[str], run_dir: Path, script: Path) -> dict:
    """`porter run ... --resume RUN_DIR` with a scripted agent, in a subprocess; the state it left, which must say
    the resumed run ended its script."""
    command = [*porter, "--resume", str(run_dir), "--provider", f"scripted:{script}"]
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    state = read_state(run_dir)
    assert state["finished"] == "resumed and done", resumed.stderr[-2000:]
    return state


def tool_results(run_dir: Path) -> list[dict]:
    return [r for r in read_transcript(run_dir / "transcript.jsonl") if r["kind"] == "tool_result"]


def facts(record: dict) -> dict:
    return record["facts"]
