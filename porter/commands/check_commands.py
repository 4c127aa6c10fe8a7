"""What `porter bench` and `porter check quality` run: options in, rich tables or one JSON line out.

Covers turning the command-line options into check specs, running the check, printing a human
table (rich) or, with --json, progress on stderr and one JSON object as the last stdout line, and
the exit code (0 ran and passed, 1 ran and failed or could not reach the server, 2 bad input).
Without a task there is no target: the bench passes when some level meets the SLO. Does not
parse argv (porter/commands/cli.py does).
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from porter.checks import quality, quality_data, registry, request_failures, throughput, throughput_kind
from porter.checks.kind import CheckProgress, OnProgress
from porter.checks.loadgen import CheckError
from porter.checks.quality import QualityCheckSpec
from porter.checks.render import number
from porter.checks.throughput import SingleStreamSpec, ThroughputCheckSpec
from porter.ledger.measure_cache import LockTimeout, measurement_lock
from porter.report.progress_log import duration
from porter.task import Task
from porter.terminal import markup_safe, printable

SINGLE_STREAM_REQUESTS = 3
DEFAULT_DURATION_S = 60.0  # of arrivals per rate, when neither --duration nor --num-prompts is given
DATASET_KINDS = {"gsm8k": "gsm8k", "mc": "multiple_choice"}


def _fail(message: str, code: int) -> int:
    print(f"porter: {printable(message)}", file=sys.stderr)
    return code


def _console(as_json: bool) -> Console:
    """Tables go to stderr under --json; a log file or pipe gets full-width tables, not truncated ones."""
    console = Console(stderr=as_json)
    if not console.is_terminal:
        console.width = 160
    return console


def parse_rates(text: str) -> list[float]:
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CheckError(f"--request-rate must be comma-separated numbers (req/s), got {text!r}") from None
    if not rates or any(not math.isfinite(rate) or rate <= 0 for rate in rates):
        raise CheckError(f"--request-rate needs one or more positive finite rates (req/s), got {text!r}")
    return rates


def bench_main(
    url, input_len, output_len, cache_hit, rps, slo_ttft, slo_percentile, duration, single_stream, as_json,
    min_requests=32, num_prompts=None, max_concurrency=None, output_file=None,
) -> int:  # fmt: skip
    """`porter bench`: an RPS sweep with an SLO (or --single-stream) against URL."""
    out = _console(as_json)
    try:
        if single_stream:
            spec = SingleStreamSpec(
                input_tokens=input_len,
                output_tokens=output_len,
                num_requests=SINGLE_STREAM_REQUESTS,
                target_output_tok_s=math.inf,
            )
            with (
                measurement_lock(f"porter bench --single-stream {url}"),
                _bar(out, "single stream", spec.num_requests) as follow,
            ):
                result = throughput.run_single_stream(url, spec, on_progress=follow)
            _print_single(out, result)
            passed = result.completed > 0
        else:
            spec = ThroughputCheckSpec.model_validate(
                {
                    "workload": {
                        "input_tokens": input_len,
                        "output_tokens": output_len,
                        "cache_hit_rate": cache_hit,
                        "duration_s": duration if duration or num_prompts else DEFAULT_DURATION_S,
                        "num_prompts": num_prompts,
                        "min_requests": min_requests,
                        "max_concurrency": max_concurrency,
                    },
                    "rps": parse_rates(rps),
                    "slo": {"ttft_s": slo_ttft, "percentile": slo_percentile},
                    "metric": "output_throughput",
                    "target_tok_s_per_node": math.inf,
                }
            )
            most = len(set(spec.rps)) + spec.bisect_steps
            with measurement_lock(f"porter bench {url}"), _bar(out, "sweep", most) as follow:
                result = throughput.run_throughput(url, spec, on_level=throughput_kind.sweep_progress(spec, follow))
            _print_sweep(out, result)
            passed = result.knee is not None
    except CheckError as exc:
        return _fail(str(exc), 2 if "--request-rate" in str(exc) else 1)
    except LockTimeout as exc:
        return _fail(str(exc), 1)
    except ValidationError as exc:
        return _fail(f"bad options: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}", 2)
    document = json.dumps(result.to_dict())
    if output_file:  # one JSON line appended per run, as bench_serving's --output-file
        with open(output_file, "a", encoding="utf-8") as results:
            results.write(document + "\n")
    if as_json:
        print(document)
    return 0 if passed else 1


@contextlib.contextmanager
def _bar(out: Console, what: str, most: int | None = None) -> Iterator[OnProgress]:
    """A line per level (or request) as it ends and, on a terminal, a progress bar with the time left at the pace
    of the units done so far (a sweep has a handful, too few for rich's own estimate)."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    bar = Progress(*columns, TextColumn("{task.fields[left]}"), console=out, transient=True,
                   disable=not out.is_terminal)  # fmt: skip
    task = bar.add_task(what, total=most, left="")

    def follow(step: CheckProgress) -> None:
        out.print(markup_safe(step.note), highlight=False)
        elapsed = bar.tasks[0].elapsed or 0.0
        left = elapsed / step.done * (step.total - step.done) if step.done else None
        shown = f"elapsed, {'up to ' if step.bounded else ''}{duration(left)} left" if left else "elapsed"
        bar.update(task, completed=step.done, total=step.total, description=f"{what}: {step.unit}", left=shown)

    with bar:
        yield follow


