"""`python3 -m twin_device.server --dir DIR [--scenario NAME]`: serve the device on DIR/device.sock.

Protocol: one JSON object per line each way, on a persistent unix-socket connection. Requests carry
"op" (properties, prefill, decode, kernel, numerics, startup) and its arguments; replies are JSON objects,
or {"error": "..."} for a bad request. The sandbox is the client and this runs on the host, so what it
reads is bounded: a request line over MAX_REQUEST_BYTES gets an error and the connection is closed (the
rest of the line is never read), and at most MAX_CONNECTIONS are served at once. The server exits when the
process that started it exits, so a killed run never leaves a device behind. Does not cover the numbers
(model.py).
"""

from __future__ import annotations

import argparse
import json
import os
import socketserver
import threading
import time
from pathlib import Path

from twin_device.model import Device, families

HERE = Path(__file__).resolve().parents[2]
SOCKET_NAME = "device.sock"
# A decode step names each running request by a short hash: a request is a few kB even at a batch of thousands.
MAX_REQUEST_BYTES = 1 << 20
MAX_CONNECTIONS = 64  # the engine holds one per process


def scenario_device(name: str) -> Device:
    """The device a scenario runs on: its model family's and its own overrides of the device's parameters."""
    path = HERE / "scenarios" / name / "scenario.json"
    spec = json.loads(path.read_text()) if path.exists() else {}
    return Device(spec.get("device", {}), spec.get("family", families.DEFAULT))


def answer(device: Device, request: dict) -> dict:
    op, config = request.get("op"), request.get("config") or {}
    if op == "properties":
        return device.properties()
    if op == "prefill":
        kernel = str(request.get("moe_kernel") or "")
        return {"ms": device.prefill_ms(config, int(request["uncached"]), int(request["cached"]), kernel)}
    if op == "decode":
        kernel = str(request.get("moe_kernel") or "")
        return {
            "ms": device.decode_ms(config, int(request["batch"]), int(request["context"]), kernel),
            "advance": [device.advance(config, str(content)) for content in request.get("requests") or []],
        }
    if op == "kernel":
        return {
            "us": device.kernel_us(request["shape"], int(request["token"]), int(request["block_m"]), request["tile"])
        }
    if op == "numerics":
        kv_dtype, corrupt = request.get("kv_cache_dtype", "auto"), bool(request.get("corrupt"))
        return {"error_rates": device.error_rates(kv_dtype, corrupt, float(request.get("fp4_unit_scale", 1.0)))}
    if op == "startup":
        arguments = {key: value for key, value in request.items() if key not in ("op", "stage")}
        return {"seconds": device.startup_seconds(str(request.get("stage")), arguments)}
    return {"error": f"unknown op {op!r}"}


def make_handler(device: Device) -> type:
    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            while line := self.rfile.readline(MAX_REQUEST_BYTES + 1):
                if len(line) > MAX_REQUEST_BYTES:
                    self.send({"error": f"request line over {MAX_REQUEST_BYTES} bytes; connection closed"})
                    return
                try:
                    reply = answer(device, json.loads(line))
                except (ValueError, KeyError, TypeError, RecursionError) as exc:
                    reply = {"error": f"bad request: {exc}"}
                self.send(reply)

        def send(self, reply: dict) -> None:
            self.wfile.write(json.dumps(reply).encode() + b"\n")
            self.wfile.flush()

    return Handler


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):  # a thread per connection: the sandbox must not make thousands
            request.sendall(json.dumps({"error": f"over {MAX_CONNECTIONS} connections"}).encode() + b"\n")
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--scenario", default="glm52-day0")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    path = args.dir / SOCKET_NAME
    path.unlink(missing_ok=True)
    os.chdir(args.dir)  # bind by a relative name: a run directory's absolute path can exceed AF_UNIX's 108 bytes
    server = Server(SOCKET_NAME, make_handler(scenario_device(args.scenario)))
    path.chmod(0o777)  # the sandbox's user (root in a container, or anyone locally) must connect
    threading.Thread(target=exit_with_parent, args=(os.getppid(),), daemon=True).start()
    print(f"twin device ({args.scenario}) on {path}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
