"""Record the replay corpus: the playbook's run on the bring-up of every twin scenario.

For each scenario: build its image, cut its task to the bring-up (quality checks only, 50 / 30 questions, so
a run ends once the scenario's failure is handled and quality holds), run the playbook, and keep the run's
resolved task.yaml (its host paths made relative to the recording) and transcript.jsonl in
transcripts/<scenario>/. Run from the repository root:

    python3 transcripts/record.py [SCENARIO ...]

Records are deterministic in what they decide (crash classes, kept or reverted, targets met); timings differ
between machines and replay ignores them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from porter.evaluate import runs
from porter.loop import agent
from porter.models import make_model
from porter.redaction import redact
from porter.task import load_task

ROOT = Path(__file__).resolve().parents[1]
# each scenario's task: tasks/twin_<scenario>.yaml, the flagship's for glm52-day0, and for corvid3-day0 the task
# porter init writes for the vLLM front (the corpus's recording of a vLLM bring-up)
TASKS = ROOT / "tasks"
BRING_UP_SCALE = "0.1"  # the twin's clock of a bring-up (quality only) in every recording: start-ups in seconds
SCENARIOS = {
    path.stem.removeprefix("twin_").replace("_", "-"): path
    for path in sorted(TASKS.glob("twin_*.yaml"))
    if not path.stem.startswith(("twin_corvid3_", "twin_glm52"))
} | {"glm52-day0": TASKS / "twin_glm52.yaml", "corvid3-day0": TASKS / "twin_corvid3_vllm.yaml"}


def bring_up(task_file: Path, runs_dir: Path) -> Path:
    data = load_task(task_file).model_dump(mode="json")  # host paths resolved, so the copy runs from anywhere
    data["checks"] = {"quality": data["checks"]["quality"]}
    data["checks"]["quality"][0]["samples"] = 50
    data["checks"]["quality"][1]["samples"] = 30
    data["outputs"] = {"runs_dir": str(runs_dir)}
    if "TWIN_TIME_SCALE" in data["sandbox"]["env"]:
        data["sandbox"]["env"]["TWIN_TIME_SCALE"] = BRING_UP_SCALE
    path = runs_dir.parent / f"{task_file.stem}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def record(scenario: str, scratch: Path) -> Path:
    subprocess.run(load_task(SCENARIOS[scenario]).sandbox.image_build, check=True)  # the image, for its front
    task_path = bring_up(SCENARIOS[scenario], scratch / scenario / "runs")
    task = load_task(task_path)
    ctx = runs.open_run(task, str(task_path))
    try:
        agent.run_loop(ctx, make_model(task.agent, ctx.run_dir, task), redact)
    finally:
        runs.finish_outputs(ctx)
        ctx.sandbox.stop(remove=True)
    target = ROOT / "transcripts" / scenario
    target.mkdir(exist_ok=True)
    for name in ("task.yaml", "transcript.jsonl"):
        shutil.copy(ctx.run_dir / name, target / name)
    # host paths in the task (the device service, the local layout) relative to the recording, for any clone
    task_yaml = target / "task.yaml"
    text = task_yaml.read_text().replace(f"{ROOT}/", "../../")
    # the image as the task file names it (${PORTER_TWIN_TAG:-porter-twin2}:NAME), not as this shell resolved it
    written = yaml.safe_load(SCENARIOS[scenario].read_text())["sandbox"]["image"]
    task_yaml.write_text(text.replace(f"image: {task.sandbox.image}\n", f"image: {written}\n", 1))
    print(f"{scenario}: {ctx.state.finished} (solved: {ctx.state.solved}, steps {ctx.state.step})")
    return target


if __name__ == "__main__":
    chosen = sys.argv[1:] or sorted(SCENARIOS)
    unknown = sorted(set(chosen) - set(SCENARIOS))
    if unknown:
        sys.exit(f"unknown scenarios {unknown}; known: {sorted(SCENARIOS)}")
    with tempfile.TemporaryDirectory() as scratch:
        for name in chosen:
            record(name, Path(scratch))
