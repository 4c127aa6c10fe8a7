"""What a user reads and runs, on a real twin run: the progress log they tail, and every command porter prints as
advice.

One `porter run` of the default twin task at the quick clock (twin_tasks.QUICK_SCALE), started as a user starts it
(a child process, preflight first), with a scripted agent that serves, runs each check, turns on speculative
decoding, fixes the crash that uncovers and keeps it, then sits in a long bash command until the test interrupts it
(SIGINT, as Ctrl-C). Then:
- the progress log: every line opens with the clock time; between two lines there is never more than 30 s of the
  twin's clock (the task's `outputs.progress_every_s`, scaled with the clock); a line per start-up stage, per sweep
  level, per tenth of the questions; the terminal (a pipe here) prints the same lines; no per-step status line;
- the advice: every `porter ...` command in porter's own string literals and in the README is classified here,
  and each is run as printed (the run's own printed lines where porter printed them; placeholders filled from this
  run, a stand-in hub, a local server) or, where it needs what CI cannot have (an MI355X node, an API key, a Ray
  cluster, host-wide side effects), parsed by porter's own command line. A command that appears or disappears fails
  the test until this table says how to run it.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
import yaml
from sse_server import SseServer
from test_eval_data import TOKEN, FakeHub
from twin_tasks import QUICK_SCALE, SPEC_314, build_twin, call, fast_twin_task, fix

from porter.commands.cli import main
from porter.ledger.transcript import read_state

pytestmark = [pytest.mark.docker, pytest.mark.long_run]

ROOT = Path(__file__).resolve().parents[1]
PORTER = [sys.executable, "-m", "porter"]  # what `porter` is on a user's PATH
CLOCK = re.compile(r"(\d\d):(\d\d):(\d\d)  ")
SCRIPT = [
    call("serve"),
    call("run_check", kind="quality"),
    call("run_check", kind="throughput"),
    call("run_check", kind="single_stream"),
    call("set_flags", flags=SPEC_314),
    call("serve"),  # shape mismatch: the Quark exclude list misses the MTP layer's name
    fix("a-quark-exclude-mtp.patch"),
    call("serve"),
    call("run_check", kind="single_stream"),
    call("accept", summary="Serve with MTP, its shared expert excluded under the engine's name"),
    call("bash", command="sleep 600"),  # interrupted here
]


def porter(words: list[str], **options) -> subprocess.CompletedProcess:
    return subprocess.run(PORTER + words, capture_output=True, text=True, timeout=600, **options)


RAN: dict[tuple, subprocess.CompletedProcess] = {}


def porter_once(words: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """A command line run once per module: the README and porter's own text print some of the same lines."""
    key = (tuple(words), str(cwd), tuple(sorted((env or {}).items())))
    if key not in RAN:
        RAN[key] = porter(words, cwd=cwd, env={**os.environ, **(env or {})})
    return RAN[key]


