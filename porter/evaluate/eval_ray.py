"""`porter eval CORPUS --ray ADDRESS`: the cells of an eval (a task or a recording x a model) as Ray tasks.

Each cell runs on one worker node with everything local to that node: the task (resolved on the driver, so its
host paths, e.g. weights and datasets, must exist at the same place on every node) is written to a temporary
folder there, the sandbox uses that node's Docker engine, and the run directory comes back to the driver as a
gzip tar returned by the task (at most MAX_ARCHIVE_BYTES: `repos/`, then `logs/` stay on the node when the
whole run is bigger) and is unpacked under the eval's `runs/`. A cell whose worker or node dies is submitted
once more when a live node can take it, else (or after that) listed as failed with the reason; Ctrl-C cancels
every cell (a running one gets a KeyboardInterrupt, as in `porter run`). A watchdog process per cell removes
the containers and folder of a cell that did not end normally. The leaderboard is corpus_eval.py's.
Ray is imported only when --ray is given (the `porter[ray]` extra). Does not start or manage the cluster: each
node joins it with `ray start` (README); provider keys come from the environment `ray start` ran in.
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from porter.evaluate.corpus_eval import (
    REPLAY,
    Entry,
    discover,
    new_out_dir,
    pairs,
    replay_one,
    run_one,
    source_task,
    write_leaderboard,
)
from porter.evaluate.ray_cluster import CellResources, Cluster, RayEvalError, connect, fits, node_names
from porter.sandbox import make_sandbox
from porter.task import load_task

MAX_ARCHIVE_BYTES = 256 * 2**20  # one object in the cluster's store; a twin run is well under 1 MiB
SHED_ORDER = ("repos", "root", "logs")  # what stays on the node, in this order, when a run is too big to ship
ATTEMPTS = 2  # a cell whose worker or node died runs once more
CANCEL_GRACE_S = 60.0  # a cancelled cell stops its container before it ends
PROGRESS_EVERY_S = 15.0  # also how soon a cell whose only nodes died is failed
CELL_PREFIX = "porter-eval"
WATCHDOG_DONE = b"done"


class Interrupted(Exception):
    """Ctrl-C: the cells were cancelled; the message names the folder holding the leaderboard of what finished."""

    def __init__(self, out_dir: Path):
        super().__init__(f"interrupted: the cells still running were cancelled; partial leaderboard in {out_dir}")


@dataclass
class Cell:
    name: str  # the task's name, or the recording's folder name
    agent: str  # a provider, or "replay"
    files: dict[str, bytes]  # task.yaml (and transcript.jsonl for a recording), written on the node
    resources: CellResources

    @property
    def label(self) -> str:
        return f"{self.name} x {self.agent}"


def plan(
    corpus: str | Path, models: list[str] | None, resources: dict[str, float], trusted: bool = False
) -> list[Cell]:
    """The cells (evaluate.pairs), each asking for `resources` or, when none are named, the task's GPUs on one
    node. A replay ships the recording's transcript; a live run ships the task alone. A recording's host side is
    refused here unless `trusted` (source_task), so a node replays only what the driver let through."""
    tasks, recordings, _engines = discover(Path(corpus))  # corpus.yaml engines are for local eval; a node has one
    cells = []
    for source, model in pairs(tasks, recordings, models):
        task = source_task(source, trusted)
        wanted = CellResources.of(resources or {"GPU": task.hardware.count})
        if model == REPLAY:
            files = {name: (source / name).read_bytes() for name in ("task.yaml", "transcript.jsonl")}
            cells.append(Cell(source.name, model, files, wanted))
        else:
            text = yaml.safe_dump(task.model_dump(mode="json"), sort_keys=False).encode()
            cells.append(Cell(task.name, model, {"task.yaml": text}, wanted))
    return cells


def run_cell(cell: Cell) -> dict:
    """On a worker node: run the cell in a temporary folder; its entry, packed run directory and node."""
    node = socket.gethostname()
    work = Path(tempfile.mkdtemp(prefix="porter-cell-"))
    watchdog = _start_watchdog(work)
    try:
        source = work / cell.name
        source.mkdir()
        for name, data in cell.files.items():
            (source / name).write_bytes(data)
        if cell.agent == REPLAY:
            entry = replay_one(source, work / "runs", trusted=True)  # plan refused an untrusted host side
        else:
            entry = run_one(source / "task.yaml", cell.agent, None, work / "runs")
        archive, left = pack(Path(entry.run_dir)) if entry.run_dir else (b"", [])
    except BaseException:
        # Cancelled (KeyboardInterrupt) or broken, possibly between a container's start and the code that
        # would stop it: the watchdog reaps whatever the folder's runs left, then the folder.
        watchdog.stdin.close()
        raise
    if left:
        entry.note = f"{entry.note}; {', '.join(left)} left on {node} in {entry.run_dir} (too big to ship)"
    else:
        shutil.rmtree(work, ignore_errors=True)
    watchdog.communicate(WATCHDOG_DONE)
    return {"entry": asdict(entry), "archive": archive, "node": node}


def _start_watchdog(work: Path) -> subprocess.Popen:
    """A process that reaps the cell unless told it is done: its worker died (killed, out of memory) or the cell
    was cancelled or raised. Without it the cell's container would run on, holding the node's GPUs, while the
    retry starts another. It runs in a session of its own because Ray kills a dead worker's process group; it
    learns of the end from its stdin closing, with or without WATCHDOG_DONE."""
    command = [sys.executable, "-m", "porter.evaluate.eval_ray", str(work)]
    watchdog = subprocess.Popen(command, stdin=subprocess.PIPE, start_new_session=True)
    watchdog.wait()  # it forks and exits at once (see __main__); its child holds the pipe
    return watchdog


def reap(work: Path) -> None:
    """Stop and remove the sandboxes of the cell folder `work` (one per run directory), then the folder."""
    task_file = next(work.glob("*/task.yaml"), None)
    runs = work / "runs"
    for run_dir in sorted(runs.iterdir()) if task_file and runs.is_dir() else []:
        try:
            make_sandbox(load_task(task_file), run_dir, run_dir.name).stop(remove=True)  # the run id names the dir
        except Exception as exc:  # noqa: BLE001 - best effort on a dead worker's leftovers; say what stays
            print(f"porter: cannot remove the sandbox of {run_dir}: {exc}", file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)


def pack(run_dir: Path) -> tuple[bytes, list[str]]:
    """The run directory as a gzip tar under MAX_ARCHIVE_BYTES, and the top-level folders left out to fit."""
    left: list[str] = []
    for shed in [None, *SHED_ORDER]:
        if shed:
            left.append(f"{shed}/")
        buffer = io.BytesIO()
        skipped = {f"{run_dir.name}/{name.rstrip('/')}" for name in left}
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            tar.add(run_dir, arcname=run_dir.name, filter=lambda info, skipped=skipped: _keep(info, skipped))
        if buffer.tell() <= MAX_ARCHIVE_BYTES:
            return buffer.getvalue(), left
    return b"", ["the whole run directory"]


def _keep(info: tarfile.TarInfo, skipped: set[str]) -> tarfile.TarInfo | None:
    if info.issym() and info.linkname.startswith("/"):
        return None  # the model overlay's links to the node's weights: nothing on the driver to point at
    return None if any(info.name == s or info.name.startswith(f"{s}/") for s in skipped) else info


def unpack(archive: bytes, runs_dir: Path) -> Path:
    """Extract one run directory under `runs_dir` (a name already there gets `-2`, ...); its local path."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        top = tar.getnames()[0].split("/", 1)[0]
        staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=runs_dir))
        tar.extractall(staging, filter="data")  # the data filter refuses absolute paths, links out and devices
    target, suffix = runs_dir / top, 1
    while target.exists():
        suffix += 1
        target = runs_dir / f"{top}-{suffix}"
    (staging / top).rename(target)
    staging.rmdir()
    return target


