"""`report.md`, `report.json` and the plots for a run directory, written from what the run recorded.

Covers the task and targets (each target's median on the accepted configuration with its samples; a
figure from another configuration is marked stale; figures reused from the measurement cache are
counted), the timeline of attempts (kept or reverted, with the crash class or the metrics, tokens and
dollars), the final serve command, the plots (throughput and TTFT against offered RPS per kept
configuration with the SLO line and the knee, and the objective over the steps), and report.json:
outcome, accepted configuration, targets with metric, value, samples and the configuration they were
measured on, relaunches, server hours, tokens, cost. Reads state.json and metrics.jsonl only; never
reruns anything. Figures from the twin engine are twin figures: the report says which engine produced them.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first

from porter.checks import registry  # noqa: E402
from porter.engines.serve import render_command  # noqa: E402
from porter.errors import RunDirError
from porter.ledger.state import RunState, target_report  # noqa: E402
from porter.ledger.transcript import iter_records  # noqa: E402
from porter.task import Task, load_task  # noqa: E402


def read_metrics(run_dir: Path) -> list[dict]:
    """metrics.jsonl (torn last line skipped); a record without its step, check or result is a RunDirError."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    records = list(iter_records(path))
    for number, record in enumerate(records, start=1):
        shape = (record.get("step"), record.get("check"), record.get("result"))
        if not (isinstance(shape[0], int) and isinstance(shape[1], str) and isinstance(shape[2], dict)):
            raise RunDirError(f"{path}: record {number} lacks its step, check or result; not a porter measurement")
    return records


def kept_measurements(state: RunState, metrics: list[dict]) -> list[dict]:
    """Measurements of configurations that were kept: the baseline and every accepted change."""
    kept = {attempt.fingerprint for attempt in state.kept_attempts()}
    return [m for m in metrics if not m.get("pending") or m["result"].get("fingerprint") in kept]