@pytest.fixture(scope="module")
def interrupted(docker_client, tmp_path_factory) -> dict:
    """The run, interrupted in its last step: its run dir, what it printed, and its log as it stood then."""
    build_twin()
    tmp_path = tmp_path_factory.mktemp("user")
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump(SCRIPT))
    task = fast_twin_task(tmp_path, QUICK_SCALE, **{"agent.provider": f"scripted:{script}"})
    # started as a script's background job is (SIGINT ignored, inherited): Ctrl-C must still stop the run
    process = subprocess.Popen(PORTER + ["run", str(task)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # fmt: skip
    runs = tmp_path / "runs"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and process.poll() is None:
        logs = list(runs.glob("*/progress.log"))
        if logs and "  bash sleep 600  still running" in logs[0].read_text():
            break
        time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 130, err[-3000:]
    (run_dir,) = runs.iterdir()
    script.write_text(yaml.safe_dump([call("finish", reason="resumed and done")]))  # what the resumed agent says
    return {"run_dir": run_dir, "task": task, "out": out, "err": err, "log": (run_dir / "progress.log").read_text()}


def seconds_of_day(line: str) -> int:
    hours, minutes, seconds = map(int, CLOCK.match(line).groups())
    return hours * 3600 + minutes * 60 + seconds


def test_every_line_has_the_clock_and_no_silence_is_longer_than_30_s_of_the_twins_clock(interrupted):
    lines = interrupted["log"].splitlines()
    assert len(lines) > 40 and all(CLOCK.match(line) for line in lines)
    every_s = yaml.safe_load(interrupted["task"].read_text())["outputs"]["progress_every_s"]
    assert every_s == pytest.approx(30 * QUICK_SCALE)  # 30 s of the twin's clock, on this clock
    stamps = [seconds_of_day(line) for line in lines]
    gaps = [(after - before) % 86400 for before, after in zip(stamps, stamps[1:], strict=False)]
    # whole seconds on the clock: two lines `every_s` apart can read up to a second further apart
    assert max(gaps) <= every_s + 1, [lines[i : i + 2] for i, gap in enumerate(gaps) if gap > every_s + 1]
    assert not any(re.search(r"step \d+ \|", line) for line in lines)  # the old status line is gone
    printed = [line for line in interrupted["out"].splitlines() if CLOCK.match(line)]
    assert printed == lines  # not a terminal: porter prints the log's lines as it writes them


def test_the_log_says_each_action_its_result_and_its_duration(interrupted):
    text = interrupted["log"]
    duration = r"(\d+\.\d s|\d+ s|\d+ min \d+ s)"
    started = re.search(r"  run  started twin-glm52-\S+ on (\S+) \(agent scripted:.*, docker sandbox\)", text)
    assert dt.date.fromisoformat(started.group(1))  # the date once, on the first line
    for stage in ("process group", "weights loaded", "memory pool", "graphs captured", "serving"):
        assert re.search(rf"  serve  reached {stage} \(\d of 5 stages\)  {duration}", text)
    assert re.search(rf"  serve  healthy in {duration}\n", text)
    assert re.search(rf"  serve  crashed \(shape_mismatch\) after stage \d of 5, in {duration}\n", text)
    levels = re.findall(r"  run_check throughput  throughput, sample (\d) of 2: [\d.]+ req/s: (pass|fail)", text)
    assert {sample for sample, _ in levels} == {"1", "2"}  # a line per level of each sweep
    headline = r"(knee [\d.]+ req/s, [\d,.]+ tok/s/node|no rate met the SLO|no knee found below the top rate .*)"
    assert re.search(rf"  run_check throughput  {headline}; median of 2 samples [\d,.-]+  {duration}\n", text)
    tenths = re.findall(r"  run_check quality  quality:gsm8k: \d+ of \d+ right \((\d+) of 100 questions\)", text)
    assert [int(asked) for asked in tenths] == list(range(10, 101, 10))
    assert re.search(rf"  apply_patch  applied to model; changed files now: \['config.json'\]  {duration}\n", text)
    assert re.search(r"  accept  kept by rule \w+", text)
    # the keep re-measures what only another configuration had figures for, a line per level again
    assert re.search(r"  accept  throughput, sample 1 of 2: [\d.]+ req/s: ", text)
    assert re.search(r"  bash sleep 600  still running  \d", text)  # the heartbeat of a silent command
    assert re.search(
        rf"  run  interrupted \(Ctrl-C or a kill\); continue with: porter resume \S+; .*  {duration}\n", text
    )
    assert re.search(r"  target throughput \(output tok/s/node at knee\)  .*, goal [\d.]+: (met|NOT met)\n", text)


# ---------------------------------------------------------------- the advice, collected

COMMANDS = "|".join(sorted(main.commands, key=len, reverse=True))
COMMAND = re.compile(rf"\bporter (?:{COMMANDS})(?![\w:-])[^`'\"\n]*")

# text in porter's source that names a porter command without being one to run: why each is not advice
NOT_ADVICE = {
    "porter preflight": "--skip-preflight's help names the command it skips",
    "porter run directory to resume (no {": "an error saying what a folder is not",
    "porter run directory (or never started)": "an error saying what a folder is not",
    "porter run state (no run_id)": "an error saying what a file is not",
    "porter run that was killed: ": "prose before the advice (`porter resume RUN_DIR`) in the same message",
    "porter run": "the commit message porter makes of a user's uncommitted work ('before the porter run')",
    "porter run {ctx.state.run_id}: {item.key}": "who holds the measurement lock, as another process reads it",
    "porter bench {url}": "who holds the measurement lock",
    "porter bench --single-stream {url}": "who holds the measurement lock",
    "porter check quality {url}": "who holds the measurement lock",
    "porter check task {url}: {item.key}": "who holds the measurement lock",
    "porter run {state.run_id}": "report.md's title",
    "porter eval leaderboard": "leaderboard.md's title",
}
# advice in porter's source: how each is run as printed below
ADVICE = {
    "porter resume {shlex.quote(str(ctx.run_dir))}": "the line an interrupted (or failed-model) run prints",
    "porter resume RUN_DIR": "a taken port's message: RUN_DIR is the run that holds it",
    "porter data get {name} --out {shlex.quote(str(Path(reference).parent))}": "preflight's fix of a missing dataset",
    "porter validate --help": "the task loader's hint for an unknown field",
    "porter validate {out}": "porter init's last line, naming the file it wrote (run in the README's init lines)",
}


def source_strings(path: Path):
    """Every string literal of a module but its docstrings, f-strings with their {expressions} as written."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    inside_fstrings = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            yield "".join(
                part.value if isinstance(part, ast.Constant) else "{" + ast.unparse(part.value) + "}"
                for part in node.values
            )
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings and id(node) not in inside_fstrings:
                yield node.value


def package_commands() -> set[str]:
    return {
        match.group(0)
        for path in sorted((ROOT / "porter").rglob("*.py"))
        for text in source_strings(path)
        for match in COMMAND.finditer(text)
    }


def readme_commands() -> set[str]:
    """The README's `porter ...` commands: code-block lines (split at &&, comments off) and inline code spans; a
    bare command name in prose (`porter eval`) is a mention, not a command."""
    text = (ROOT / "README.md").read_text()
    found = set()
    for block in re.findall(r"```\w*\n(.*?)```", text, re.S):
        for line in block.splitlines():
            found.update(part.split(" #")[0].strip() for part in line.split("&&"))
    found.update(
        " ".join(span.split()) for span in re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    )
    return {command for command in found if COMMAND.fullmatch(command) and len(command.split()) > 2}


def test_every_printed_command_is_classified():
    found = package_commands()
    assert found - set(ADVICE) - set(NOT_ADVICE) == set(), "new porter commands in porter's text: classify them"
    assert (set(ADVICE) | set(NOT_ADVICE)) - found == set(), "no longer in porter's text: drop them from the table"


def parse(words: list[str]) -> click.Context:
    """A command line parsed as porter's own does it (every subcommand, option and argument), but not run."""
    command, context, rest = main, None, list(words)
    while isinstance(command, click.Group):
        context = click.Context(command, info_name=rest[0] if context else "porter", parent=context)
        name, rest = rest[0], rest[1:]
        command = command.get_command(context, name)
        assert command is not None, f"porter has no command {name!r}"
    return command.make_context(name, rest, parent=context)


# ---------------------------------------------------------------- the advice, run as printed


@pytest.fixture(scope="module")
def hub():
    from http.server import ThreadingHTTPServer
    from threading import Thread

    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def server():
    running = SseServer()
    yield running
    running.stop()


def resumed_as_printed(command: str, run_dir: Path) -> None:
    sessions = (run_dir / "progress.log").read_text().count("  run  resumed twin-glm52-")
    done = porter_once(shlex.split(command)[1:], ROOT)  # preflight first, as a user's resume runs it
    assert done.returncode == 1, done.stderr[-3000:]  # it ran on and ended (not solved: the script finished)
    assert read_state(run_dir)["finished"] == "resumed and done"
    assert (run_dir / "progress.log").read_text().count("  run  resumed twin-glm52-") == sessions + 1


def test_the_printed_resume_commands_resume(interrupted):
    run_dir = interrupted["run_dir"]
    printed = re.search(r"Continue with: (porter resume \S+)", interrupted["err"]).group(1)
    kept = re.search(r"continue with: (porter resume \S+)", read_state(run_dir)["finished"]).group(1)
    assert printed == kept == f"porter resume {run_dir}"
    resumed_as_printed(printed, run_dir)
    # serve.py's `porter resume RUN_DIR` (a port an earlier run holds), filled in, is the very same line
    assert shlex.split(printed) == shlex.split(f"porter resume {shlex.quote(str(run_dir))}")


def test_preflights_dataset_fix_fetches_the_dataset_it_names(interrupted, hub, tmp_path):
    data = yaml.safe_load(interrupted["task"].read_text())
    data["checks"]["quality"][0]["dataset"] = str(tmp_path / "evals" / "gsm8k" / "test.jsonl")
    task = tmp_path / "task.yaml"
    task.write_text(yaml.safe_dump(data, sort_keys=False))
    before = porter(["preflight", str(task)])
    assert before.returncode == 2
    fix_line = re.search(r"fix: (porter data get .*)", before.stdout).group(1)
    env = {**os.environ, "HF_ENDPOINT": hub, "PORTER_DATASETS_SERVER": hub}
    assert porter(shlex.split(fix_line)[1:], env=env).returncode == 0
    after = porter(["preflight", str(task)])
    assert after.returncode == 0 and re.search(r"dataset gsm8k\s+ok", after.stdout), after.stdout


def test_the_loaders_hint_runs():
    done = porter(["validate", "--help"])
    assert done.returncode == 0 and "the resolved task" in done.stdout.lower()


def readme_plans(interrupted, server, hub, tmp_path) -> dict[str, tuple]:
    """Each README command: ("run", words, expected exit code, text the output holds, env) or ("parse", words, why)."""
    run_dir = str(interrupted["run_dir"])
    example_run = "runs/glm52-mi355x-20260702T081002Z-anthropic-3fa9c1"
    recording = str(ROOT / "transcripts" / "glm52-day0")
    shutil.copy(next(interrupted["run_dir"].glob("logs/serve-002.log")), tmp_path / "crash.log")
    data_env = {"HF_ENDPOINT": hub, "PORTER_DATASETS_SERVER": hub, "HF_TOKEN": TOKEN, "PORTER_DATA": str(tmp_path)}
    real = "the real task needs an MI355X node, its image and weights"
    checkpoint, drafted = tmp_path / "corvid-v3-fp8", str(tmp_path / "glm52_fp8.yaml")
    make = ROOT / "sandboxes" / "twin" / "make_checkpoint.py"
    subprocess.run([sys.executable, str(make), str(checkpoint), "--family", "corvid3"], check=True, timeout=120)
    return {
        "porter run tasks/twin_glm52.yaml": ("parse", [], "the whole playbook run: tests/test_outputs.py runs it"),
        "porter data get gsm8k": ("run", [], 0, "rows, sha256", data_env),
        "porter data get gpqa-diamond": ("run", [], 0, "198 rows", data_env),
        "porter validate tasks/glm52_mi355x.yaml": ("run", [], 0, "valid", {}),
        # init on a local checkpoint folder (the README's "or a local folder"; the hub id needs the hub), then the
        # validate of what it wrote, in that order
        "porter init zai-org/GLM-5.2-FP8 --engine sglang --hardware MI355X:8 --out tasks/glm52_fp8.yaml": (
            "run",
            ["zai-org/GLM-5.2-FP8", str(checkpoint), "tasks/glm52_fp8.yaml", drafted],
            0,
            f"check it with `porter validate {drafted}`",
            {},
        ),  # fmt: skip
        "porter validate tasks/glm52_fp8.yaml": ("run", ["tasks/glm52_fp8.yaml", drafted], 0, "valid", {}),
        "porter init CHECKPOINT": ("parse", ["CHECKPOINT", f"{checkpoint} --engine vllm"], "the same, named"),
        "porter preflight tasks/glm52_mi355x.yaml": ("run", [], 2, "lmsysorg/sglang-rocm", {}),
        "porter run tasks/glm52_mi355x.yaml": ("parse", [], real),
        f"porter resume {example_run}": ("run", [example_run, run_dir], 1, "", {}),
        "porter run --resume RUN_DIR": ("run", ["RUN_DIR", run_dir], 1, "", {}),
        f"porter report {example_run}": ("run", [example_run, run_dir], 0, "report.md", {}),
        f"porter pr {example_run}": ("run", [example_run, run_dir], 0, "prs/model.md", {}),
        "porter resume RUN_DIR": ("run", ["RUN_DIR", run_dir], 1, "", {}),
        "porter run --sandbox local TASK": ("parse", ["TASK", "tasks/twin_glm52.yaml"], "a whole run, without Docker"),
        "porter run TASK --provider file:DIR": ("parse", ["TASK", "tasks/twin_glm52.yaml"], "a responder answers it"),
        "porter run --fresh TASK": ("parse", ["TASK", "tasks/twin_glm52.yaml"], "a whole run"),
        "porter replay runs/<run> --task TASK": (
            "run",
            ["runs/<run>", recording, "TASK", f"{recording}/task.yaml"],  # the project's own recording: local
            0,
            f"replay run in {tmp_path}/runs/",
            {},
        ),  # fmt: skip
        "porter replay RUN --task TASK": (
            "run",
            ["RUN", recording, "TASK", f"{recording}/task.yaml"],
            0,
            "reproduced",
            {},
        ),
        "porter eval DIR --models playbook,anthropic --workers 2": (
            "parse",
            ["DIR", "transcripts"],
            "an Anthropic key; tests/test_eval_ray.py runs eval",
        ),  # fmt: skip
        "porter eval CORPUS": ("parse", ["CORPUS", "transcripts"], "every recording: tests/test_corpus_replay.py"),
        "porter eval tasks --models playbook,anthropic --ray HEAD_IP:6379 --ray-resource mi355x_node=1": (
            "parse",
            ["HEAD_IP", "127.0.0.1"],
            "a Ray cluster of GPU nodes and an Anthropic key",
        ),  # fmt: skip
        "porter bench URL ...": (
            "run",
            [
                "URL",
                server.url,
                "...",
                "--request-rate 8 --num-prompts 8 --random-input-len 32 --random-output-len 4 --max-concurrency 4",
            ],
            0,
            "no knee found below the top rate",
            {},
        ),  # fmt: skip
        "porter check quality URL ...": (
            "run",
            ["URL", server.url, "...", "--dataset gsm8k:twin-gsm8k --samples 10"],
            0,
            "twin-gsm8k",
            {},
        ),  # fmt: skip
        "porter triage LOGFILE": ("run", ["LOGFILE", str(tmp_path / "crash.log")], 0, "shape_mismatch", {}),
        "porter sandbox exec TASK -- COMMAND": (
            "parse",
            ["TASK", "tasks/twin_glm52.yaml", "COMMAND", "true"],
            "leaves the task's sandbox running",
        ),  # fmt: skip
        "porter sandbox shell TASK": ("parse", ["TASK", "tasks/twin_glm52.yaml"], "an interactive shell"),
        "porter sandbox prune": ("parse", [], "removes porter's stale containers host-wide"),
    }


def filled(command: str, substitutions: list[str]) -> list[str]:
    for placeholder, value in zip(substitutions[::2], substitutions[1::2], strict=True):
        command = command.replace(placeholder, value)
    return shlex.split(command)[1:]


def test_every_readme_command_runs_as_printed(interrupted, server, hub, tmp_path, monkeypatch):
    server.reset(ttft_ms=5, itl_ms=1, answers={})
    plans = readme_plans(interrupted, server, hub, tmp_path)
    found = readme_commands()
    assert found == set(plans), f"classify: {sorted(found - set(plans))}; gone: {sorted(set(plans) - found)}"
    for command, (how, substitutions, *rest) in plans.items():
        words = filled(command, substitutions)
        if how == "parse":
            monkeypatch.chdir(ROOT)  # the README's paths are the repo's
            parse(words)  # a usage error (an unknown option, a missing argument or file) raises here
            continue
        code, holds, env = rest
        done = porter_once(words, tmp_path if "replay" in command else ROOT, env)
        said = done.stdout + done.stderr
        assert done.returncode == code and holds in said, f"{command}: exit {done.returncode}\n{said[-3000:]}"
        assert "Usage:" not in said, command
    # the replay (both README lines are the same command) ran in a run directory of its own, where it was started:
    # never the recorded task's runs_dir, a recorder's temporary folder
    (replay,) = (tmp_path / "runs").iterdir()
    assert json.loads((replay / "state.json").read_text())["run_id"] == replay.name


def test_a_run_dir_that_is_none_is_one_line(tmp_path):
    done = porter(["resume", str(tmp_path)])
    assert done.returncode == 2 and done.stderr.strip() == (
        f"porter: {tmp_path}: not a porter run directory to resume (no task.yaml and no state.json)"
    )
    missing = porter(["run"])
    assert missing.returncode == 2 and "give TASK (a task file), or --resume RUN_DIR" in missing.stderr
