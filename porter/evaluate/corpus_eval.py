"""`porter eval CORPUS`: every task of a corpus for each agent, in parallel sandboxes, and a leaderboard.

A corpus is a folder of task files (`*.yaml`), of recorded runs (folders with transcript.jsonl and task.yaml),
or both; an optional `corpus.yaml` in it lists Docker engines to spread the runs over (`engines:
[unix:///var/run/docker.sock, ssh://node7]`). Each of `--models` runs every task file and every recording's
task live; the model `replay` re-drives each recording instead (porter replay) and says whether it reproduced.
Without --models a task file runs with the playbook and a recording is replayed. A replay is reported by the
model that recorded it (the run's agent.model, else its provider: `playbook`, `human:helper`,
`anthropic:claude-...` as the recorder named it), with that run's turns, launches and tokens, and says
"reproduced" apart from "solved": a recording that ended unsolved and replays identically is reproduced, not
solved. Writes `leaderboard.md` and `leaderboard.json` (outcome, steps, relaunches, tokens, dollars, wall time
per run and per agent) under `evals/<utc time>/`. Covers scheduling and tallying; each run is an ordinary
`porter run` (runs.py) or replay (replay_run.py).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from itertools import cycle
from pathlib import Path

import yaml

from porter.errors import RunDirError
from porter.evaluate import runs
from porter.evaluate.replay_run import recorded_task, replay
from porter.ledger.transcript import read_transcript
from porter.loop import agent
from porter.models import make_model
from porter.redaction import redact
from porter.report.run_reading import markdown_text
from porter.report.run_records import read_recording
from porter.task import Task, TaskError, load_task

REPLAY = "replay"  # the model that re-drives a recording


@dataclass
class Entry:
    """One run of an eval. For a replay, the figures are the recorded run's (its agent's turns, launches, tokens,
    cost and wall time); `reproduced` says whether it followed the recording and `solved` whether, doing so,
    it solved the task (a diverged replay solves nothing); `recorded_by` names the recording's model."""

    name: str
    agent: str
    solved: bool = False
    steps: int = 0
    relaunches: int = 0
    tokens: int = 0
    cost_usd: float | None = None
    wall_s: float = 0.0
    run_dir: str = ""  # "": the run did not start, or did not come back
    note: str = ""
    recorded_by: str = ""
    reproduced: bool | None = None  # None: a live run
    tokens_estimated: bool = False  # the provider reported none (a person or a program in the seat): porter's

    @property
    def board_agent(self) -> str:
        return f"{self.recorded_by or '?'} (replayed)" if self.reproduced is not None else self.agent

    @property
    def outcome(self) -> str:
        solved = "solved" if self.solved else "not solved"
        if self.reproduced is None:
            return solved
        return f"reproduced, {solved}" if self.reproduced else "diverged"


