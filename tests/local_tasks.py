"""A small task on the local sandbox around a real git tree: for tests of the loop's own machinery (tools,
context, providers) that need a real run but no Docker and no serving engine."""

from __future__ import annotations

from pathlib import Path

import git
import yaml
from helpers import free_port

from porter.evaluate import runs
from porter.loop.run_context import RunContext
from porter.task import load_task


def local_task(tmp_path: Path, **agent) -> Path:
    tree = tmp_path / "engine"
    tree.mkdir()
    (tree / "main.py").write_text("print('hello')\n")
    repo = git.Repo.init(tree)
    repo.git.add("--all")
    repo.git.execute(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "release"])
    task = {
        "name": "local-test",
        "description": "A tiny task whose engine is one file.",
        "model": {"id": "test/model", "path": "/models/test", "in_image": True, "overlay": False},
        "hardware": {"gpu": "none", "count": 2},
        "sandbox": {"kind": "local"},
        "repos": [{"name": "engine", "path": str(tree)}],
        "serve": {
            "command": "python3 -m http.server {port}",
            "port": free_port(),  # test workers run side by side: each its own port
            "flags": {"tp": 2},
            "tunables": {"tp": [1, 2]},
        },
        "agent": {"provider": "playbook", **agent},
        "outputs": {"runs_dir": str(tmp_path / "runs")},
    }
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    return path


def open_local_run(tmp_path: Path, **agent) -> RunContext:
    path = local_task(tmp_path, **agent)
    return runs.open_run(load_task(path), str(path))


def run_local(ctx: RunContext, script: list[dict], remove: bool = True):
    """Run the loop with a scripted model on an opened local run; the model, whose `requests` say what it saw."""
    from porter.loop import agent
    from porter.models import ScriptedModel
    from porter.redaction import redact

    model = ScriptedModel(script)
    try:
        agent.run_loop(ctx, model, redact)
    finally:
        ctx.transcript.close()
        ctx.sandbox.stop(remove=remove)
    return model
