"""Fixtures shared by the test modules: a Docker client that fails in CI and skips elsewhere without an engine,
and the one playbook run of the default twin task that the output tests read. Also the order in which CI's
pytest-xdist workers (`--dist loadfile`: a file's tests on one worker) take the files."""

from __future__ import annotations

import os
import shutil
import sys
from collections import Counter
from pathlib import Path

import docker
import docker.errors
import pytest
from helpers import in_ci

# The benchmarks' own modules (triage_cases, triage_noise) are test and benchmark code, not porter's.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))


def pytest_collection_modifyitems(config, items):
    """Files that drive a whole twin optimisation (`long_run`) go first, then the other files with tests that
    serve the twin (in Docker, or built and run locally: `needs_gxx`), those with the most tests first: they
    mostly wait on the twin's real-time clock, and a file of 37 scenarios started last was the whole run's tail.
    The quick files fill the workers' gaps. A stable sort: each file's tests stay together, in their order. CI
    keeps this order across its workers (`--no-loadscope-reorder`: xdist would otherwise queue every file by its
    number of tests, the long runs among them)."""
    long_runs = {item.path for item in items if item.get_closest_marker("long_run")}
    serving = {item.path for item in items if item.get_closest_marker("docker") or "needs_gxx" in item.fixturenames}
    tests = Counter(item.path for item in items)
    items.sort(
        key=lambda item: (
            item.path not in long_runs,
            item.path not in serving,
            -tests[item.path] if item.path in serving and item.path not in long_runs else 0,
        )
    )


@pytest.fixture(scope="session", autouse=True)
def measurement_cache(tmp_path_factory):
    """The session's own PORTER_STATE (porter's measurement cache and lock): no figure from a user's earlier runs,
    no lock shared with them."""
    previous = os.environ.get("PORTER_STATE")
    os.environ["PORTER_STATE"] = str(tmp_path_factory.mktemp("porter-state"))
    yield os.environ["PORTER_STATE"]
    if previous is None:
        os.environ.pop("PORTER_STATE", None)
    else:
        os.environ["PORTER_STATE"] = previous


@pytest.fixture(scope="module")
def needs_gxx() -> None:
    """The twin builds its C++ kernels with g++ at start-up: a missing compiler fails in CI, skips elsewhere."""
    if shutil.which("g++") is None:
        if in_ci():
            pytest.fail("CI is set but g++ is missing: the twin's JIT kernels need it (apt-get install g++)")
        pytest.skip("g++ is missing: the twin's JIT kernels need it")


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    """The local engine's client. CI=true and no engine: the test FAILS; no CI and no engine: it is skipped."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        if in_ci():
            pytest.fail(f"CI is set but no Docker engine answers: {exc}")
        pytest.skip(f"no Docker engine answers ({exc}); with CI=true this is a failure")
    return client


@pytest.fixture(scope="session")
def playbook_run(docker_client, tmp_path_factory):
    """The offline playbook on the (time-scaled) default twin task, run once per session."""
    from twin_tasks import ROOT, build_twin, fast_task_data, run_with, task_data, write_task

    build_twin()
    # the README's clock (tasks/twin_glm52.yaml: TWIN_TIME_SCALE 0.25), not the slower one of the speed tests
    readme_scale = float(task_data(ROOT / "tasks" / "twin_glm52.yaml")["sandbox"]["env"]["TWIN_TIME_SCALE"])
    return run_with(write_task(tmp_path_factory.mktemp("playbook"), fast_task_data(time_scale=readme_scale)))
