"""Setting a run up and closing it: the run directory, the sandbox, the repos, resume, and the outputs.

Covers `runs/<task>-<utc time>-<provider>-<random>/` (resolved task.yaml, environment.json, transcript.jsonl,
state.json, logs/, patches/), starting or reusing the sandbox, putting every repo on the run's branch, resuming from
state.json, and exporting the accepted commits as patch series at the end. Does not loop (agent.py).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import time
from pathlib import Path

import docker
import docker.errors
import yaml

from porter import __version__
from porter.ledger.state import RunState
from porter.ledger.transcript import Transcript
from porter.loop import agent
from porter.loop.run_context import RunContext, resume_command
from porter.models import ModelError, make_model
from porter.redaction import MAX_SCRUB_MIB, collect, redact, scrub_tree, secret_fields
from porter.report import console
from porter.report.live_status import LiveStatus
from porter.report.pr_draft import write_prs
from porter.report.run_report import write_report
from porter.sandbox import SandboxError, make_sandbox
from porter.sandbox.image_build import build_task_image
from porter.sandbox.services import SHARED_DIRS, start_services, stop_services
from porter.sandbox.trees.tracked import TrackedRepo
from porter.task import Task
from porter.terminal import printable


def new_run_dir(task: Task) -> tuple[Path, str]:
    """`<task>-<utc time>-<provider>-<random>`: runs started in the same second (eval workers) never collide."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    provider = re.sub(r"[^a-z0-9]+", "-", task.agent.provider.split(":", 1)[0].lower()).strip("-")[:24] or "agent"
    for _ in range(8):
        run_id = f"{task.name}-{stamp}-{provider}-{secrets.token_hex(3)}"
        run_dir = (Path(task.outputs.runs_dir) / run_id).resolve()
        try:
            run_dir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            continue  # 1 in 16 million per pair; mkdir is the atomic claim
        return run_dir, run_id
    raise FileExistsError(f"could not claim a fresh run directory under {task.outputs.runs_dir}")


def open_run(task: Task, task_path: str, resume_dir: str | None = None, fresh: bool = False) -> RunContext:
    """A ready RunContext: sandbox started, repos on the run branch, transcript open (appending on resume)."""
    collect(key_names=[task.agent.api_key_env])
    leaking = secret_fields(task.model_dump(mode="json"))
    if leaking:
        raise ValueError(f"the task holds secret values, which would reach prompts, logs and the sandbox: {leaking}")
    if resume_dir:
        run_dir = Path(resume_dir).resolve()
        state = RunState.read(run_dir)
        run_id = state.run_id
    else:
        run_dir, run_id = new_run_dir(task)
        (run_dir / "task.yaml").write_text(redact(yaml.safe_dump(task.model_dump(mode="json"), sort_keys=False)))
        state = RunState(run_id, str(task_path), dict(task.serve.flags), dict(task.serve.flags))
    state.fresh = state.fresh or fresh
    transcript = Transcript(run_dir / "transcript.jsonl", redact)
    if task.sandbox.kind == "local" and task.sandbox.local_setup and not (run_dir / "root").exists():
        prepare_local_root(task, run_dir / "root")
    build_task_image(task, run_dir)
    services = start_services(task, run_dir)
    try:
        sandbox = make_sandbox(task, run_dir, run_id)
        sandbox.start()
    except BaseException:
        stop_services(services)
        raise
    repos = {}
    for spec in task.patchable_repos():
        tracked = TrackedRepo(spec.name, sandbox.repo_dir(spec.name), run_id)
        state.repos[spec.name] = tracked.begin(state.repos.get(spec.name))
        repos[spec.name] = tracked
    ctx = RunContext(task, sandbox, state, run_dir, transcript, repos, services=services)
    if resume_dir:
        ctx.kill_leftover_server()  # a SIGKILLed porter leaves its server holding the port and the devices
        ctx.put_back()  # and an earlier configuration in place of the pending change, if killed during one
        scrub_run_dir(ctx)  # a killed porter never swept what it had written (server logs, error log)
        cleared = {name: repo.cleared_locks for name, repo in repos.items() if repo.cleared_locks}
        locks = f"; cleared the git locks a killed porter left (no process held them): {cleared}" if cleared else ""
        transcript.record("note", step=state.step, text=f"resumed from {run_dir}; the server is not running{locks}")
        state.finished = None
        state.messages.append(
            {
                "role": "user",
                "content": "The run was interrupted and has been resumed. The server "
                "is stopped; pending changes (if any) are still in the tree. Serve before measuring.",
            }
        )
    else:
        environment = describe_environment(ctx)
        (run_dir / "environment.json").write_text(redact(json.dumps(environment, indent=1)))
        transcript.record("run_start", run_id=run_id, task=task.name, environment=environment)
    ctx.mark_accepted()
    return ctx


