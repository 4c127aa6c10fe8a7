"""`report.md` and `report.json` for a run directory, written from what the run recorded.

Covers, in the order a person reads them: the baseline -> final table (every target on the configuration the
run started from and on the accepted one: value, change in %, goal, met), the timeline (each kept or reverted
change: what was tried in CLI form, why the agent tried it, the result, kept or not, the rule that decided,
and a reverted change's reason in its own column), the final serve command, the patches and PR drafts, the
plots (plots.py draws them) and the targets in detail (every sample, the configuration it was measured on,
stale and cached marks); report.json (outcome, the accepted configuration, each target with its baseline,
value, samples and configuration, relaunches, server hours, tokens, cost). Figures are rounded to what the
measurement supports (tok/s to 3 significant figures, scores with their 95% interval). Reads the run's
records (run_reading.py) and never reruns anything; figures from the twin engine are labelled twin figures.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from porter.checks import registry
from porter.checks.quality_kind import score_text
from porter.engines.serve import render_command
from porter.ledger.noise import Comparison
from porter.ledger.records import RULES, Attempt
from porter.ledger.state import TargetRow, median_of, target_report
from porter.report import plots, report_page, run_reading
from porter.report.run_reading import RunRecord, cli_change, env_prefix, percent, read_run, readable, significant
from porter.schema import render_flags

REASON_WIDTH = 220  # characters of a reverted change's reason in the timeline (report.json keeps it whole)
# a target's fields in report.json, between its name and its cached samples
DOCUMENT_FIELDS = ("metric", "baseline", "value", "change", "goal", "met", "measured_on", "stale", "samples")


def write_report(run_dir: str | Path, live: bool = False) -> Path:
    """report.md, report.json and report.html (and the plots). `live` (after a step of a running run): the plots
    are redrawn only when a measurement came in since they were drawn."""
    record = read_run(run_dir)
    figures = _current_plots(record) if live else None
    if figures is None:
        figures = plots.write_plots(record)
    path = record.run_dir / "report.md"
    text = render(record, figures)
    path.write_text(text, encoding="utf-8")
    (record.run_dir / "report.json").write_text(json.dumps(report_document(record), indent=1, default=str) + "\n")
    report_page.write_html(record, text)
    return path


def _current_plots(record: RunRecord) -> list[Path] | None:
    """The plots as drawn, when no measurement is newer than them (None: draw them again)."""
    drawn = plots.drawn(record.run_dir)
    metrics = record.run_dir / "metrics.jsonl"
    if not metrics.exists():
        return drawn
    newest = metrics.stat().st_mtime
    return drawn if drawn and all(p.stat().st_mtime >= newest for p in drawn) else None


@dataclass
class BaselineRow(TargetRow):
    """A target on the accepted configuration (TargetRow) and on the baseline, with the change and both as text."""

    performance: bool = False
    baseline: float | None = None
    change: float | None = None
    baseline_text: str = "-"
    value_text: str = "-"


def baseline_rows(record: RunRecord) -> list[BaselineRow]:
    """One row per target: its figure on the baseline and on the accepted configuration, the change, goal, met."""
    rows = []
    for row in target_report(record.task, record.state):
        performance = registry.by_key(record.task, row.key).kind.performance
        before = record.state.samples_on(record.baseline, row.key)
        baseline = median_of(before)
        change = row.value / baseline - 1 if row.value is not None and baseline else None
        latest = record.state.checks_on(row.measured_on).get(row.key, {})
        first = before[-1].result if before else {}
        rows.append(
            BaselineRow(
                **vars(row),
                performance=performance,
                baseline=baseline,
                change=change,
                baseline_text=_figure(performance, baseline, first),
                value_text=_figure(performance, row.value, latest),
            )
        )
    return rows


def _figure(performance: bool, value: float | None, result: dict) -> str:
    if value is None:
        return "-"
    return significant(value) if performance else score_text(result)


def render(record: RunRecord, figures: list[Path]) -> str:
    state = record.state
    lines = [*_head(record), *_baseline_table(record)]
    rules = "; ".join(
        f"`{rule}`: {RULES[rule]}" for rule in dict.fromkeys(a.rule for a in state.attempts) if rule in RULES
    )
    lines += [
        "## Timeline",
        "",
        *run_reading.markdown_table(
            "step | tried | why | result | outcome | rule | why reverted",
            [_timeline_row(record, attempt) for attempt in state.attempts],
        ),
        "",
        f"Rules: {rules}." if rules else "No change has been decided yet.",
        "",
        "## Final serve command",
        "",
        "```",
        f"{env_prefix(state.accepted_flags)} {render_command(record.task, state.accepted_flags)}".strip(),
        "```",
        "",
        *_outputs(record),
    ]
    if figures:
        lines += ["## Plots", "", *(f"![{p.stem}]({p.relative_to(record.run_dir)})" for p in figures), ""]
    return "\n".join([*lines, *_details(record)])


def _head(record: RunRecord) -> list[str]:
    task, state = record.task, record.state
    twin = "twin" in task.name or "twin" in str(record.environment.image)
    where = "the twin engine (twin figures, not hardware results)" if twin else f"{task.hardware.gpu}"
    cost = f"${state.cost_usd:.2f}" if state.cost_known else "unknown (no price for this model)"
    kept, reduced = len(state.kept_attempts()), state.reduced_launches
    launches = f"{state.full_launches} launches" + (f" and {reduced} reduced ones" if reduced else "")
    wall = f"wall {state.wall_s / 60:.1f} min, " if state.finished else ""
    return [
        f"# porter run {state.run_id}",
        "",
        f"{task.model.id} on {task.hardware.count}x {task.hardware.gpu} ({task.hardware.nodes} node), "
        f"served by {task.engine.name}; figures measured on {where}.",
        f"**{'Solved' if state.solved else 'Not solved'}** ({readable(record.task, state.finished or 'running')}): "
        f"{state.step} steps, "
        f"{kept} changes kept, {len(state.attempts) - kept} reverted, {launches}, {wall}cost {cost}.",
        "",
    ]


def _baseline_table(record: RunRecord) -> list[str]:
    rows = []
    for row in baseline_rows(record):
        goal = f">= {row.goal:g}" if isinstance(row.goal, int | float) else str(row.goal)
        final = row.value_text + (" (stale)" if row.stale else "")
        rows.append([row.target, row.baseline_text, final, percent(row.change), goal, "yes" if row.met else "no"])
    lines = [
        "## Baseline -> final",
        "",
        *run_reading.markdown_table("target | baseline | final | change | goal | met", rows),
    ]
    baseline = " ".join(render_flags(record.flags_of(record.baseline)))
    final = record.label(record.state.accepted_config) if record.state.accepted_config else "-"
    return [
        *lines,
        "",
        f"Medians of each configuration's samples. Baseline: the configuration the run started from (`{baseline}`, "
        f"the image's trees); final: the accepted configuration (`{final}`).",
        "",
    ]


def _timeline_row(record: RunRecord, attempt: Attempt) -> list[str]:
    tried = tried_text(record, attempt)
    why = record.explanation(attempt)
    why = why if len(why) <= REASON_WIDTH else why[:REASON_WIDTH] + "..."
    result = result_text(record, attempt)
    reason = "" if attempt.kept else reverted_reason(record, attempt)
    return [str(attempt.step), tried, why, result, attempt.outcome, f"`{attempt.rule or '-'}`", reason]


def reverted_reason(record: RunRecord, attempt: Attempt) -> str:
    """Why a change was reverted, short: the verdict (its figures are in the result column), and the crash fix
    that was kept from it."""
    reason = attempt.evidence.split(":", 1)[0] if attempt.comparisons else attempt.evidence
    if attempt.rule == "asked":  # the agent reverts after a refused accept: the refusal is the reason
        earlier = [a.step for a in record.state.attempts if a.step < attempt.step]
        since = max(earlier, default=0)
        refused = [o for o in record.outcomes if o.tool == "accept" and since < o.step <= attempt.step]
        refused = [o.said.removeprefix("accept failed: ") for o in refused if o.ok is False and o.said]
        # the refusal, not the advice after it
        reason += f" after accept refused: {refused[-1].split(': ')[0]}" if refused else ""
    reason = reason if len(reason) <= REASON_WIDTH else reason[:REASON_WIDTH] + "..."
    fix = any(a.rule == "crash_fix" and a.step == attempt.step for a in record.state.attempts)
    return reason + ("; the crash fix it needed stays kept (its own commit)" if fix else "")


def tried_text(record: RunRecord, attempt: Attempt) -> str:
    """The change in CLI form and the files it edited: `--tp 4 --dp 2`, `twin: configs/tuned_fmoe.csv`."""
    dropped = {k: True for k, v in attempt.flags.items() if v is None or v is False}  # what the change turned off
    flags = cli_change(record.task, dropped, attempt.flags)
    files = [f"{repo}: {readable(record.task, ', '.join(names))}" for repo, names in record.files_of(attempt).items()]
    return "; ".join(part for part in [f"`{flags}`" if flags else "", *files] if part) or readable(
        record.task, attempt.summary
    )


def result_text(record: RunRecord, attempt: Attempt) -> str:
    """What the decision compared: a crash gone, or each figure before -> after with its change."""
    if attempt.rule in ("crash_fix", "crash_gone"):
        return f"starts healthy (was {attempt.crash_class})"
    if attempt.crash_class and not attempt.kept and not attempt.comparisons:
        return f"crashed: {attempt.crash_class}"
    parts = [comparison_text(record, c) for c in attempt.comparisons]
    return "; ".join(parts) or (attempt.crash_class or "-")


def comparison_text(record: RunRecord, comparison: Comparison) -> str:
    item = registry.by_key(record.task, comparison.key)
    return (
        f"{item.kind.label(item.spec)} {significant(comparison.accepted_median)} -> "
        f"{significant(comparison.pending_median)} ({percent(comparison.change)}; noise bar "
        f"{comparison.threshold:.1%}, n={len(comparison.accepted)}/{len(comparison.pending)})"
    )


def _outputs(record: RunRecord) -> list[str]:
    lines = ["## Patches and PR drafts", ""]
    for name, repo in record.state.repos.items():
        if repo.accepted:
            lines.append(f"- {name}: {len(repo.accepted)} commit(s), `patches/{name}/`")
    for draft in sorted((record.run_dir / "prs").glob("*.md")):
        title = draft.read_text(encoding="utf-8").split("\n", 1)[0].removeprefix("# ")
        lines.append(f"- PR draft `prs/{draft.name}`: {title}")
    for attempt in record.state.attempts:
        for name, path in attempt.reverted_diffs.items():
            lines.append(f"- {name}: the edit reverted at step {attempt.step} (not a commit; `git apply` it), `{path}`")
    if len(lines) == 2:
        lines.append("- no change was kept")
    return [*lines, ""]


def _details(record: RunRecord) -> list[str]:
    rows = []
    for row in baseline_rows(record):
        samples = ", ".join(significant(v) if row.performance else f"{v:.3f}" for v in row.samples) or "-"
        if row.cached:
            samples += f" ({row.cached} cached)"
        where = row.measured_on or "-"
        if row.stale:
            where += " (stale: not the accepted configuration)"
        elif row.measured_on and row.measured_on == record.state.accepted_config:
            where += " (accepted)"
        goal = f"{row.goal:g}" if isinstance(row.goal, int | float) else str(row.goal)
        rows.append([row.target, row.metric, row.value_text, samples, goal, where])
    lines = [
        "## Targets in detail",
        "",
        *run_reading.markdown_table("target | metric | final (median) | samples | goal | measured on", rows),
    ]
    if any(row.cached for row in baseline_rows(record)):
        lines += [
            "",
            "Figures marked *cached* were measured by an earlier run on the identical configuration "
            "(same image, trees, flags and check) and reused from the measurement cache (`--fresh` bypasses it).",
        ]
    lines.append(f"\n{len(record.metrics)} measurements in `metrics.jsonl`; every server log is in `logs/`.\n")
    return lines


def report_document(record: RunRecord) -> dict:
    """What a program needs from a run: every target on the configuration it was measured on, and its baseline."""
    state = record.state
    rows = baseline_rows(record)
    targets = [
        {"name": row.target, **{name: getattr(row, name) for name in DOCUMENT_FIELDS}, "cached_samples": row.cached}
        for row in rows
    ]
    accepted = state.accepted_config
    return {
        "run_id": state.run_id,
        "outcome": "solved" if state.solved else "not solved",
        "finished": state.finished,
        "baseline_config": record.baseline,
        "accepted_config": {
            "fingerprint": accepted,
            **(config.to_dict() if (config := state.configs.get(accepted)) else {}),
        },
        "targets": targets,
        "all_measured_on_accepted": all(row.measured_on == accepted for row in rows),
        "timeline": [
            {**a.to_dict(), "tried": tried_text(record, a), "result": result_text(record, a)}
            | {"why": record.explanation(a)}
            for a in state.attempts
        ],
        "relaunches": state.relaunches,
        "server_hours": round(state.server_s / 3600, 4),
        "tokens": asdict(state.tokens),
        "cost_usd": round(state.cost_usd, 4) if state.cost_known else None,
        "steps": state.step,
    }
