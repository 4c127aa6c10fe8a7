"""`porter sandbox prune`: only containers of no live run go; the rules as a table, then once on a real engine."""

from __future__ import annotations

import os
import subprocess

import pytest

from porter.commands.sandbox_commands import HELPER_GRACE_S, prune_reason, sandbox_prune_main
from porter.sandbox.docker_options import MANAGED_LABEL, owner_labels

HOST = os.uname().nodename


def dead_owner() -> dict[str, str]:
    child = subprocess.Popen(["true"])
    child.wait()
    return {"porter.owner_host": HOST, "porter.owner_pid": str(child.pid), "porter.owner_start": "1"}


def reused_pid() -> dict[str, str]:
    """This very process's pid, but another start time: the owner died and the pid was given to someone else."""
    return {**owner_labels(), "porter.owner_start": "1"}


OLD = HELPER_GRACE_S + 1


@pytest.mark.parametrize(
    ("labels", "status", "age_s", "expected"),
    [
        (owner_labels(), "running", OLD, None),
        (owner_labels(), "exited", OLD, None),  # kept for --resume by a live porter
        (owner_labels(), "created", OLD, None),
        (dead_owner(), "running", OLD, "is gone"),
        (dead_owner(), "exited", OLD, "is gone"),
        (reused_pid(), "running", OLD, "is gone"),
        (dead_owner(), "created", 5, None),  # young helper: may be in use by a porter starting right now
        ({**dead_owner(), "porter.owner_host": "another-node"}, "exited", OLD, None),
        ({"porter.run_dir": "/nonexistent/porter-run"}, "running", OLD, "run directory gone"),
        ({}, "exited", OLD, "exited"),
        ({}, "created", OLD, "created"),
        ({}, "created", 5, None),
        ({}, "running", OLD, None),  # a manual sandbox in use
    ],
)
def test_prune_rules(labels, status, age_s, expected):
    reason = prune_reason(labels, status, age_s)
    assert reason == expected or (expected is not None and reason is not None and expected in reason)


@pytest.mark.docker
def test_prune_removes_the_dead_runs_container_and_spares_the_live_ones(docker_client, capsys):
    image = "porter-base:bookworm"
    dead = docker_client.containers.run(
        image, ["sleep", "300"], detach=True, labels={MANAGED_LABEL: "1", "porter.run": "dead", **dead_owner()}
    )
    live = docker_client.containers.run(
        image, ["true"], detach=True, labels={MANAGED_LABEL: "1", "porter.run": "live", **owner_labels()}
    )
    try:
        live.wait()
        assert sandbox_prune_main() == 0
        out = capsys.readouterr().out
        assert f"removed {dead.name} (its porter process" in out
        assert live.name not in out
        assert not docker_client.containers.list(all=True, filters={"id": dead.id})
        assert docker_client.containers.list(all=True, filters={"id": live.id})
    finally:
        for container in (dead, live):
            subprocess.run(["docker", "rm", "-f", container.id], capture_output=True)