def _print_sweep(out: Console, result: throughput.ThroughputResult) -> None:
    table = Table(title=f"{markup_safe(result.model)}: SLO p{result.slo.percentile:g} TTFT <= {result.slo.ttft_s:g} s")
    columns = [
        "rps",
        "ok",
        "done/offered",
        "err",
        "TTFT mean/med/p99 ms",
        "ITL med/p99 ms",
        "TPOT med ms",
        "E2E med ms",
        "out tok/s",
        "total tok/s",
        "cache hit",
    ]
    for column in columns:
        table.add_column(column, justify="right")
    for level in result.levels:
        figures = level.metrics
        hit = figures["cache_hit_rate"]
        table.add_row(
            f"{level.rps:g}",
            "yes" if level.passed else "no",
            f"{figures['completed']}/{level.offered}",
            str(figures["errors"]),
            "/".join(number(figures[f"{kind}_ttft_ms"]) for kind in ("mean", "median", "p99")),
            f"{number(figures['median_itl_ms'])}/{number(figures['p99_itl_ms'])}",
            number(figures["median_tpot_ms"]),
            number(figures["median_e2e_latency_ms"], 0),
            number(figures["output_throughput"]),
            number(figures["total_throughput"]),
            "-" if hit is None else f"{hit:.1%}",
        )
    out.print(table)
    if result.knee is None:
        out.print("[red]no level met the SLO[/]")
    elif result.every_level_passed:
        out.print(
            f"no knee found below the top rate: every rate up to {result.knee_rps:g} req/s met the SLO, so the knee "
            f"is higher (sweep higher rates to find it); at {result.knee_rps:g} req/s, output "
            f"{result.output_throughput_per_node:,.1f} and total {result.total_throughput_per_node:,.1f} tok/s "
            "per node"
        )
    else:
        out.print(
            f"knee: {result.knee_rps:g} req/s, output {result.output_throughput_per_node:,.1f} and total "
            f"{result.total_throughput_per_node:,.1f} tok/s per node"
        )
        drained = throughput_kind.drain_note(result.knee.metrics)
        if drained:
            out.print(f"[yellow]warning: {drained}[/]")
    for level in result.levels:
        for line in request_failures.lines(level.failures):
            out.print(f"[red]rps {level.rps:g}:[/] {markup_safe(line)}")


def _print_single(out: Console, result: throughput.SingleStreamResult) -> None:
    speeds = ", ".join(f"{speed:.1f}" for speed in result.per_request_tok_s)
    out.print(
        f"{markup_safe(result.model)}: single stream {result.output_tok_s:,.1f} output tok/s after the first token "
        f"(median of [{speeds}]), median TTFT {number(result.median_ttft_ms)} ms, "
        f"{result.completed} completed, {result.errors} errors"
    )
    for line in request_failures.lines(result.failures):
        out.print(f"[red]error:[/] {markup_safe(line)}")


