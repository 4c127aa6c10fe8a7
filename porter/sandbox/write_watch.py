"""The cap on what a docker sandbox writes: the bytes its writable places hold, at most `sandbox.max_written` more
than when it started.

Docker caps a container's own layer only on overlay2 over xfs mounted with pquota (`--storage-opt size=`; refused
on ext4) and cannot cap a bind mount at all, and the sandbox writes to both: the scratch, the repo trees and the
task's writable mounts are host folders. So a thread watches: every TICK_S it reads the free space of the
filesystems holding them (one statvfs each), and only when that fell by the room left does it count what the
sandbox holds (the daemon's SizeRw of the container, the blocks of those folders, the repos' .git left out: it is
porter's). Past the cap it kills every process in the container but its init and idle process (the writer, the
server too), and leaves one line for the next command's output; the container and the run go on. Nothing written
is deleted: that is the agent's to do.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import docker.errors
from docker.utils import parse_bytes

from porter.sandbox.docker_options import repo_host_dir
from porter.task import Task

logger = logging.getLogger(__name__)

TICK_S = 0.25
# Every process but PID 1 (docker's init), its children (the idle `sleep infinity`) and this shell: exec'd
# commands are not the init's children, however they detach.
_KILL_ALL = (
    'keep=" 1 $$ $(cat /proc/1/task/1/children) "; for p in /proc/[0-9]*; do n=${p#/proc/}; '
    'case "$keep" in *" $n "*) ;; *) kill -KILL "$n" 2>/dev/null;; esac; done; true'
)


class WriteWatch:
    """A daemon thread holding a started sandbox's writable places under the task's cap over what they held at
    start: its scratch, repo trees and writable mounts, and its own layer."""

    def __init__(self, client: docker.DockerClient, container, task: Task, run_dir: Path):
        spec = task.sandbox
        self.client, self.container, self.limit = client, container, parse_bytes(spec.max_written or "0")
        repos = [repo_host_dir(run_dir, repo.name) for repo in task.patchable_repos()]
        mounts = [Path(mount.host) for mount in spec.mounts if not mount.read_only]
        self.folders = [run_dir / "scratch", *repos, *mounts]
        self.skipped = {str(repo / ".git") for repo in repos}
        # The container's layer lies under the daemon's root: on this host's disks only with a local daemon.
        layer = [] if spec.docker_host else [Path(client.info()["DockerRootDir"])]
        self.devices = {os.stat(path).st_dev: path for path in [*self.folders, *layer] if path.exists()}
        self.notice, self.stopped = "", threading.Event()
        self.baseline, self.trigger = self.held(), self.free() - self.limit
        threading.Thread(target=self._watch, daemon=True).start()

    def stop(self) -> None:
        self.stopped.set()

    def free(self) -> int:
        return sum(stat.f_bavail * stat.f_frsize for stat in map(os.statvfs, self.devices.values()))

    def held(self) -> int:
        listed = self.client.api.containers(all=True, size=True, filters={"id": self.container.id})
        return (listed[0].get("SizeRw") or 0 if listed else 0) + sum(self._blocks(folder) for folder in self.folders)

    def _blocks(self, folder: Path) -> int:
        total, pending = 0, [str(folder)]
        while pending:
            try:
                with os.scandir(pending.pop()) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            pending += [] if entry.path in self.skipped else [entry.path]
                        else:
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                continue  # removed meanwhile
        return total

    def _watch(self) -> None:
        while not self.stopped.wait(TICK_S):
            try:
                if self.free() > self.trigger:
                    continue  # the disks lost less than the room left: the sandbox cannot have written past it
                written = self.held() - self.baseline
                if written > self.limit:
                    self._stop_writers(written)
                    written = 0
                self.trigger = self.free() - (self.limit - max(written, 0))
            except (docker.errors.APIError, OSError):
                return  # the container is gone: nothing writes any more

    def _stop_writers(self, written: int) -> None:
        self.notice = (
            f"[porter: the sandbox wrote {written:,} bytes to its writable places, over sandbox.max_written "
            f"({self.limit:,}): every process in it was killed (the server too); delete what is not needed]"
        )
        logger.warning("%s", self.notice)
        self.container.exec_run(["sh", "-c", _KILL_ALL])
        self.baseline = self.held()  # what stays written is the agent's to delete; the cap counts from here