class Matrix:
    """Submits the cells, collects them as they end, resubmits once on a lost worker or node, cancels on Ctrl-C."""

    def __init__(self, cluster: Cluster, cells: list[Cell], runs_dir: Path, echo):
        self.cluster, self.cells, self.runs_dir, self.echo = cluster, cells, runs_dir, echo
        self.pending: dict = {}  # ObjectRef -> (cell index, attempt)
        self.entries: list[Entry | None] = [None] * len(cells)
        self.failures: list[list[str]] = [[] for _ in cells]
        self.finished_on: Counter[str] = Counter()

    def run(self) -> list[Entry]:
        for index in range(len(self.cells)):
            self._submit(index, attempt=1)
        while self.pending:
            ready = self.cluster.wait(list(self.pending), PROGRESS_EVERY_S)
            for ref in ready:
                self._collect(ref)
            if not ready:
                self._fail_unplaceable()
                self.echo(f"porter eval: {self._progress(with_running=True)}")
        return [entry for entry in self.entries if entry is not None]

    def cancel(self) -> list[Entry]:
        """Cancel what is still pending, give running cells CANCEL_GRACE_S to stop their sandbox, then force;
        a cell that still came back keeps its row and run directory."""
        self.echo(f"porter eval: cancelling {len(self.pending)} cell(s)")
        ended = self.cluster.cancel(list(self.pending), CANCEL_GRACE_S)
        for ref, (index, _attempt) in self.pending.items():
            outcome = self.cluster.result(ref) if ref in ended else None
            if outcome is not None and not outcome.error:
                self.entries[index] = self._received(index, outcome.value)
                self.entries[index].note += "; interrupted (Ctrl-C)"
            else:
                self.entries[index] = self._failed(index, "cancelled (Ctrl-C)")
        self.pending.clear()
        return [entry for entry in self.entries if entry is not None]

    def _submit(self, index: int, attempt: int) -> None:
        cell = self.cells[index]
        ref = self.cluster.submit(run_cell, cell, f"{CELL_PREFIX}: {cell.label}", cell.resources)
        self.pending[ref] = (index, attempt)

    def _collect(self, ref) -> None:
        index, attempt = self.pending.pop(ref)
        outcome = self.cluster.result(ref)
        cell = self.cells[index]
        if outcome.error:
            self.failures[index].append(f"attempt {attempt}: {outcome.error}")
        if outcome.lost and attempt < ATTEMPTS:
            if fits(self.cluster.nodes(), cell.resources):  # Ray places it on a live node: not the dead one
                self.echo(f"porter eval: {cell.label}: {outcome.error}; submitting it again")
                self._submit(index, attempt + 1)
                return
            self.failures[index].append(f"no live node offers {cell.resources} for attempt {attempt + 1}")
        if outcome.error:
            self.entries[index] = self._failed(index, "failed: " + "; ".join(self.failures[index]))
        else:
            self.entries[index] = self._received(index, outcome.value)
        self._report(cell, self.entries[index])

    def _fail_unplaceable(self) -> None:
        """Cells still waiting for a resource that no live node offers any more (its nodes died) fail now."""
        nodes = self.cluster.nodes()
        stuck = {ref: place for ref, place in self.pending.items() if not fits(nodes, self.cells[place[0]].resources)}
        if stuck:
            self.cluster.cancel(list(stuck), grace_s=0)
        for ref, (index, attempt) in stuck.items():
            del self.pending[ref]
            cell = self.cells[index]
            self.failures[index].append(f"attempt {attempt}: no live node offers {cell.resources} any more")
            self.entries[index] = self._failed(index, "failed: " + "; ".join(self.failures[index]))
            self._report(cell, self.entries[index])

    def _report(self, cell: Cell, entry: Entry) -> None:
        done = sum(entry is not None for entry in self.entries)
        verdict = entry.note if not entry.run_dir and not entry.solved else entry.outcome
        self.echo(f"[{done}/{len(self.cells)}] {cell.label}: {verdict} | {self._progress()}")

    def _received(self, index: int, result: dict) -> Entry:
        entry = Entry(**result["entry"])
        self.finished_on[result["node"]] += 1
        if result["archive"]:
            entry.run_dir = str(unpack(result["archive"], self.runs_dir))
        parts = [entry.note, f"ran on {result['node']}"]
        if self.failures[index]:
            parts.append("ran again after " + "; ".join(self.failures[index]))
        entry.note = "; ".join(part for part in parts if part)
        return entry

    def _failed(self, index: int, note: str) -> Entry:
        return Entry(self.cells[index].name, self.cells[index].agent, note=note)

    def _progress(self, with_running: bool = False) -> str:
        finished = ", ".join(f"{node} {count}" for node, count in sorted(self.finished_on.items())) or "none yet"
        line = f"finished per node: {finished} | not finished: {len(self.pending)}"
        if with_running:  # the state API lags a second or so behind, so only on the quiet periodic line
            running = self.cluster.running_per_node(CELL_PREFIX)
            line += " | running per node: " + (", ".join(f"{n} {c}" for n, c in sorted(running.items())) or "?")
        return line


