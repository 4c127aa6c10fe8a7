"""Command line: one function per command, no logic of its own.

Each command parses its options, calls into the module that does the work and turns the
known errors (a bad task file, a sandbox that died, ...) into a short message and an exit code.
Exit codes: 0 success, 1 the work ran and failed (targets missed, divergence), 2 bad input.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
import yaml

from porter import __version__
from porter.checks.quality_data import OUTPUT_NAMES
from porter.engines.known import ENGINES
from porter.errors import RunDirError
from porter.task import TaskError, load_task
from porter.terminal import printable


def _fail(message: str, code: int = 2) -> None:
    message = printable(message)  # messages quote servers, logs and files: nothing in them drives the terminal
    click.echo(f"porter: {message}", err=True)
    sys.exit(code)


def _load(task_path: str, sandbox_kind: str | None = None):
    """The task file, its sandbox.kind overridden by --sandbox when given; a bad file ends the command."""
    try:
        spec = load_task(task_path)
    except TaskError as exc:
        _fail(str(exc))
    if sandbox_kind:
        spec.sandbox.kind = sandbox_kind
    return spec


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="porter")
def main() -> None:
    """porter: port a newly released LLM to AMD ROCm serving on day 0."""


@main.command()
@click.argument("task", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the resolved task as JSON instead of YAML.")
def validate(task: str, as_json: bool) -> None:
    """Check TASK (a task YAML file) and print it resolved (defaults filled, ${VAR} expanded)."""
    from porter.engines.serve import render_command
    from porter.sandbox import SandboxError
    from porter.sandbox.docker_options import docker_run_words
    from porter.upstream_facts import layout_notes

    spec = _load(task)
    try:
        command = render_command(spec, spec.serve.flags)
        words = docker_run_words(spec) if spec.sandbox.kind == "docker" else None
    except (ValueError, SandboxError) as exc:  # an unknown placeholder; a mount holding porter's state, a secret
        _fail(f"{task}: {exc}")
    if as_json:
        click.echo(spec.model_dump_json(indent=2))
    else:
        click.echo(yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False, width=110), nl=False)
    click.echo(f"# {Path(task)}: valid", err=True)
    # What the engine will actually be given (in the sandbox's paths), and the sandbox it runs in; as YAML
    # comments, so the output still parses.
    click.echo(f"# serve command: {command}", err=as_json)
    if words is not None:
        click.echo(f"# docker options: {' '.join(words)}", err=as_json)
        for note in layout_notes(spec.sandbox.image, {repo.name: repo.path for repo in spec.repos}):
            click.echo(f"# {note}", err=as_json)


def _run_options(command):
    """The options `porter run` and `porter resume` share: who answers, where it runs, what is measured anew."""
    options = [
        click.option(
            "--provider",
            help="Override agent.provider: playbook, anthropic, openai, file:DIR, human, scripted:FILE, a+b.",
        ),
        click.option("--model", "model_name", help="Override agent.model."),
        click.option("--base-url", help="Override agent.base_url (an OpenAI-compatible endpoint)."),
        click.option(
            "--api-key-env",
            help="Environment variable holding the API key. With --provider or --base-url and without this, the "
            "provider's default variable is used, never the task's (its key belongs to the task's provider).",
        ),
        click.option(
            "--sandbox", "sandbox_kind", type=click.Choice(["docker", "local"]), help="Override sandbox.kind."
        ),
        click.option(
            "--skip-preflight", is_flag=True, help="Start without `porter preflight` (which runs first by default)."
        ),
        click.option(
            "--fresh", is_flag=True, help="Measure everything anew; reuse nothing from the measurement cache."
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@main.command()
@click.argument("checkpoint")
@click.option("--engine", "engine_name", type=click.Choice(sorted(ENGINES)), required=True, help="The engine.")
@click.option(
    "--hardware", default="MI355X:8", show_default=True, help="GPU:COUNT of one node (MI300X, MI325X, MI355X)."
)
@click.option("--image", help="The serving image (default: the engine's pinned image, porter/upstream_facts.py).")
@click.option("--out", type=click.Path(dir_okay=False), help="Write the task here (default: stdout).")
@click.option("--profile", type=click.Path(exists=True, dir_okay=False), help="Task sections merged over the draft.")
@click.option("--var", "variables", multiple=True, help="NAME=VALUE for the profile's {NAME} (repeatable).")
def init(checkpoint: str, engine_name: str, hardware: str, image, out, profile, variables) -> None:
    """Draft a task from CHECKPOINT (a checkpoint directory, or a hub id whose config.json and index are fetched)."""
    from porter.init.task_draft import init_main

    sys.exit(init_main(checkpoint, engine_name, hardware, image, out, profile, variables))


@main.command()
@click.argument("task", required=False, type=click.Path(dir_okay=False))
@click.option(
    "--resume",
    "resume_dir",
    type=click.Path(file_okay=False),
    help="Continue the run in RUN_DIR (read from its task.yaml and state.json; TASK is not needed).",
)
@_run_options
def run(task: str | None, resume_dir: str | None, **options) -> None:
    """Run the porting loop on TASK until its targets are met or a limit is hit; --resume RUN_DIR continues one."""
    if task is None and resume_dir is None:
        raise click.UsageError("give TASK (a task file), or --resume RUN_DIR to continue a run")
    _start(task, resume_dir, **options)


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@_run_options
def resume(run_dir: str, **options) -> None:
    """Continue the run in RUN_DIR where it stopped (as `porter run --resume RUN_DIR`)."""
    _start(None, run_dir, **options)


def _start(
    task: str | None, resume_dir: str | None, provider, model_name, base_url, api_key_env, sandbox_kind,
    skip_preflight: bool, fresh: bool,
) -> None:  # fmt: skip
    from porter.commands.preflight import preflight_main
    from porter.evaluate import runs
    from porter.sandbox import SandboxError

    if resume_dir:
        missing = [name for name in ("task.yaml", "state.json") if not (Path(resume_dir) / name).is_file()]
        if missing:
            _fail(f"{resume_dir}: not a porter run directory to resume (no {' and no '.join(missing)})")
        task = str(Path(resume_dir) / "task.yaml")  # the run's own resolved task, whatever TASK says
    spec = _load(task, sandbox_kind)
    if provider is not None or base_url is not None:
        spec.agent.api_key_env = None  # the task's key is for the task's endpoint: never send it elsewhere
    overrides = {"provider": provider, "model": model_name, "base_url": base_url, "api_key_env": api_key_env}
    for field_name, value in overrides.items():
        if value is not None:
            setattr(spec.agent, field_name, value)
    if not skip_preflight:
        try:
            runs.choose_sandbox(spec)
        except SandboxError as exc:
            _fail(f"cannot start the run: {exc}")
        if preflight_main(spec) != 0:
            _fail("preflight failed (the table above says what to fix); --skip-preflight starts anyway")
    sys.exit(runs.run_task(spec, task, resume_dir, fresh=fresh))


@main.command()
@click.argument("task", type=click.Path(dir_okay=False))
@click.option("--sandbox", "sandbox_kind", type=click.Choice(["docker", "local"]), help="Override sandbox.kind.")
def preflight(task: str, sandbox_kind) -> None:
    """Check TASK in minutes, before any model load: image, devices, weights, flags, tuners, datasets, port, key."""
    from porter.commands.preflight import preflight_main

    sys.exit(preflight_main(_load(task, sandbox_kind)))


@main.command()
@click.argument("run_or_transcript", type=click.Path(exists=True))
@click.option("--sandbox", "sandbox_kind", type=click.Choice(["docker", "local"]), help="Override sandbox.kind.")
@click.option(
    "--runs-dir",
    default="runs",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder the replay's own run directory is made in (a new one each time, never the recording's).",
)
@click.option(
    "--task", "local_task", type=click.Path(exists=True, dir_okay=False), help="Your task: the sandbox comes from it."
)
def replay(run_or_transcript: str, sandbox_kind, runs_dir: str, local_task) -> None:
    """Re-drive a recorded run without the LLM and report where it diverges (exit 1 if it did)."""
    from porter.evaluate.replay_run import replay as replay_run

    try:
        report = replay_run(run_or_transcript, runs_dir=runs_dir, sandbox_kind=sandbox_kind, local_task=local_task)
    except (FileNotFoundError, TaskError, RunDirError) as exc:
        _fail(str(exc))
    click.echo(printable(report.render()))
    sys.exit(0 if report.reproduced else 1)


def _resources(_ctx, _param, values: tuple[str, ...]) -> dict[str, float]:
    from porter.evaluate.ray_cluster import parse_resource

    try:
        return dict(parse_resource(value) for value in values)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@main.command(name="eval")
@click.argument("corpus", type=click.Path(exists=True))
@click.option(
    "--models",
    help="Comma-separated models to run every task (and every recording's task) with, e.g. "
    "playbook,anthropic; `replay` re-drives the recordings. Default: playbook on tasks, replay on recordings.",
)
@click.option("--workers", type=click.IntRange(1), default=1, show_default=True, help="Parallel sandboxes (local).")
@click.option("--out", "out_root", default="evals", show_default=True, help="Folder for <utc time>/leaderboard.md.")
@click.option(
    "--ray", "ray_address", metavar="ADDRESS", help="Run each cell as a task of the Ray cluster at host:port."
)
@click.option(
    "--ray-resource",
    "resources",
    multiple=True,
    callback=_resources,
    metavar="NAME=AMOUNT",
    help="What each cell asks of a node (repeatable), e.g. mi355x_node=1. Default: GPU=<the task's hardware.count>.",
)
@click.option(
    "--trust-recorded-tasks", "trusted", is_flag=True, help="The recordings are yours: run their tasks' host side."
)
def evaluate(corpus: str, models, workers: int, out_root: str, ray_address, resources: dict, trusted: bool) -> None:
    """Run every task of CORPUS for each model and write a leaderboard (markdown + JSON)."""
    from porter.evaluate.corpus_eval import check_corpus
    from porter.evaluate.corpus_eval import evaluate as evaluate_corpus

    try:
        problems = check_corpus(corpus, trusted)
    except FileNotFoundError as exc:
        _fail(str(exc))
    if problems:
        _fail("\n".join(problems))
    chosen = [model.strip() for model in models.split(",") if model.strip()] if models is not None else None
    if chosen == []:
        _fail("--models names no model (e.g. --models playbook,replay)")
    if ray_address:
        out_dir = _evaluate_on_ray(corpus, chosen, ray_address, resources, out_root, trusted)
    elif resources:
        _fail("--ray-resource needs --ray ADDRESS")
    else:
        out_dir = evaluate_corpus(corpus, chosen, workers, out_root, trusted)
    click.echo(printable((out_dir / "leaderboard.md").read_text()))  # its notes quote failed runs
    click.echo(f"leaderboard: {out_dir / 'leaderboard.md'}")


def _evaluate_on_ray(
    corpus: str, models: list[str] | None, address: str, resources: dict, out_root: str, trusted
) -> Path:
    from porter.evaluate.eval_ray import Interrupted, evaluate_on_ray
    from porter.evaluate.ray_cluster import RayEvalError

    try:
        return evaluate_on_ray(
            corpus, models, address, resources, out_root, echo=lambda line: click.echo(line, err=True), trusted=trusted
        )
    except (RayEvalError, TaskError) as exc:
        _fail(str(exc))
    except Interrupted as exc:
        _fail(str(exc), code=130)


_TOKENS = click.IntRange(1)
_POSITIVE = click.FloatRange(0, min_open=True)


# fmt: off
@main.command()
@click.argument("url")
@click.option("--random-input-len", "--input-len", "input_len", type=_TOKENS, default=1024, show_default=True,
              help="Prompt length, tokens per request.")
@click.option("--random-output-len", "--output-len", "output_len", type=_TOKENS, default=128, show_default=True,
              help="Generated tokens per request (ignore_eos: every request makes them all).")
@click.option("--cache-hit", type=click.FloatRange(0, 1, max_open=True), default=0.0, show_default=True,
              help="Share (0-1) of each prompt's tokens that repeat a prefix the server's cache holds.")
@click.option("--request-rate", "--rps", "rps", default="1", show_default=True,
              help="Request rate in req/s (Poisson arrivals); several, comma-separated, make a sweep with its knee.")
@click.option("--num-prompts", type=click.IntRange(1), help="Requests per rate (count), instead of --duration.")
@click.option("--duration", type=_POSITIVE, help="Arrivals per rate, seconds  [default: 60 without --num-prompts]")
@click.option("--max-concurrency", type=click.IntRange(1),
              help="Requests in flight at most (count); one due while that many run waits its turn.  [default: none]")
@click.option("--slo-ttft", type=_POSITIVE, default=5.0, show_default=True, help="TTFT limit of the SLO, seconds.")
@click.option("--slo-percentile", type=click.FloatRange(0, 100, min_open=True), default=99.0, show_default=True,
              help="Percentile (%) of TTFT held to --slo-ttft.")
@click.option("--min-requests", type=click.IntRange(1), default=32, show_default=True,
              help="Requests each rate measures at least (count), however short --duration is.")
@click.option("--single-stream", is_flag=True, help="Output tok/s of one request at a time, after the first token.")
@click.option("--output-file", type=click.Path(dir_okay=False),
              help="Append the result to this file as one JSON line (bench_serving's JSONL).")
@click.option("--json", "as_json", is_flag=True, help="Last line of stdout is one JSON object.")
# fmt: on
def bench(url: str, **options) -> None:
    """Throughput sweep (or single stream) against an OpenAI-compatible server at URL.

    Options take sglang bench_serving's names (--request-rate, --random-input-len, --random-output-len,
    --num-prompts, --max-concurrency, --output-file); porter's older names are kept as aliases.
    """
    from porter.commands.check_commands import bench_main

    sys.exit(bench_main(url, **options))


@main.group()
def check() -> None:
    """The checks alone, against any OpenAI-compatible server."""


@check.command()
@click.argument("url")
@click.option("--dataset", required=True, help="gsm8k:PATH_OR_BUILTIN or mc:PATH_OR_BUILTIN.")
@click.option("--samples", type=click.IntRange(1), default=200, show_default=True, help="Questions to ask (count).")
@click.option("--json", "as_json", is_flag=True, help="Last line of stdout is one JSON object.")
def quality(url: str, **options) -> None:
    """Accuracy with a 95% confidence interval on a GSM8K-style or multiple-choice set."""
    from porter.commands.check_commands import quality_main

    sys.exit(quality_main(url, **options))


@check.command(name="task")
@click.argument("task_path", metavar="TASK", type=click.Path(dir_okay=False))
@click.argument("url")
@click.option("--kind", help="Only the task's checks of this kind (default: every check it declares).")
@click.option("--json", "as_json", is_flag=True, help="Last line of stdout is one JSON object.")
def check_task(task_path: str, url: str, kind, as_json: bool) -> None:
    """The task's own checks against URL, each printed as the agent reads it (and judged against its target)."""
    from porter.commands.check_commands import task_main

    sys.exit(task_main(_load(task_path), url, kind, as_json))