def write_report(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    state = RunState.read(run_dir)  # first: an empty or foreign directory is named as such
    task = load_task(run_dir / "task.yaml")
    metrics = read_metrics(run_dir)
    plots = write_plots(run_dir, task, state, metrics)
    text = render(task, state, metrics, plots, run_dir)
    path = run_dir / "report.md"
    path.write_text(text, encoding="utf-8")
    (run_dir / "report.json").write_text(json.dumps(report_document(task, state), indent=1, default=str) + "\n")
    return path


def report_document(task: Task, state: RunState) -> dict:
    """What a program needs from a run: every target on the configuration it was measured on."""
    targets = [
        {
            "name": row["target"],
            "metric": row["metric"],
            "value": row["value"],
            "goal": row["goal"],
            "met": row["met"],
            "measured_on": row["measured_on"],
            "stale": row["stale"],
            "samples": row["samples"],
            "cached_samples": row["cached"],
        }
        for row in target_report(task, state)
    ]
    accepted = state.accepted_config
    return {
        "run_id": state.run_id,
        "outcome": "solved" if state.solved else "not solved",
        "finished": state.finished,
        "accepted_config": {
            "fingerprint": accepted,
            **(config.to_dict() if (config := state.configs.get(accepted)) else {}),
        },
        "targets": targets,
        "all_measured_on_accepted": all(t["measured_on"] == accepted for t in targets),
        "relaunches": state.relaunches,
        "server_hours": round(state.server_s / 3600, 4),
        "tokens": state.tokens,
        "cost_usd": round(state.cost_usd, 4) if state.cost_known else None,
        "steps": state.step,
    }


def render(task: Task, state: RunState, metrics: list[dict], plots: list[Path], run_dir: Path) -> str:
    cost = f"${state.cost_usd:.2f}" if state.cost_known else "unknown (no price for this model)"
    engine = "the twin engine (twin figures, not hardware results)" if "twin" in task.name else task.hardware.gpu
    lines = [
        f"# porter run {state.run_id}",
        "",
        f"Task `{task.name}`: {task.description.strip()}",
        "",
        f"- Model: {task.model.id} on {task.hardware.count}x {task.hardware.gpu} x {task.hardware.nodes} node(s)",
        f"- Figures measured on: {engine}",
        f"- Outcome: {'solved' if state.solved else 'not solved'} ({state.finished})",
        f"- Steps {state.step}, relaunches {state.relaunches}, tokens in/out "
        f"{state.tokens['input']}/{state.tokens['output']}, cost {cost}, wall {state.wall_s / 60:.1f} min",
        "",
        "## Targets",
        "",
        "| target | metric | final (median) | samples | goal | met | measured on |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in target_report(task, state):
        lines.append(_target_line(row, state.accepted_config))
    if any(row["cached"] for row in target_report(task, state)):
        lines += [
            "",
            "Figures marked *cached* were measured by an earlier run on the identical configuration "
            "(same image, trees, flags and check) and reused from the measurement cache (`--fresh` bypasses it).",
        ]
    lines += [
        "",
        "## Timeline",
        "",
        "| step | attempt | crash / metrics | outcome | tokens | $ |",
        "|---|---|---|---|---|---|",
    ]
    for attempt in state.attempts:
        measured = attempt.crash_class or ", ".join(f"{k} {_fmt(v)}" for k, v in attempt.metrics.items())
        summary = attempt.summary.replace("|", "/")
        cost_cell = f"{attempt.cost_usd:.2f}" if state.cost_known else "?"
        lines.append(
            f"| {attempt.step} | {summary} | {measured or '-'} | {attempt.outcome} | {attempt.tokens} | {cost_cell} |"
        )
    lines += ["", "## Final serve command", "", "```", render_command(task, state.accepted_flags), "```", ""]
    commits = {name: len(repo.accepted) for name, repo in state.repos.items()}
    lines += ["## Patches", "", *(f"- {name}: {count} commit(s), `patches/{name}/`" for name, count in commits.items())]
    for attempt in state.attempts:
        for name, path in attempt.reverted_diffs.items():
            step = attempt.step
            lines.append(f"- {name}: the edit reverted at step {step} (not a commit; `git apply` it), `{path}`")
    if plots:
        lines += ["", "## Plots", "", *(f"![{p.stem}]({p.relative_to(run_dir)})" for p in plots)]
    lines.append(f"\n{len(metrics)} measurements in `metrics.jsonl`; every server log is in `logs/`.\n")
    return "\n".join(lines)


def _target_line(row: dict, accepted: str | None) -> str:
    samples = ", ".join(_fmt(v) for v in row["samples"]) or "-"
    if row["cached"]:
        samples += f" ({row['cached']} cached)"
    where = row["measured_on"] or "-"
    if row["stale"]:
        where += " (stale: not the accepted configuration)"
    elif row["measured_on"] == accepted and accepted:
        where += " (accepted)"
    met = "yes" if row["met"] else "no"
    return f"| {row['target']} | {row['metric']} | {_fmt(row['value'])} | {samples} | {row['goal']} | {met} | {where} |"


def _fmt(value) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def write_plots(run_dir: Path, task: Task, state: RunState, metrics: list[dict]) -> list[Path]:
    plots_dir = run_dir / "plots"
    plots_dir.mkdir(exist_ok=True)
    written = []
    sweeps = [m for m in kept_measurements(state, metrics) if m["check"] == "throughput"]
    if sweeps and task.checks.throughput:
        written.append(_sweep_plot(plots_dir, task, sweeps))
    if any(m["check"] in ("throughput", "single_stream") for m in metrics):
        written.append(_objective_plot(plots_dir, task, metrics))
    return written


def _sweep_plot(plots_dir: Path, task: Task, sweeps: list[dict]) -> Path:
    slo = task.checks.throughput.slo
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for measurement in sweeps:
        result = measurement["result"]
        levels = result.get("levels") or []
        label = f"step {measurement['step']}: {_flags_label(task, measurement['flags'])}"
        rps = [level["rps"] for level in levels]
        left.plot(rps, [level.get(task.checks.throughput.metric) for level in levels], marker="o", label=label)
        ttft_key = f"p{slo.percentile:g}_ttft_ms"
        right.plot(rps, [(level.get(ttft_key) or 0) / 1000 for level in levels], marker="o", label=label)
        if result.get("knee_rps"):
            right.axvline(result["knee_rps"], linestyle=":", alpha=0.5)
    right.axhline(slo.ttft_s, color="red", linestyle="--", label=f"SLO p{slo.percentile:g} TTFT {slo.ttft_s:g} s")
    metric = task.checks.throughput.metric.replace("_", " ")
    left.set(xlabel="offered RPS", ylabel=f"{metric} (tok/s)", title="throughput vs offered load")
    right.set(xlabel="offered RPS", ylabel=f"p{slo.percentile:g} TTFT (s)", title="TTFT vs offered load (knee dotted)")
    for axis in (left, right):
        axis.grid(alpha=0.3)
    # One legend under both plots: flag sets are long, and inside an axis they would hide the curves.
    handles, labels = right.get_legend_handles_labels()
    figure.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=8, frameon=False)
    return _save(figure, plots_dir / "throughput_ttft_vs_rps.png")


def _objective_plot(plots_dir: Path, task: Task, metrics: list[dict]) -> Path:
    """Each headline figure over the steps, one panel each (their scales differ by orders of magnitude)."""
    series = []
    perf = [item for item in registry.declared(task) if item.kind.performance]
    for check, field in ((item.key, item.kind.headline(item.spec)) for item in perf):
        points = [(m["step"], m["result"].get(field)) for m in metrics if m["check"] == check]
        points = [(step, value) for step, value in points if value is not None]
        if points:
            series.append((check, field, points))
    figure, axes = plt.subplots(1, len(series), figsize=(6 * len(series), 4), squeeze=False)
    for axis, (check, field, points) in zip(axes[0], series, strict=True):
        axis.plot(*zip(*points, strict=True), marker="o")
        axis.set(xlabel="step", ylabel=field, title=f"{check} over the run")
        axis.grid(alpha=0.3)
    return _save(figure, plots_dir / "objective.png")


def _save(figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return path


def _flags_label(task: Task, flags: dict) -> str:
    """The flags that differ from the task's baseline, shortened for a legend (EAGLE 5/1/6 for a draft)."""
    changed = {k: v for k, v in flags.items() if task.serve.flags.get(k) != v}
    return task.engine.describe_flags({**changed, **_draft_of(task, flags, changed)}) or "baseline flags"


def _draft_of(task: Task, flags: dict, changed: dict) -> dict:
    """Every speculative flag when one changed: a draft reads whole, not as the one flag that moved."""
    speculative = task.engine.speculative_flags
    return {k: flags.get(k) for k in speculative} if any(k in speculative for k in changed) else {}
