"""The run's plots: the throughput sweeps against offered load, and each headline figure over the run.

Covers `plots/throughput_ttft_vs_rps.png` (per configuration: the throughput figure the target holds, per
node, and the p-th percentile TTFT against offered requests per second, levels drawn in rate order, the knee
as a dotted line in the configuration's colour, the target and the SLO as dashed lines) and
`plots/objective.png` (each performance target's figure at every measurement, with the accepted
configuration's figure as a step line and the target). One colour per configuration, the same in every panel
and plot (run_reading.PALETTE, by first measurement); a configuration measured only as a change that was then
reverted is drawn hollow and grey. Each configuration appears once in a legend, named by what changed from the
baseline in CLI form and by its commits. Reads a RunRecord; writes only the PNG files.
"""

from __future__ import annotations

import statistics
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first
from matplotlib.lines import Line2D  # noqa: E402

from porter.checks import registry  # noqa: E402
from porter.checks.throughput import ThroughputResult, absolute
from porter.report.run_reading import RunRecord  # noqa: E402

LEGEND_WIDTH = 70  # characters of a legend label before it wraps


SWEEP_PLOT, OBJECTIVE_PLOT = "throughput_ttft_vs_rps.png", "objective.png"  # in the order the report shows them


def drawn(run_dir: Path) -> list[Path]:
    """The plots already in the run directory, in the report's order."""
    return [path for name in (SWEEP_PLOT, OBJECTIVE_PLOT) if (path := run_dir / "plots" / name).is_file()]


def write_plots(record: RunRecord) -> list[Path]:
    plots_dir = record.run_dir / "plots"
    plots_dir.mkdir(exist_ok=True)
    written = []
    sweeps = [(m.config, ThroughputResult.from_dict(m.result)) for m in record.metrics if m.check == "throughput"]
    sweeps = [(config, sweep) for config, sweep in sweeps if sweep.levels]
    if sweeps and record.task.checks.throughput:
        written.append(_sweep_plot(record, plots_dir, sweeps))
    performance = {item.key for item in registry.declared(record.task) if item.kind.performance}
    if any(m.check in performance for m in record.metrics):
        written.append(_objective_plot(record, plots_dir))
    return written


def _style(record: RunRecord, fingerprint: str) -> dict:
    """Colour, marker fill and line style: a reverted configuration keeps its colour, hollow and dashed."""
    colour = record.colour(fingerprint)
    if record.reverted(fingerprint):
        return {"color": colour, "markerfacecolor": "white", "linestyle": "--", "alpha": 0.75}
    return {"color": colour, "markerfacecolor": colour, "linestyle": "-"}


def legend_label(record: RunRecord, fingerprint: str) -> str:
    """`step N: <what it changed on the configuration it was tried on>`, `(reverted)` when it was not kept."""
    first = next(m.step for m in record.metrics if m.config == fingerprint)
    if fingerprint == record.baseline:
        return f"step {first}: baseline"
    text = f"step {first}: + {record.label(fingerprint, since=record.tried_on(fingerprint))}"
    if record.reverted(fingerprint):
        text += " (reverted)"
    return textwrap.fill(text, LEGEND_WIDTH, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)


def _sweep_plot(record: RunRecord, plots_dir: Path, sweeps: list[tuple[str, ThroughputResult]]) -> Path:
    spec = record.task.checks.throughput
    slo, nodes = spec.slo, record.task.hardware.nodes
    ttft_key = f"p{slo.percentile:g}_ttft_ms"
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    order = [c for c in record.configurations() if any(config == c for config, _ in sweeps)]
    for fingerprint in order:
        style = _style(record, fingerprint)
        mine = [sweep for config, sweep in sweeps if config == fingerprint]
        for axis, value in (
            (left, lambda lv: (lv.metrics.get(spec.metric) or 0) / nodes),
            (right, lambda lv: (lv.metrics.get(ttft_key) or 0) / 1000),
        ):
            _rate_line(axis, mine, value, style)
        knees = [sweep.knee_rps for sweep in mine if sweep.knee_rps]
        if knees:
            for axis in (left, right):
                axis.axvline(statistics.median(knees), color=record.colour(fingerprint), linestyle=":", linewidth=1.5)
    target = absolute(spec.target_tok_s_per_node)  # None: as high as the budget allows, no line to draw
    left.set_ylim(0, max(left.get_ylim()[1], (target or 0) * 1.12))
    right.set_ylim(0, max(right.get_ylim()[1], slo.ttft_s * 1.25))
    if target is not None:
        _limit_line(left, target, f"target {target:g} tok/s")
    _limit_line(right, slo.ttft_s, f"SLO p{slo.percentile:g} TTFT {slo.ttft_s:g} s")
    metric = spec.metric.removesuffix("_throughput")
    left.set(ylabel=f"{metric} throughput per node (tok/s)", title="Throughput against offered load (knee dotted)")
    right.set(ylabel=f"p{slo.percentile:g} time to first token (s)", title="Time to first token against offered load")
    for axis in (left, right):
        axis.set(xlabel="offered load (requests/s)")
        axis.grid(alpha=0.3)
    _legend(figure, record, order)
    return _save(figure, plots_dir / SWEEP_PLOT)