@main.command()
@click.argument("logfile", type=click.Path(allow_dash=True))
@click.option("--json", "as_json", is_flag=True, help="Last line of stdout is one JSON object.")
def triage(logfile: str, as_json: bool) -> None:
    """Condensed root-cause view of a crash or start-up log (`-` reads stdin)."""
    from porter.triage import triage_main

    sys.exit(triage_main(logfile, as_json))


@main.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
def report(run_dir: str) -> None:
    """Write RUN_DIR/report.md with plots."""
    from porter.report.run_report import write_report

    try:
        click.echo(write_report(run_dir))
    except (RunDirError, TaskError) as exc:
        _fail(str(exc))


@main.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--push", "remote", help="Push the run's branch to this git remote.")
def pr(run_dir: str, remote) -> None:
    """Write the patch series and a PR description per repo for RUN_DIR."""
    from porter.report.pr_draft import write_prs

    try:
        written = write_prs(run_dir, remote)
    except (RunDirError, TaskError) as exc:
        _fail(str(exc))
    if not written:
        _fail(f"{run_dir}: the run kept no commit, so there is no PR to write", code=1)
    for path in written:
        click.echo(path)


@main.group()
def data() -> None:
    """The public quality datasets the real tasks use."""


@data.command(name="get")
@click.argument("name", type=click.Choice(list(OUTPUT_NAMES)))
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Folder (default: $PORTER_DATA/<set>).")
def data_get(name: str, out_dir) -> None:
    """Download NAME from the Hugging Face Hub as JSONL (+ .sha256); GPQA needs HF_TOKEN."""
    from porter.commands.datasets import DataError, default_out, get

    try:
        path, digest, rows = get(name, Path(out_dir) if out_dir else default_out(name))
    except DataError as exc:
        _fail(str(exc))
    click.echo(f"{path}: {rows} rows, sha256 {digest}")


@main.group()
def sandbox() -> None:
    """Work inside a task's sandbox by hand."""


@sandbox.command(name="exec", context_settings={"ignore_unknown_options": True})
@click.argument("task", type=click.Path(dir_okay=False))
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--timeout", type=click.FloatRange(0, min_open=True), default=600.0, show_default=True)
def sandbox_exec(task: str, command: tuple[str, ...], timeout: float) -> None:
    """Run COMMAND in TASK's sandbox (started or reused) and exit with its code."""
    from porter.commands.sandbox_commands import sandbox_exec_main

    sys.exit(sandbox_exec_main(task, list(command), timeout))


@sandbox.command(name="shell")
@click.argument("task", type=click.Path(dir_okay=False))
def sandbox_shell(task: str) -> None:
    """Open an interactive shell in TASK's sandbox."""
    from porter.commands.sandbox_commands import sandbox_shell_main

    sys.exit(sandbox_shell_main(task))


@sandbox.command(name="prune")
def sandbox_prune() -> None:
    """Remove porter's stopped or stale containers (found by label)."""
    from porter.commands.sandbox_commands import sandbox_prune_main

    sys.exit(sandbox_prune_main())


if __name__ == "__main__":
    main()