def discover(corpus: Path) -> tuple[list[Path], list[Path], list[str]]:
    tasks = sorted(p for p in corpus.glob("*.yaml") if p.name != "corpus.yaml")
    recordings = sorted(p for p in corpus.iterdir() if (p / "transcript.jsonl").is_file())
    config = corpus / "corpus.yaml"
    try:
        settings = yaml.safe_load(config.read_text()) if config.is_file() else {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise FileNotFoundError(f"{config}: not a readable corpus.yaml ({exc})") from None
    engines = settings.get("engines", []) if isinstance(settings, dict) else []
    if not tasks and not recordings:
        raise FileNotFoundError(f"{corpus}: no task files and no recorded runs (folders with transcript.jsonl)")
    return tasks, recordings, engines


def pairs(tasks: list[Path], recordings: list[Path], models: list[str] | None) -> list[tuple[Path, str]]:
    """(task file or recording, model) of every run: each task file and each recording with each model, where
    `replay` applies to recordings only; without models, the playbook on tasks and `replay` on recordings."""
    task_models = [model for model in models if model != REPLAY] if models else ["playbook"]
    recording_models = models or [REPLAY]
    return [(task, model) for task in tasks for model in task_models] + [
        (recording, model) for recording in recordings for model in recording_models
    ]


def source_task(source: Path, trusted: bool = False) -> Task:
    """A task file's task, or a recording's (recorded_task: its own task.yaml as a local task only when trusted)."""
    if not source.is_dir():
        return load_task(source)
    return recorded_task(source, source / "task.yaml" if trusted else None)


def run_one(source: Path, provider: str, engine: str | None, runs_dir: Path, trusted: bool = False) -> Entry:
    """A live run of a task file, or of a recording's task (source_task)."""
    started = time.monotonic()
    task = source_task(source, trusted)
    task.agent.provider = provider
    task.outputs.runs_dir = str(runs_dir)
    if engine:
        task.sandbox.docker_host = engine
    ctx = None
    try:
        ctx = runs.open_run(task, str(source / "task.yaml" if source.is_dir() else source))
        agent.run_loop(ctx, make_model(task.agent, ctx.run_dir, task), redact)
        note = ctx.state.finished or ""
    except Exception as exc:  # noqa: BLE001 - the batch runner reports a failed run and goes on
        note = f"error: {type(exc).__name__}: {exc}"
    finally:
        if ctx is not None:
            runs.finish_outputs(ctx)
            ctx.sandbox.stop(remove=True)
    entry = Entry(task.name, provider, wall_s=round(time.monotonic() - started, 1), note=note)
    if ctx is None:
        return entry
    state = ctx.state
    return replace(
        entry,
        solved=state.solved,
        steps=state.step,
        relaunches=state.relaunches,
        tokens=state.tokens.input + state.tokens.output,
        cost_usd=state.cost_usd if state.cost_known else None,
        run_dir=str(ctx.run_dir),
    )


def replay_one(recording: Path, runs_dir: Path, trusted: bool = False) -> Entry:
    started = time.monotonic()
    try:
        recorded = recorded_entry(recording.name, recording / "transcript.jsonl")
        report = replay(recording, runs_dir=str(runs_dir), local_task=recording / "task.yaml" if trusted else None)
    except Exception as exc:  # noqa: BLE001 - as in run_one: a replay that cannot start is a failed row
        wall_s = round(time.monotonic() - started, 1)
        return Entry(recording.name, REPLAY, wall_s=wall_s, note=f"error: {type(exc).__name__}: {exc}")
    replayed = recorded_entry(recording.name, report.replay_dir / "transcript.jsonl")
    note = f"replayed in {time.monotonic() - started:.0f} s"
    if not report.reproduced:
        note += "; " + "; ".join(report.divergences[:2])
    solved = replayed.solved and report.reproduced
    return replace(recorded, solved=solved, run_dir=str(report.replay_dir), note=note, reproduced=report.reproduced)


def recorded_entry(name: str, transcript: Path) -> Entry:
    """What a transcript says of the run that made it: its model, outcome, turns, launches (serve calls),
    tokens (the provider's count, else porter's estimate of the requests), cost and wall time."""
    recording = read_recording(transcript)
    start, end = recording.start, recording.end
    seat = (start.environment if start else {}).get("agent") or {}
    usage = [turn.usage for turn in recording.turns]
    reported = sum(item.input_tokens + item.output_tokens for item in usage)
    costs = [item.cost_usd for item in usage]
    return Entry(
        name,
        REPLAY,
        solved=bool(end and end.solved),
        steps=int(end and end.step or len(usage)),
        relaunches=recording.launches,
        tokens=reported or recording.tokens_estimate,
        cost_usd=None if None in costs else round(sum(costs), 4),
        wall_s=round(float(end.t) - float(start.t), 1) if end and start else 0.0,
        recorded_by=seat.get("model") or str(seat.get("provider") or "?").partition(":")[0],
        tokens_estimated=not reported and bool(recording.tokens_estimate),
    )


def evaluate(
    corpus: str | Path, models: list[str] | None, workers: int = 1, out_root: str = "evals", trusted: bool = False
) -> Path:
    """Every run of the corpus (pairs); `trusted`: the recordings' own tasks are local tasks (recorded_task)."""
    corpus = Path(corpus)
    tasks, recordings, engines = discover(corpus)
    planned = pairs(tasks, recordings, models)
    out_dir = new_out_dir(out_root)
    runs_dir = out_dir / "runs"
    engine_for = cycle(engines or [None])
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(replay_one, source, runs_dir, trusted)
            if model == REPLAY
            else pool.submit(run_one, source, model, next(engine_for), runs_dir, trusted)
            for source, model in planned
        ]
        entries = [future.result() for future in futures]
    write_leaderboard(out_dir, entries)
    return out_dir