def dataset_spec(dataset: str, samples: int) -> QualityCheckSpec:
    """`gsm8k:PATH_OR_BUILTIN` / `mc:PATH_OR_BUILTIN` as a check spec with no bar (minimum 0)."""
    kind, _, where = dataset.partition(":")
    if kind not in DATASET_KINDS or not where:
        raise CheckError(f"--dataset must be gsm8k:PATH_OR_BUILTIN or mc:PATH_OR_BUILTIN, got {dataset!r}")
    if not where.startswith("builtin:") and not Path(where).expanduser().exists():
        if where not in quality_data.builtin_names():
            names = ", ".join(quality_data.builtin_names()) or "none"
            raise CheckError(f"--dataset {where!r} is neither a file nor a built-in set (built-in: {names})")
        where = f"builtin:{where}"
    gsm8k = kind == "gsm8k"
    return QualityCheckSpec(
        name=Path(where.removeprefix("builtin:")).stem,
        kind=DATASET_KINDS[kind],
        dataset=where,
        samples=samples,
        few_shot=5 if gsm8k else 0,
        metric="flexible_match" if gsm8k else "accuracy",
        max_tokens=512 if gsm8k else 4096,
        minimum=0.0,
    )


def quality_main(url, dataset, samples, as_json) -> int:
    """`porter check quality`: accuracy with a 95% interval on a GSM8K-style or multiple-choice set."""
    out = _console(as_json)
    try:
        spec = dataset_spec(dataset, samples)
        quality.read_dataset(spec)  # a broken dataset is bad input (2), found before any request
    except CheckError as exc:
        return _fail(str(exc), 2)
    try:
        with measurement_lock(f"porter check quality {url}"), _bar(out, spec.name, spec.samples) as follow:
            result = quality.run_quality(url, spec, on_progress=follow)
    except (CheckError, LockTimeout) as exc:
        return _fail(str(exc), 1)
    table = Table(title=f"{markup_safe(result.name)} on {markup_safe(result.model)} ({result.n} questions)")
    for column in ("score", "95% CI", "strict", "flexible", "errors", "dataset sha256"):
        table.add_column(column, justify="right")
    table.add_row(
        f"{result.score:.3f}",
        f"{result.ci_low:.3f}-{result.ci_high:.3f}",
        number(result.strict_match, 3),
        number(result.flexible_match, 3),
        str(result.errors),
        result.dataset_sha256[:12],
    )
    out.print(table)
    for line in request_failures.lines(result.failures):
        out.print(f"[red]error:[/] {markup_safe(line)}")
    if as_json:
        print(json.dumps(result.to_dict()))
    return 0 if result.errors < result.n else 1


def task_main(task: Task, url: str, kind_name: str | None, as_json: bool) -> int:
    """`porter check task`: every check the task declares (of one kind), run as porter run runs it, printed as
    its kind renders it for the agent; 0 when each met its target, 1 when one did not or could not run."""
    try:
        items = registry.declared(task, kind_name)
    except ValueError as exc:
        return _fail(str(exc), 2)
    if not items:
        return _fail(f"the task declares no {kind_name or ''} check".replace("  ", " "), 2)
    results, met, out = {}, True, _console(as_json)
    for item in items:
        try:
            with measurement_lock(f"porter check task {url}: {item.key}"), _bar(out, item.key) as follow:
                results[item.key] = item.kind.run(url, item.spec, task, follow)
        except CheckError as exc:
            return _fail(f"{item.key}: {exc}", 1)
        met = met and item.kind.met(results[item.key], item.spec)
        print(printable(item.kind.render(item.key, results[item.key])), file=sys.stderr if as_json else sys.stdout)
    if as_json:
        print(json.dumps(results, default=str))
    return 0 if met else 1
