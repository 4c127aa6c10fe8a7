"""The few calls porter makes to a Ray cluster, behind one small class, and the resources a cell asks for.

Covers connecting (with a quick reachability probe, since `ray.init` retries an unreachable address for
minutes), checking that some live node can ever hold a cell, submitting a function as a named task, waiting,
reading a result as value / error / lost-with-its-worker-or-node, cancelling, and counting running cells per node
through the state API (when the head runs the dashboard that serves it). `ray` is imported only inside
`connect`, so porter works without the `porter[ray]` extra. Scheduling and retries are eval_ray.py's.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

PROBE_TIMEOUT_S = 5.0
STATE_API_TIMEOUT_S = 10


class RayEvalError(Exception):
    """The cluster cannot run this eval (Ray not installed, unreachable, no node with the resource); one line."""


@dataclass(frozen=True)
class CellResources:
    """What one cell asks of a node: Ray's own GPU and CPU counts plus any custom resource (`mi355x_node=1`)."""

    amounts: tuple[tuple[str, float], ...]

    @classmethod
    def of(cls, amounts: dict[str, float]) -> CellResources:
        return cls(tuple(sorted((name, float(amount)) for name, amount in amounts.items())))

    def options(self) -> dict:
        """Keyword arguments of `.options()`: Ray refuses GPU and CPU inside `resources`; one CPU by default."""
        custom = {name: amount for name, amount in self.amounts if name not in ("GPU", "CPU")}
        named = dict(self.amounts)
        return {"num_gpus": named.get("GPU", 0), "num_cpus": named.get("CPU", 1), "resources": custom}

    def wanted(self) -> dict[str, float]:
        return {"CPU": 1.0, **dict(self.amounts)}

    def __str__(self) -> str:
        return ", ".join(f"{name}={amount:g}" for name, amount in self.amounts)


def parse_resource(text: str) -> tuple[str, float]:
    """`NAME=AMOUNT` (e.g. `mi355x_node=1`, `GPU=8`) as a pair; ValueError with the expected form otherwise."""
    name, sep, amount = text.partition("=")
    try:
        value = float(amount)
    except ValueError:
        value = 0.0
    if not sep or not name.strip() or not value > 0:
        raise ValueError(f"{text!r}: expected NAME=AMOUNT with a positive amount, e.g. mi355x_node=1 or GPU=8")
    return name.strip(), value


def fits(nodes: list[dict], resources: CellResources) -> bool:
    """Whether some live node's total resources can ever hold one cell (else the cell would wait forever)."""
    wanted = resources.wanted()
    return any(all(node["Resources"].get(name, 0) >= amount for name, amount in wanted.items()) for node in nodes)


def node_names(nodes: list[dict]) -> str:
    shown = []
    for node in nodes:
        offered = {k: v for k, v in node["Resources"].items() if not k.startswith(("node:", "memory", "object_store"))}
        shown.append(f"{node['NodeManagerHostname']}: {', '.join(f'{k}={v:g}' for k, v in sorted(offered.items()))}")
    return "; ".join(shown) or "nothing (no live node)"


@dataclass
class Outcome:
    value: object = None
    error: str = ""
    lost: bool = False  # the worker or its node died, or the result was lost with it: worth one more attempt


class Cluster:
    """A connected driver. Methods take and return Ray object refs opaquely."""

    def __init__(self, ray, address: str):
        self.ray, self.address = ray, address
        self._remotes: dict[Callable, object] = {}

    def nodes(self) -> list[dict]:
        return [node for node in self.ray.nodes() if node["Alive"]]

    def submit(self, function: Callable, argument, name: str, resources: CellResources):
        if function not in self._remotes:  # eval_ray resubmits a lost cell itself, and says so in its row
            self._remotes[function] = self.ray.remote(max_retries=0)(function)
        return self._remotes[function].options(name=name, **resources.options()).remote(argument)

    def wait(self, refs: list, timeout_s: float) -> list:
        ready, _ = self.ray.wait(refs, num_returns=1, timeout=timeout_s)
        return ready

    def result(self, ref) -> Outcome:
        exceptions = self.ray.exceptions
        try:
            return Outcome(self.ray.get(ref))
        except exceptions.TaskCancelledError:
            return Outcome(error="cancelled")
        except exceptions.RayTaskError as exc:  # porter's own code raised on the node: a bug, not a lost node
            return Outcome(error=f"error on the node: {_first_line(exc.cause or exc)}")
        except exceptions.RayError as exc:  # WorkerCrashedError, NodeDiedError, ObjectLostError, OutOfMemoryError...
            return Outcome(error=f"{type(exc).__name__}: {_first_line(exc)}", lost=True)

    def cancel(self, refs: list, grace_s: float) -> list:
        """KeyboardInterrupt in each running cell (its `finally` stops the sandbox); force after `grace_s`.
        The refs that ended on their own within the grace (their results can still be read)."""
        for ref in refs:
            self.ray.cancel(ref, force=False)
        deadline = time.monotonic() + grace_s
        remaining = list(refs)
        try:
            while remaining and time.monotonic() < deadline:
                _ready, remaining = self.ray.wait(remaining, num_returns=len(remaining), timeout=1.0)
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: no more grace (each cell's watchdog still reaps its container)
        for ref in remaining:
            self.ray.cancel(ref, force=True)
        return [ref for ref in refs if ref not in remaining]

    def running_per_node(self, name_prefix: str) -> Counter[str]:
        """Running cells per node (host name) from the state API; empty when the head has no dashboard to ask."""
        from ray.util.state import list_tasks
        from ray.util.state.exception import RayStateApiException

        job = self.ray.get_runtime_context().get_job_id()
        try:
            tasks = list_tasks(
                address=self.address,
                filters=[("job_id", "=", job), ("state", "=", "RUNNING")],
                timeout=STATE_API_TIMEOUT_S,
                raise_on_missing_output=False,
            )
        except RayStateApiException:
            return Counter()
        where = {node["NodeID"]: node["NodeManagerHostname"] for node in self.ray.nodes()}
        return Counter(where.get(task.node_id, "?") for task in tasks if task.name.startswith(name_prefix))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


@contextlib.contextmanager
def connect(address: str) -> Iterator[Cluster]:
    """A driver connected to the cluster at `address` (host:port of the head), disconnected on exit."""
    try:
        import ray
    except ImportError:
        raise RayEvalError("--ray needs Ray on this machine: pip install 'porter[ray]'") from None
    _probe(address)
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, RuntimeError) as exc:
        raise RayEvalError(f"cannot join the Ray cluster at {address}: {_first_line(exc)}") from None
    try:
        yield Cluster(ray, address)
    finally:
        ray.shutdown()


def _probe(address: str) -> None:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return  # "auto" or a ray:// client address: ray.init says what is wrong with those
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or exc
        raise RayEvalError(f"no Ray head answers at {address} ({reason}); start one with `ray start`") from None