def _limit_line(axis, value: float, text: str) -> None:
    """A target or an SLO: a dashed line across the panel, named at its left end."""
    axis.axhline(value, color="black", linestyle="--", linewidth=1)
    axis.annotate(text, (0.01, value), xycoords=("axes fraction", "data"), va="bottom", fontsize=8)


def _rate_line(axis, sweeps: list[ThroughputResult], value, style: dict) -> None:
    """Every level of a configuration's sweeps as a point, and one line through the median at each rate, in rate
    order (bisection measures rates out of order, and two sweeps of one configuration bisect at different rates)."""
    by_rate: dict[float, list[float]] = {}
    for sweep in sweeps:
        for level in sweep.levels:
            by_rate.setdefault(level.rps, []).append(value(level))
    rates = sorted(by_rate)
    axis.plot(rates, [statistics.median(by_rate[r]) for r in rates], marker="o", markersize=5, **style)
    points = [(r, v) for r in rates for v in by_rate[r]]
    axis.scatter(*zip(*points, strict=True), s=12, color=style["color"], alpha=0.35, zorder=1)


def _objective_plot(record: RunRecord, plots_dir: Path) -> Path:
    """Each performance target's figure at every measurement, one panel each (their scales differ)."""
    declared = [item for item in registry.declared(record.task) if item.kind.performance]
    panels = [item for item in declared if any(m.check == item.key for m in record.metrics)]
    figure, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.5), squeeze=False)
    shown: list[str] = []
    for axis, item in zip(axes[0], panels, strict=True):
        field = item.kind.headline(item.spec)
        points = [(m.step, m.result.get(field), m.config) for m in record.metrics if m.check == item.key]
        points = [(step, value, config) for step, value, config in points if value is not None]
        for step, value, config in points:
            axis.plot([step], [value], marker="o", markersize=7, **{**_style(record, config), "linestyle": "none"})
            if config not in shown:
                shown.append(config)
        accepted = _accepted_line(record, item.key, field)
        if accepted:
            axis.step(*zip(*accepted, strict=True), where="post", color="black", linewidth=1, alpha=0.6)
        goal = item.kind.goal(item.spec)
        if isinstance(goal, int | float):
            _limit_line(axis, goal, f"target {goal:g}")
        axis.set(xlabel="step", ylabel=item.kind.label(item.spec), title=f"{item.kind.label(item.spec)} over the run")
        axis.grid(alpha=0.3)
        axis.set_ylim(bottom=0)
    _legend(figure, record, [c for c in record.configurations() if c in shown], accepted_line=True)
    return _save(figure, plots_dir / OBJECTIVE_PLOT)


def _accepted_line(record: RunRecord, key: str, field: str) -> list[tuple[int, float]]:
    """The accepted configuration's figure over the steps: the baseline's median, then at each keep the kept
    configuration's median (a configuration not yet measured for this figure keeps the line where it was)."""
    line: list[tuple[int, float]] = []
    for step, fingerprint in record.accepted_events():
        values = [m.result.get(field) for m in record.metrics if m.check == key and m.config == fingerprint]
        values = [v for v in values if v is not None]
        if values:
            line.append((step, statistics.median(values)))
    if line:
        line.append((max(record.state.step, line[-1][0]), line[-1][1]))
    return line


def _legend(figure, record: RunRecord, order: list[str], accepted_line: bool = False) -> None:
    """One legend under the panels: each configuration once, in its colour (a reverted one hollow)."""
    handles = []
    for fingerprint in order:
        style = _style(record, fingerprint)
        handles.append(Line2D([], [], marker="o", label=legend_label(record, fingerprint), **style))
    if accepted_line:
        handles.append(Line2D([], [], color="black", alpha=0.6, label="accepted configuration (median)"))
    handles.append(Line2D([], [], color="black", linestyle="--", label="target / SLO"))
    if not accepted_line:
        handles.append(Line2D([], [], color="grey", linestyle=":", label="knee (in the configuration's colour)"))
    figure.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=8, frameon=False, ncol=2)


def _save(figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return path