def evaluate_on_ray(
    corpus: str | Path,
    models: list[str] | None,
    address: str,
    resources: dict[str, float],
    out_root="evals",
    echo=print,
    trusted: bool = False,
) -> Path:
    """Run the eval's cells on the Ray cluster at `address`; the folder holding leaderboard.md/.json."""
    cells = plan(corpus, models, resources, trusted)
    with connect(address) as cluster:
        for cell in cells:
            if not fits(cluster.nodes(), cell.resources):
                raise RayEvalError(
                    f"no live node of the Ray cluster at {address} offers {cell.resources} (for {cell.label}); "
                    f"the nodes offer {node_names(cluster.nodes())}; name a resource with --ray-resource NAME=AMOUNT"
                )
        out_dir = new_out_dir(out_root)
        matrix = Matrix(cluster, cells, out_dir / "runs", echo)
        try:
            entries = matrix.run()
        except KeyboardInterrupt:
            write_leaderboard(out_dir, matrix.cancel())
            raise Interrupted(out_dir) from None
    write_leaderboard(out_dir, entries)
    return out_dir


if __name__ == "__main__":  # the watchdog of one cell (see _start_watchdog)
    # A worker that exits kills its direct children (RAY_kill_child_processes_on_worker_exit), which would
    # take the watchdog with it before it reaps: the forked child is no child of the worker.
    if os.fork() == 0 and sys.stdin.buffer.read() != WATCHDOG_DONE:
        reap(Path(sys.argv[1]))
