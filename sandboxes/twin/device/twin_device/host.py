"""Start a device from Python on the host (tests, benchmarks): `with running_device(DIR) as socket_path:`.

The same command a task's `sandbox.services` runs (sandboxes/twin/device.sh); the device is stopped when the
block ends. Does not cover the device itself (model.py, server.py).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from twin_device.server import SOCKET_NAME

DEVICE_SH = Path(__file__).resolve().parents[2] / "device.sh"


@contextlib.contextmanager
def running_device(directory: Path, scenario: str = "glm52-day0", timeout_s: float = 20) -> Iterator[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / SOCKET_NAME
    path.unlink(missing_ok=True)
    process = subprocess.Popen(
        [str(DEVICE_SH), str(directory), "--scenario", scenario],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the twin device did not start: {process.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
        yield path
    finally:
        process.terminate()
        process.wait(timeout=10)