def prepare_local_root(task: Task, root: Path) -> None:
    command = [word.replace("{root}", str(root)) for word in task.sandbox.local_setup]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SandboxError(
            f"sandbox.local_setup failed (exit {done.returncode}): {' '.join(command)}\n{done.stderr.strip()[-2000:]}"
        )


def docker_answers(task: Task) -> bool:
    host = task.sandbox.docker_host
    try:
        client = docker.DockerClient(base_url=host) if host else docker.from_env(timeout=10)
        client.ping()
    except docker.errors.DockerException:
        return False
    return True


def choose_sandbox(task: Task) -> None:
    """A docker task needs an engine that answers: it never falls back to the local sandbox (which does not
    isolate) unless the user asks for it with `--sandbox local`."""
    if task.sandbox.kind != "docker" or docker_answers(task):
        return
    where = task.sandbox.docker_host or "the local Docker socket"
    local = (
        "or, accepting NO isolation, rerun with --sandbox local (this task has sandbox.local_setup)"
        if task.sandbox.local_setup
        else "(this task cannot run in the local sandbox: it has no sandbox.local_setup)"
    )
    raise SandboxError(f"no Docker engine answers at {where}; start one (scripts/setup.sh does) {local}")


# What a PR's environment block names, asked inside the image: the ROCm release file, aiter's git commit (found
# without importing it: importing aiter can build kernels) or its installed version, and the GPU's market name.
STACK_PROBE = r"""
echo "rocm=$(head -n1 /opt/rocm/.info/version 2>/dev/null)"
find="import importlib.util as u; s = u.find_spec('aiter'); print(s.submodule_search_locations[0] if s else '')"
dir=$(python3 -c "$find" 2>/dev/null)
[ -n "$dir" ] && echo "aiter_commit=$(git -C "$dir" rev-parse HEAD 2>/dev/null)"
for name in amd-aiter aiter; do
  python3 -c "import importlib.metadata as m; print('aiter_version=' + m.version('$name'))" 2>/dev/null && break
done
echo "gpu=$(amd-smi static --asic 2>/dev/null | grep -m1 MARKET_NAME | cut -d: -f2-)"
"""


def probe_stack(ctx: RunContext) -> dict:
    """The probe's answers (what the sandbox prints is its own: printable, short, only the keys asked)."""
    try:
        result = ctx.sandbox.exec(STACK_PROBE, timeout=60)
    except SandboxError:
        return {}
    answers = dict(line.partition("=")[::2] for line in result.output.splitlines() if "=" in line)
    keys = ("rocm", "aiter_commit", "aiter_version", "gpu")
    return {key: printable(answers[key].strip())[:80] for key in keys if answers.get(key, "").strip()}


def describe_environment(ctx: RunContext) -> dict:
    """What replay needs to say what changed (image, repo bases, porter version, flags, agent), and what a PR's
    environment block names (the stack the image ships)."""
    return {
        "porter_version": __version__,
        "sandbox": ctx.sandbox.describe(),
        "stack": probe_stack(ctx),
        "repos": {name: state.base_commit for name, state in ctx.state.repos.items()},
        "flags": ctx.task.serve.flags,
        "agent": {"provider": ctx.task.agent.provider, "model": ctx.task.agent.model},
        "started_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": os.uname().nodename,
    }


