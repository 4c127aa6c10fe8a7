"""`porter replay`: re-drive a recorded run without the LLM and say whether it reproduced.

Covers re-running a recording's model replies (ReplayModel) in a fresh sandbox and a new run directory (under
`runs/` of the working directory, never the recorded task's runs_dir), on a task whose host side (the commands,
mounts and devices of its sandbox) is never the recording's but the user's local one (recorded_task), then
comparing every observation with the recording: tool outcomes (ok, exit codes, healthy or the crash
class, kept or reverted, targets met) must match exactly; measured figures must move in the same
direction and stay within a tolerance, since timing differs between machines. Also reports what
changed in the environment (image, repo bases, porter version). Does not record anything new beyond
the replay's own run directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from porter.errors import RunDirError
from porter.evaluate import runs
from porter.loop import agent
from porter.models import ModelError, ReplayDivergence, ReplayModel
from porter.redaction import redact
from porter.report.run_records import Recording, read_recording
from porter.task import SandboxSpec, Task, load_task

if TYPE_CHECKING:
    from porter.loop.run_context import RunContext

METRIC_TOLERANCE = 0.5  # relative; a figure twice as far off as this is not the same run
BEHAVIOUR_KEYS = ("ok", "exit_code", "timed_out", "healthy", "crash_class", "kept")
DEFAULT_RUNS_DIR = "runs"  # where `porter run` puts its runs: a replay is a run of the replay agent
# A task's host side: commands run on the host, paths and devices mapped from it, engines and networks it reaches
# (a local sandbox runs the recorded tool calls on the host itself).
HOST_SIDE = ("kind", "dockerfile", "context", "build_args", "devices", "group_add", "ipc", "security_opt", "cap_add")
HOST_SIDE += ("mounts", "network", "reach_host", "docker_host", "local_setup", "image_build", "services")


@dataclass
class ReplayReport:
    recording: Path
    replay_dir: Path | None = None
    divergences: list[str] = field(default_factory=list)
    environment_changes: list[str] = field(default_factory=list)
    compared: int = 0
    run: RunContext | None = None  # the replayed run, ended: its state, repos and run directory

    @property
    def reproduced(self) -> bool:
        return not self.divergences

    def render(self) -> str:
        lines = [
            f"replay of {self.recording}: {'reproduced' if self.reproduced else 'DIVERGED'} "
            f"({self.compared} observations compared; replay run in {self.replay_dir})"
        ]
        lines += [f"  environment: {change}" for change in self.environment_changes]
        lines += [f"  divergence: {divergence}" for divergence in self.divergences]
        return "\n".join(lines)


def locate(path: str | Path) -> tuple[Path, Path]:
    """(transcript, folder holding task.yaml) for a run directory or a transcript file."""
    path = Path(path)
    transcript = path / "transcript.jsonl" if path.is_dir() else path
    folder = transcript.parent
    if not transcript.is_file():
        raise FileNotFoundError(f"{path}: no transcript.jsonl here; give a run directory or a transcript file")
    if not (folder / "task.yaml").is_file():
        raise FileNotFoundError(f"{folder}: no task.yaml beside the transcript; a recording needs both")
    return transcript, folder


def recorded_task(folder: Path, local_task: str | Path | None = None) -> Task:
    """The task a replay runs: the local task the user names, else the recording's own when nothing in it reaches
    the host. A recording is data from whoever wrote it: its host commands (image build, services, local layout),
    mounts, devices, engines and unisolated sandbox are never used; refused with one line instead."""
    if local_task:
        return load_task(local_task)
    task = load_task(folder / "task.yaml")
    reaching = [
        f"sandbox.{name}"
        for name in HOST_SIDE
        if getattr(task.sandbox, name) != SandboxSpec.model_fields[name].get_default(call_default_factory=True)
    ] + ([] if task.model.in_image else ["model.path (mounted from the host)"])
    reaching += [
        f"checks.quality ({path}: a file porter reads)"
        for check in task.checks.quality
        for path in (check.dataset, check.few_shot_dataset)
        if path and not path.startswith("builtin:")
    ]
    if reaching:
        raise RunDirError(
            f"{folder / 'task.yaml'}: the recording's task reaches the host ({', '.join(reaching)}); porter runs no "
            "recording's host side: name the local task it was recorded from (replay's --task TASK), or, for "
            "recordings of your own, eval's --trust-recorded-tasks"
        )
    return task


def replay(
    path: str | Path, runs_dir: str = DEFAULT_RUNS_DIR, sandbox_kind: str | None = None, local_task: str | None = None
) -> ReplayReport:
    """Replay the recording at `path` in a new run directory under `runs_dir` (relative to the working directory):
    never where the recorded task says its runs went (a recorder's temporary folder, long gone, or its own runs).
    The sandbox and everything else on the host come from `local_task` (recorded_task)."""
    transcript, folder = locate(path)
    try:
        model = ReplayModel(transcript)  # a broken recording is named before any sandbox starts
    except ModelError as exc:
        raise RunDirError(str(exc)) from None
    task = recorded_task(folder, local_task)
    task.agent.provider = f"replay:{transcript}"
    task.outputs.runs_dir = runs_dir
    if sandbox_kind:
        task.sandbox.kind = sandbox_kind
    report = ReplayReport(transcript)
    # fresh: a replay measures the engine again; a figure from the cache would hide the drift it looks for
    ctx = runs.open_run(task, str(local_task or folder / "task.yaml"), fresh=True)
    report.replay_dir, report.run = ctx.run_dir, ctx
    try:
        agent.run_loop(ctx, model, redact)
    except ReplayDivergence as divergence:
        report.divergences.append(str(divergence))
    finally:
        try:
            runs.finish_outputs(ctx)
        finally:
            ctx.sandbox.stop(remove=True)  # a replay's sandbox is throwaway; its run directory keeps everything
    recorded, replayed = read_recording(transcript), read_recording(ctx.run_dir / "transcript.jsonl")
    report.environment_changes = environment_changes(recorded, replayed)
    compare(report, recorded, replayed)
    return report


def environment_changes(recorded: Recording, replayed: Recording) -> list[str]:
    before = _mapping(recorded.start.environment if recorded.start else None)
    after = _mapping(replayed.start.environment if replayed.start else None)
    keys = ("porter_version", "sandbox", "repos", "flags")
    return [f"{key}: {before.get(key)} -> {after.get(key)}" for key in keys if before.get(key) != after.get(key)]


def compare(report: ReplayReport, recorded: Recording, replayed: Recording) -> None:
    old, new = [o.facts for o in recorded.outcomes], [o.facts for o in replayed.outcomes]
    for index, (before, after) in enumerate(zip(old, new, strict=False), start=1):
        report.compared += 1
        where = f"observation {index} ({before.get('tool')})"
        for key in BEHAVIOUR_KEYS:
            if before.get(key) != after.get(key):
                report.divergences.append(f"{where}: {key} was {before.get(key)!r}, now {after.get(key)!r}")
        report.divergences += _metric_drift(where, before, after)
    if len(old) != len(new) and not any("diverged" in d for d in report.divergences):
        report.divergences.append(f"the recording has {len(old)} tool results, the replay {len(new)}")


def _metric_drift(where: str, before: dict, after: dict) -> list[str]:
    drifts = []
    for key, old_result in _mapping(before.get("results")).items():
        old_result, new_result = _mapping(old_result), _mapping(_mapping(after.get("results")).get(key))
        for verdict in ("meets_target", "passed"):
            if verdict in old_result and old_result.get(verdict) != new_result.get(verdict):
                drifts.append(f"{where}: {key} {verdict} was {old_result.get(verdict)}, now {new_result.get(verdict)}")
        for metric in ("output_throughput_per_node", "total_throughput_per_node", "output_tok_s", "score"):
            old_value, new_value = old_result.get(metric), new_result.get(metric)
            if isinstance(old_value, int | float) and isinstance(new_value, int | float) and old_value:
                change = abs(new_value / old_value - 1)
                if change > METRIC_TOLERANCE:
                    drifts.append(f"{where}: {key} {metric} {old_value:.4g} -> {new_value:.4g} ({change:.0%} off)")
    return drifts


def _mapping(value: object) -> dict:
    return value if isinstance(value, dict) else {}  # a recording's field of another type holds nothing to compare
