"""The engine's handle on the GPUs (what torch.cuda / the HIP runtime is to sglang): one connection to the
node's device through a unix socket.

Every timing, kernel launch and memory query goes through here; the engine never decides how fast the
hardware is. The socket is $TWIN_DEVICE_SOCKET, else /run/twin-device/device.sock, else the same path under
a --local layout's root (the nearest directory above this tree that holds opt/rocm: the engine sits at
sgl-workspace/twin/twin under sglang's layout and deeper, in site-packages, under vLLM's). No socket means no
GPU, as on a machine without one. Does not cover what is launched (scheduler.py, moe.py, tune_moe.py).
"""

import functools
import json
import os
import socket
import time
from pathlib import Path

DEFAULT_SOCKET = "/run/twin-device/device.sock"
# Every device duration (a step, a start-up stage) is multiplied by TWIN_TIME_SCALE (default 1). Figures at a
# scale other than 1 are not comparable with scale-1 figures.
TIME_SCALE = float(os.environ.get("TWIN_TIME_SCALE", "1"))


class NoDeviceError(RuntimeError):
    """Raised like torch's RuntimeError when no GPU is visible."""


def layout_root() -> Path:
    """The root this tree was laid out under: / in an image, the --local directory otherwise."""
    parents = Path(__file__).resolve().parents
    return next((parent for parent in parents if (parent / "opt" / "rocm").is_dir()), Path("/"))


def socket_path() -> Path | None:
    candidates = [DEFAULT_SOCKET, str(layout_root() / DEFAULT_SOCKET.lstrip("/"))]
    if os.environ.get("TWIN_DEVICE_SOCKET"):
        candidates = [os.environ["TWIN_DEVICE_SOCKET"]]
    for candidate in candidates:
        if Path(candidate).is_socket():
            return Path(candidate)
    return None


class _Connection:
    def __init__(self) -> None:
        path = socket_path()
        if path is None:
            raise NoDeviceError("No HIP GPUs are available")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            # through the directory's descriptor: a deep path can exceed AF_UNIX's 108 bytes
            self.sock.connect(f"/proc/self/fd/{directory}/{path.name}")
        except OSError as exc:
            raise NoDeviceError(f"No HIP GPUs are available (hipErrorNoDevice: {exc})") from None
        finally:
            os.close(directory)
        self.reader = self.sock.makefile("rb")

    def call(self, request: dict) -> dict:
        self.sock.sendall(json.dumps(request).encode() + b"\n")
        line = self.reader.readline()
        if not line:
            raise NoDeviceError("HIP error: the device was lost (hipErrorDeinitialized)")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"HIP error: {reply['error']}")
        return reply


@functools.cache
def _connection() -> _Connection:
    return _Connection()


def call(op: str, **arguments) -> dict:
    return _connection().call({"op": op, **arguments})


def wait(stage: str, **arguments) -> float:
    """Spend the time a start-up stage takes on the device (reading weights, building a kernel, capturing
    graphs); returns the seconds waited."""
    seconds = float(call("startup", stage=stage, **arguments)["seconds"]) * TIME_SCALE
    time.sleep(seconds)
    return seconds


@functools.cache
def properties() -> dict:
    """name, gcn_arch, count, total_memory_gb, cu_num, lds_bytes of the node's GPUs."""
    return call("properties")
