"""Without a Docker engine: a twin task runs in the local sandbox (laid out by its local_setup) only when the user
asks with --sandbox local, and the playbook still brings the scenario up; without the flag, or for a task that
cannot run locally, porter says so and names the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml
from helpers import free_port
from twin_tasks import ROOT, bringup_task_data

NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/porter-test.sock"}


def porter(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "porter", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=600,
    )


def test_without_docker_a_twin_task_runs_in_the_local_sandbox_only_when_asked(tmp_path):
    data = bringup_task_data(ROOT / "tasks" / "twin_oom_mem_fraction.yaml")
    data["outputs"] = {"runs_dir": str(tmp_path / "runs")}
    data["serve"]["port"] = free_port()  # the local sandbox serves on the host: test workers run side by side
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    refused = porter("run", str(tmp_path / "task.yaml"), env=NO_ENGINE)
    assert refused.returncode == 2 and "rerun with --sandbox local" in refused.stderr
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())
    result = porter("run", str(tmp_path / "task.yaml"), "--sandbox", "local", env=NO_ENGINE)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "NO ISOLATION" in result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    state = json.loads((run_dir / "state.json").read_text())
    assert state["solved"] and state["accepted_flags"]["mem-fraction-static"] == 0.9
    assert yaml.safe_load((run_dir / "task.yaml").read_text())["sandbox"]["kind"] == "local"
    assert (run_dir / "root" / "sgl-workspace" / "twin" / ".git").is_dir()


def test_a_task_that_cannot_run_locally_names_the_problem(tmp_path):
    result = porter("run", str(ROOT / "tasks" / "glm52_mi355x.yaml"), env={**NO_ENGINE, "ANTHROPIC_API_KEY": "x" * 20})
    assert result.returncode == 2
    assert "no Docker engine answers at the local Docker socket" in result.stderr
    assert "Traceback" not in result.stderr