def finish_outputs(ctx: RunContext) -> None:
    """What every run leaves, however it ended: patch series, PR drafts, report; then the transcript is closed
    and the sandbox's host services stop."""
    try:
        write_prs(ctx.run_dir)
        write_report(ctx.run_dir)
    finally:
        ctx.transcript.close()
        stop_services(ctx.services)
        scrub_run_dir(ctx)


def scrub_run_dir(ctx: RunContext) -> None:
    """Sweep every file porter wrote (logs, patches, drafts, report, ...) for secret values; the sandbox's own
    trees (repos, local root, scratch, the folders it shares with host services) are its content, not porter's
    output, and are left as they are. A file too large to sweep is named."""
    trees = [ctx.run_dir / name for name in ("repos", "root", "scratch", SHARED_DIRS)]
    too_large = scrub_tree(ctx.run_dir, skip=trees).too_large
    if too_large:
        shown = ", ".join(str(path.relative_to(ctx.run_dir)) for path in too_large)
        console.say(f"porter: not swept for secrets (over {MAX_SCRUB_MIB} MiB, read no further): {shown}")


def _after_step(status: LiveStatus):
    """After every step: the live panel or line, then the report (report.html reloads itself in a browser)."""

    def on_step(ctx: RunContext) -> None:
        status.log.begin("report", "writing report.md, report.html and the plots")  # the heartbeat covers it
        write_report(ctx.run_dir, live=True)
        status.on_step(ctx)

    return on_step


def run_task(task: Task, task_path: str, resume_dir: str | None = None, fresh: bool = False) -> int:
    """`porter run` (and `porter resume`): 0 when every target is met, 1 when the run ended without, 2 when it could
    not start or the model failed, 130 on Ctrl-C. Everything it does goes to RUN_DIR/progress.log as it happens."""
    opening = time.monotonic()
    try:
        choose_sandbox(task)
        model = make_model(task.agent, Path(resume_dir) if resume_dir else None, task)  # the playbook reads the task
        ctx = open_run(task, task_path, resume_dir, fresh)
    except (ModelError, SandboxError, ValueError, FileNotFoundError) as exc:
        console.say(f"porter: cannot start the run: {exc}")
        return 2
    console.say(f"porter: run {ctx.state.run_id} in {ctx.run_dir} (agent: {model.name})")
    console.say(f"porter: follow it with: tail -f {shlex.quote(str(ctx.run_dir / 'progress.log'))}")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` stops a run as cleanly as Ctrl-C does
    # and Ctrl-C (SIGINT) stops it even when porter was started with SIGINT ignored (a background job of a
    # script inherits SIG_IGN, and Python then installs no KeyboardInterrupt): a run in a long command waited for it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # a person typing the replies needs the terminal to themselves
    with LiveStatus(ctx, enabled=model.name != "human") as status:
        status.opened(model.name, resumed=bool(resume_dir), seconds=time.monotonic() - opening)
        session = time.monotonic()
        code, advice = None, ""
        try:
            agent.run_loop(ctx, model, redact, on_step=_after_step(status), on_action=status.on_action)
        except ModelError as exc:
            code, advice = 2, f"the model failed: {exc}. Nothing is lost; after fixing it: {resume_command(ctx)}"
        except KeyboardInterrupt:
            code, advice = 130, f"interrupted; nothing half-applied. Continue with: {resume_command(ctx)}"
        finally:
            status.closing()
            finish_outputs(ctx)
            ctx.sandbox.stop()  # however the run ends: kept (stopped) for inspection or resume, its devices released
            status.closed(time.monotonic() - session, advice if code == 2 else "")  # an interruption says it
    if code is not None:
        console.say(f"porter: {advice}")
        return code
    console.show_summary(ctx)
    return 0 if ctx.state.solved else 1
