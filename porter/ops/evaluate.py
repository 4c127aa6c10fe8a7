"""`porter eval CORPUS`: every task of a corpus for each agent, in parallel sandboxes, and a leaderboard.

A corpus is a folder of task files (`*.yaml`), of recorded runs to replay (folders with transcript.jsonl
and task.yaml), or both; an optional `corpus.yaml` in it lists Docker engines to spread the runs over
(`engines: [unix:///var/run/docker.sock, ssh://node7]`). Writes `leaderboard.md` and `leaderboard.json`
(solved, steps, relaunches, tokens, dollars, wall time per run and in total) under `evals/<utc time>/`.
Covers scheduling and tallying; each run is an ordinary `porter run` (runs.py) or replay (replay.py).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from itertools import cycle
from pathlib import Path

import yaml

from porter.errors import RunDirError
from porter.ledger.transcript import read_transcript
from porter.loop import agent
from porter.ops import runs
from porter.ops.replay_run import replay
from porter.redaction import redact
from porter.task import TaskError, load_task


@dataclass
class Entry:
    name: str
    agent: str
    solved: bool
    steps: int
    relaunches: int
    tokens: int
    cost_usd: float | None
    wall_s: float
    run_dir: str
    note: str = ""


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


def run_one(task_path: Path, provider: str, engine: str | None, runs_dir: Path) -> Entry:
    started = time.monotonic()
    task = load_task(task_path)
    task.agent.provider = provider
    task.outputs.runs_dir = str(runs_dir)
    if engine:
        task.sandbox.docker_host = engine
    ctx = None
    try:
        ctx = runs.open_run(task, str(task_path))
        agent.run_loop(ctx, runs.agent_model(task, ctx.run_dir), redact)
        note = ctx.state.finished or ""
    except Exception as exc:  # noqa: BLE001 - the batch runner reports a failed run and goes on
        note = f"error: {type(exc).__name__}: {exc}"
    finally:
        if ctx is not None:
            runs.finish_outputs(ctx)
            ctx.sandbox.stop(remove=True)
    return _entry(task.name, provider, ctx, time.monotonic() - started, note)


def _entry(name: str, provider: str, ctx, wall_s: float, note: str) -> Entry:
    if ctx is None:
        return Entry(name, provider, False, 0, 0, 0, None, round(wall_s, 1), "", note)
    state = ctx.state
    return Entry(
        name,
        provider,
        state.solved,
        state.step,
        state.relaunches,
        state.tokens["input"] + state.tokens["output"],
        state.cost_usd if state.cost_known else None,
        round(wall_s, 1),
        str(ctx.run_dir),
        note,
    )


def replay_one(recording: Path, runs_dir: Path) -> Entry:
    started = time.monotonic()
    try:
        report = replay(recording, runs_dir=str(runs_dir))
    except Exception as exc:  # noqa: BLE001 - as in run_one: a replay that cannot start is a failed row
        return Entry(
            recording.name,
            "replay",
            False,
            0,
            0,
            0,
            None,
            round(time.monotonic() - started, 1),
            "",
            f"error: {type(exc).__name__}: {exc}",
        )
    note = "reproduced" if report.reproduced else "; ".join(report.divergences[:2])
    return Entry(
        recording.name,
        "replay",
        report.reproduced,
        report.compared,
        0,
        0,
        0.0,
        round(time.monotonic() - started, 1),
        str(report.replay_dir),
        note,
    )


def evaluate(corpus: str | Path, providers: list[str], workers: int = 1, out_root: str = "evals") -> Path:
    corpus = Path(corpus)
    tasks, recordings, engines = discover(corpus)
    out_dir = new_out_dir(out_root)
    runs_dir = out_dir / "runs"
    engine_for = cycle(engines or [None])
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(run_one, task, provider, next(engine_for), runs_dir) for task in tasks for provider in providers
        ]
        futures += [pool.submit(replay_one, recording, runs_dir) for recording in recordings]
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
        by_agent.setdefault(entry.agent, []).append(entry)
    totals = {agent_name: _totals(rows) for agent_name, rows in by_agent.items()}
    (out_dir / "leaderboard.json").write_text(
        json.dumps({"entries": [asdict(e) for e in entries], "totals": totals}, indent=1)
    )
    lines = [
        "# porter eval leaderboard",
        "",
        "| agent | solved | steps | relaunches | tokens | $ | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for agent_name, total in sorted(totals.items(), key=lambda item: -item[1]["solved"]):
        lines.append(
            f"| {agent_name} | {total['solved']}/{total['runs']} | {total['steps']} | {total['relaunches']} "
            f"| {total['tokens']} | {_money(total['cost_usd'])} | {total['wall_s']:.0f} |"
        )
    lines += [
        "",
        "| task | agent | solved | steps | relaunches | tokens | $ | wall s | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        lines.append(
            f"| {e.name} | {e.agent} | {'yes' if e.solved else 'no'} | {e.steps} | {e.relaunches} | "
            f"{e.tokens} | {_money(e.cost_usd)} | {e.wall_s:.0f} | {e.note.replace('|', '/')[:120]} |"
        )
    (out_dir / "leaderboard.md").write_text("\n".join(lines) + "\n")


def _totals(rows: list[Entry]) -> dict:
    costs = [row.cost_usd for row in rows]
    return {
        "runs": len(rows),
        "solved": sum(row.solved for row in rows),
        "steps": sum(row.steps for row in rows),
        "relaunches": sum(row.relaunches for row in rows),
        "tokens": sum(row.tokens for row in rows),
        "cost_usd": None if None in costs else round(sum(costs), 4),
        "wall_s": round(sum(r.wall_s for r in rows), 1),
    }


def _money(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def check_corpus(corpus: str | Path) -> list[str]:
    """Problems with the corpus's task files, found before any sandbox starts."""
    problems = []
    tasks, recordings, _ = discover(Path(corpus))
    for task_path in tasks + [recording / "task.yaml" for recording in recordings]:
        try:
            load_task(task_path)
        except TaskError as exc:
            problems.append(str(exc))
    for recording in recordings:
        try:
            read_transcript(recording / "transcript.jsonl")
        except RunDirError as exc:
            problems.append(str(exc))
    return problems
