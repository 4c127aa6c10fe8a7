"""Fixtures shared by the test modules: a Docker client that fails in CI and skips elsewhere without an engine."""

from __future__ import annotations

import os

import docker
import docker.errors
import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


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