def new_out_dir(out_root: str | Path) -> Path:
    """A fresh `<out_root>/<utc time>/` with its `runs/`; a second eval in the same second gets `-2`, `-3`, ..."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    for suffix in ["", *(f"-{n}" for n in range(2, 1000))]:
        out_dir = Path(out_root) / f"{stamp}{suffix}"
        try:
            (out_dir / "runs").mkdir(parents=True)
            return out_dir
        except FileExistsError:
            continue
    raise FileExistsError(f"{out_root}: 999 evals started in the same second")


def write_leaderboard(out_dir: Path, entries: list[Entry]) -> None:
    by_agent: dict[str, list[Entry]] = {}
    for entry in entries:
        by_agent.setdefault(entry.board_agent, []).append(entry)
    totals = {agent_name: Totals.of(rows) for agent_name, rows in by_agent.items()}
    board = {"entries": [{**asdict(e), "outcome": e.outcome} for e in entries], "totals": totals}
    (out_dir / "leaderboard.json").write_text(json.dumps(board, indent=1, default=asdict))
    lines = [
        "# porter eval leaderboard",
        "",
        "A replayed recording counts as solved only when the recorded run solved the task and the replay "
        "reproduced it; its steps, relaunches, tokens and cost are the recorded run's (~: porter's estimate of "
        "the requests, where the seat reported none).",
        "",
        "| agent | solved | reproduced | steps | relaunches | tokens | $ | wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for agent_name, total in sorted(totals.items(), key=lambda item: (-item[1].solved, item[0])):
        reproduced = f"{total.reproduced}/{total.runs}" if total.reproduced is not None else "-"
        lines.append(
            f"| {markdown_text(agent_name)} | {total.solved}/{total.runs} | {reproduced} | {total.steps} | "
            f"{total.relaunches} | {total.tokens} | {_money(total.cost_usd)} | {total.wall_s:.0f} |"
        )
    lines += [
        "",
        "| task | agent | outcome | steps | relaunches | tokens | $ | wall s | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        tokens = f"~{e.tokens}" if e.tokens_estimated else str(e.tokens)
        lines.append(
            f"| {markdown_text(e.name)} | {markdown_text(e.board_agent)} | {e.outcome} | {e.steps} | {e.relaunches} | "
            f"{tokens} | {_money(e.cost_usd)} | {e.wall_s:.0f} | {markdown_text(e.note[:120])} |"
        )
    (out_dir / "leaderboard.md").write_text("\n".join(lines) + "\n")


@dataclass
class Totals:
    """One agent's row of the leaderboard: its runs added up (`reproduced`: None when none was a replay)."""

    runs: int
    solved: int
    reproduced: int | None
    steps: int
    relaunches: int
    tokens: int
    cost_usd: float | None
    wall_s: float

    @classmethod
    def of(cls, rows: list[Entry]) -> Totals:
        costs = [row.cost_usd for row in rows]
        replays = [row for row in rows if row.reproduced is not None]
        return cls(
            runs=len(rows),
            solved=sum(row.solved for row in rows),
            reproduced=sum(bool(row.reproduced) for row in replays) if replays else None,
            steps=sum(row.steps for row in rows),
            relaunches=sum(row.relaunches for row in rows),
            tokens=sum(row.tokens for row in rows),
            cost_usd=None if None in costs else round(sum(costs), 4),
            wall_s=round(sum(r.wall_s for r in rows), 1),
        )


def _money(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def check_corpus(corpus: str | Path, trusted: bool = False) -> list[str]:
    """Problems with the corpus's task files and recordings (a host side not trusted), found before any sandbox
    starts."""
    problems = []
    tasks, recordings, _ = discover(Path(corpus))
    for source in tasks + recordings:
        try:
            source_task(source, trusted)
        except (TaskError, RunDirError) as exc:
            problems.append(str(exc))
    for recording in recordings:
        try:
            read_transcript(recording / "transcript.jsonl")
        except RunDirError as exc:
            problems.append(str(exc))
    return problems
