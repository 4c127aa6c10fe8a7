"""A task's host-side sandbox needs: `sandbox.services` (host processes started before the sandbox, sharing a
directory with it: mounted for Docker, under the root for the local sandbox; stopped with the run; a service
that dies or never gets ready is one clear error) and `sandbox.image_build` (a local-only image is built before
a Docker sandbox needs it). Real processes and a real Docker engine, no mocks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from twin_tasks import ROOT, task_data

from porter.sandbox import SandboxError
from porter.sandbox.docker_options import container_options
from porter.sandbox.image_build import build_task_image
from porter.sandbox.services import start_services, stop_services
from porter.task import load_task

READY_SERVICE = "import pathlib, sys, time; pathlib.Path(sys.argv[1], 'ready').write_text('ok'); time.sleep(600)"


def task_with(tmp_path: Path, kind: str, command: list[str], ready: str | None = "ready"):
    data = task_data(ROOT / "tasks" / "twin_glm52.yaml")
    data["sandbox"]["kind"] = kind
    data["sandbox"]["services"] = [
        {"name": "helper", "command": command, "mount": "/run/helper", "ready": ready, "ready_timeout_s": 5}
    ]
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_task(path)


@pytest.mark.parametrize("kind", ["docker", "local"])
def test_a_service_shares_its_directory_and_stops_with_the_run(tmp_path: Path, kind: str) -> None:
    task = task_with(tmp_path, kind, [sys.executable, "-c", READY_SERVICE, "{dir}"])
    services = start_services(task, tmp_path / "run")
    try:
        (service,) = services
        assert (service.shared_dir / "ready").read_text() == "ok"
        if kind == "local":
            assert service.shared_dir == tmp_path / "run" / "root" / "run" / "helper"
        else:
            mounts = container_options(task, "run-1", tmp_path / "run")["mounts"]
            assert {"Target": "/run/helper", "Source": str(service.shared_dir)}.items() <= dict(mounts[0]).items()
        assert service.process.poll() is None
    finally:
        stop_services(services)
    assert service.process.poll() is not None


def test_a_service_that_exits_is_one_clear_error(tmp_path: Path) -> None:
    task = task_with(tmp_path, "local", [sys.executable, "-c", "import sys; print('no device here'); sys.exit(3)"])
    with pytest.raises(SandboxError, match=r"service 'helper' exited with 3 .*\n.*no device here"):
        start_services(task, tmp_path / "run")


def test_a_missing_command_is_one_clear_error(tmp_path: Path) -> None:
    task = task_with(tmp_path, "local", [str(tmp_path / "nothing.sh")])
    with pytest.raises(SandboxError, match="service 'helper' cannot start"):
        start_services(task, tmp_path / "run")


@pytest.mark.docker
def test_a_missing_local_image_is_built_by_the_task(docker_client, tmp_path: Path) -> None:
    image = "porter-test-image-build:1"
    if docker_client.images.list(name=image):
        docker_client.images.remove(image, force=True)
    task = task_with(tmp_path, "docker", [sys.executable, "-c", "import time; time.sleep(600)"])
    task.sandbox.image = image
    task.sandbox.image_build = ["docker", "tag", "porter-base:bookworm", image]
    build_task_image(task, tmp_path / "run")
    assert image in docker_client.images.get(image).tags
    docker_client.images.remove(image, force=True)
    task.sandbox.image_build = ["docker", "tag", "porter-no-such-base:0", image]
    with pytest.raises(SandboxError, match=r"sandbox.image_build failed \(exit 1\): docker tag"):
        build_task_image(task, tmp_path / "run")
