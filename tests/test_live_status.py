"""The live status panel of `porter run`, rendered in a real pseudo-terminal; through a pipe, the progress log's
lines (clock time, action, result, duration), the same as RUN_DIR/progress.log."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

from local_tasks import local_task

from porter.ledger.state import RunState
from porter.report.console import launches

SCRIPT = """\
- tool_calls: [{name: bash, arguments: {command: "sleep 1.5; echo slept"}}]
- tool_calls: [{name: finish, arguments: {reason: looked around}}]
"""
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def porter_run(tmp_path, stdout) -> subprocess.Popen:
    (tmp_path / "script.yaml").write_text(SCRIPT)
    task = local_task(tmp_path)
    command = [
        sys.executable,
        "-m",
        "porter.commands.cli",
        "run",
        str(task),
        "--skip-preflight",
        "--provider",
        f"scripted:{tmp_path / 'script.yaml'}",
    ]
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "110", "LINES": "40"}
    return subprocess.Popen(command, stdout=stdout, stderr=subprocess.STDOUT, env=env)


def test_the_panel_in_a_pseudo_terminal(tmp_path):
    controller, terminal = pty.openpty()
    process = porter_run(tmp_path, terminal)
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the process is gone
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert process.wait(timeout=120) == 1
    screen = ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))
    assert "porter: local-test" in screen and "╭" in screen  # the panel's title and border
    assert "phase bring-up" in screen and "step 1/80" in screen
    assert re.search(r"now bash sleep 1\.5; echo slept \([\d.]+ s\)", screen)  # the action in flight, timed
    assert "launches 0/40" in screen and "cost $0.00" in screen
    # the log's lines scroll above the panel
    assert re.search(r"\d\d:\d\d:\d\d  bash sleep 1\.5; echo slept  exit 0  1\.\d s", screen)


def test_plain_lines_through_a_pipe(tmp_path):
    process = porter_run(tmp_path, subprocess.PIPE)
    out, _ = process.communicate(timeout=120)
    text = out.decode()
    assert "╭" not in text and "\x1b[" not in text
    lines = [line for line in text.splitlines() if re.match(r"\d\d:\d\d:\d\d  ", line)]
    actions = [line[10:].split("  ")[0] for line in lines]
    assert actions == ["run", "bash sleep 1.5; echo slept", "finish", "outputs", "run"]
    assert re.search(r"  bash sleep 1\.5; echo slept  exit 0  1\.\d s$", lines[1])  # action, result, duration
    assert re.search(r"  run  looked around; not solved; kept 0, reverted 0; 2 steps, .*  \d+\.\d s$", lines[-1])
    assert "step 1 |" not in text
    (log,) = (tmp_path / "runs").glob("*/progress.log")
    assert log.read_text().splitlines() == lines  # the terminal's lines are the log's


def test_the_closing_lines_say_reduced_launches_apart():
    """A reduced start-up starts no configuration of the run: the summary counts full launches and names the rest."""
    state = RunState(run_id="r", task_path="t.yaml", flags={}, accepted_flags={}, relaunches=9, reduced_launches=3)
    assert launches(state) == "6 launches and 3 reduced"
    state.relaunches, state.reduced_launches = 1, 0
    assert launches(state) == "1 launch"
