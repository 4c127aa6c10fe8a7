"""DockerSandbox: one long-lived container per run, driven through the docker SDK.

Covers building or finding the image, copying the task's repos out of it into host git trees that
are bind-mounted back, creating/reusing/restarting the labelled container, `exec` (each command in
its own session so a timeout kills its whole process group inside the container), `spawn` (a
background process whose output streams to a host file), the host endpoint of a served port, and
detecting a dead container. Does not cover what the options are (docker_options.py), file access (the run's
guard.PathGuard over the host trees) or how git history is made of patches (porter/sandbox/trees/tracked.py).

Commands run as `bash -c`, not `bash -lc`: a login shell sources /etc/profile, which on Debian
resets PATH and would hide the image's own PATH (ROCm, conda) that the serving engine needs.
"""

from __future__ import annotations

import logging
import os
import re
import time
import uuid
from pathlib import Path

import docker
import docker.errors

from porter.sandbox.docker_options import (
    MANAGED_LABEL,
    OWNER_PID,
    check_host_resources,
    container_options,
    image_name,
    internal_network,
    owner_alive,
    owner_labels,
    repo_host_dir,
)
from porter.sandbox.docker_process import DockerProcess
from porter.sandbox.host_firewall import close_host_listeners
from porter.sandbox.interface import (
    DEFAULT_OUTPUT_LIMIT,
    ExecResult,
    OutputCapture,
    SandboxDied,
    SandboxError,
    refuse_secrets,
)
from porter.sandbox.trees.baseline import ensure_baseline, extract_tree
from porter.sandbox.trees.overlay import WEIGHTS_MOUNT, build_from_dir, build_from_tar
from porter.sandbox.write_watch import WriteWatch
from porter.task import OVERLAY_REPO, Task

logger = logging.getLogger(__name__)

# $1 pgid file, $2 workdir, $3 the command. Runs as the leader of a new session (setsid), so its
# pid is the group id every child inherits, and killing "-pgid" takes the whole tree. The leader
# outlives a TERM (a no-op handler, reset in children) so it reports the command's 143, not
# setsid's "did not exit normally".
_SESSION_SCRIPT = (
    'mkdir -p "${1%/*}" && echo $$ > "$1" || exit 125; cd -- "$2" || exit 125; trap : TERM INT HUP; '
    'bash -c "$3"; status=$?; rm -f "$1"; exit $status'
)
# What setsid -w prints, and exits with the signal's number, when the session's leader itself was killed (only KILL
# reaches it: the write cap's watchdog, a timeout): reported as the shell would, 128 + the signal.
_LEADER_KILLED = re.compile(r"(?:^|\n)setsid: child \d+ did not exit normally[^\n]*\n?\Z")
_KILL_SCRIPT = 'pgid=$(cat "$1" 2>/dev/null) && kill -s "$2" -- "-$pgid" 2>/dev/null'


def connect(task: Task) -> docker.DockerClient:
    """A client for the task's engine (sandbox.docker_host, else the environment's DOCKER_HOST or socket)."""
    try:
        if task.sandbox.docker_host:
            return docker.DockerClient(base_url=task.sandbox.docker_host)
        return docker.from_env()
    except docker.errors.DockerException as exc:
        where = task.sandbox.docker_host or "the local socket (DOCKER_HOST)"
        raise SandboxError(f"cannot reach the Docker engine at {where}: {exc}") from None


class DockerSandbox:
    """The task's sandbox as a docker container labelled with the run id."""

    def __init__(self, task: Task, run_dir: Path, run_id: str, client: docker.DockerClient | None = None):
        self.task = task
        self.run_dir = Path(run_dir).resolve()
        self.run_id = run_id
        self.client = client or connect(task)
        self.container = None
        self.watch: WriteWatch | None = None  # the cap on what it writes (write_watch.py)
        self.exec_log = self.run_dir / "logs" / "exec.log"
        self.output_limit = DEFAULT_OUTPUT_LIMIT  # bytes of output an ExecResult keeps (head + tail)
        # Owned by this process (labelled with its pid); the manual sandbox, shared by CLI calls, is not.
        self.owned = True

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Create the container, or reuse the run's existing one; start it if it is stopped."""
        if self.container is not None:
            try:
                self.container.reload()
            except docker.errors.NotFound:
                self.container = None  # removed from outside (prune, docker rm): make a new one
        if self.container is None:
            self.container = self._find_own() or self._create()
        if self.container.status != "running":
            close_host_listeners(self.client, self.task, self._helper_labels())
            self.container.start()
            self._drop_default_route()
            self.container.reload()
        if self.task.sandbox.max_written and (self.watch is None or self.watch.stopped.is_set()):
            self.watch = WriteWatch(self.client, self.container, self.task, self.run_dir)

    def stop(self, remove: bool = False) -> None:
        if self.watch is not None:
            self.watch.stop()
        container = self.container or self._find()
        if container is None:
            return
        try:
            if remove:
                container.remove(force=True)
            else:
                container.stop(timeout=5)
        except docker.errors.NotFound:
            pass  # already removed (prune, or another handle on the same run): nothing left to stop
        if remove:
            self.container = None

    def start_probe(self) -> None:
        """A container of the task's image for questions only (`porter preflight`): the task's devices, env and its
        own mounts, the weights read-only; no repo copies, no scratch and no network. stop(remove=True) ends it."""
        self._ensure_image()
        options = container_options(self.task, self.run_id, self.run_dir, owned=False)
        own = {mount.container for mount in self.task.sandbox.mounts}
        wanted = [m for m in options["mounts"] if m["ReadOnly"] or m["Target"] in own]
        options["mounts"] = [m for m in wanted if Path(m["Source"]).exists()]  # a missing source is its own finding
        options["devices"] = [rule for rule in options["devices"] if Path(rule.split(":", 1)[0]).exists()]
        for key in ("network", "ports", "name"):
            options.pop(key, None)
        options["network_mode"] = "none"
        try:
            self.container = self.client.containers.run(**options)
        except docker.errors.APIError as exc:
            raise SandboxError(f"docker refused a container of {options['image']}: {exc.explanation}") from None

    def restart(self) -> None:
        """Recreate the container from the image with the same mounts; the repos live on the host."""
        self.stop(remove=True)
        self.start()

    def _find_own(self):
        """The run's container, unless an earlier porter process owns it: that one is recreated (the repos live
        on the host), so its labels name the live owner and `porter sandbox prune` spares it."""
        found = self._find()
        if found is None or not self.owned or found.labels.get(OWNER_PID) == str(os.getpid()):
            return found
        if owner_alive(found.labels):
            raise SandboxError(
                f"the sandbox {found.name} of run {self.run_id} belongs to another live porter process "
                f"(pid {found.labels.get(OWNER_PID)}); one run directory takes one porter at a time"
            )
        found.remove(force=True)
        return None

    def _find(self):
        filters = {"label": [f"porter.run={self.run_id}", f"porter.task={self.task.name}", f"{MANAGED_LABEL}=1"]}
        found = self.client.containers.list(all=True, filters=filters)
        return found[0] if found else None

    def _create(self):
        if not self.task.sandbox.docker_host:
            check_host_resources(self.task)
        image = self._ensure_image()
        self._prepare_repos(image)
        (self.run_dir / "scratch").mkdir(parents=True, exist_ok=True)
        if self.task.sandbox.network == "none":
            self._ensure_internal_network()
        try:
            return self.client.containers.create(**container_options(self.task, self.run_id, self.run_dir, self.owned))
        except docker.errors.APIError as exc:
            raise SandboxError(
                f"docker refused to create the sandbox of {self.task.name!r}: {exc.explanation}"
            ) from None

    def _ensure_image(self) -> str:
        name = image_name(self.task)
        spec = self.task.sandbox
        if spec.dockerfile:
            context = spec.context or str(Path(spec.dockerfile).parent)
            logger.info("building %s from %s", name, spec.dockerfile)
            try:
                self.client.images.build(
                    path=context,
                    dockerfile=spec.dockerfile,
                    tag=name,
                    buildargs=spec.build_args,
                    labels={MANAGED_LABEL: "1", "porter.task": self.task.name},
                    rm=True,
                    pull=False,
                )
            except docker.errors.BuildError as exc:
                lines = [str(item.get("stream") or item.get("error") or "").rstrip() for item in exc.build_log]
                tail = "\n".join(line for line in lines if line)[-3000:]
                raise SandboxError(f"building {name} from {spec.dockerfile} failed: {exc.msg}\n{tail}") from None
            return name
        try:
            self.client.images.get(name)
        except docker.errors.ImageNotFound:
            raise SandboxError(
                f"image {name} not found locally; porter never pulls: `docker pull {name}` (or build/load it) "
                f"on the engine first, or give the task a sandbox.dockerfile"
            ) from None
        return name

    def _prepare_repos(self, image: str) -> None:
        """Copy each declared repo out of the image once; later starts reuse the host tree (and its patches).

        The model overlay is built once too: from the host weights directory, or from the image's copy.
        """
        missing = [repo for repo in self.task.repos if not repo_host_dir(self.run_dir, repo.name).exists()]
        overlay = repo_host_dir(self.run_dir, OVERLAY_REPO)
        model = self.task.model
        if model.overlay and not model.in_image and not overlay.exists():
            build_from_dir(Path(model.path), overlay, link_base=WEIGHTS_MOUNT)
        from_image = model.overlay and model.in_image and not overlay.exists()
        if missing or from_image:
            helper = self.client.containers.create(image, entrypoint=["true"], labels=self._helper_labels())
            try:
                for repo in missing:
                    chunks = _archive(helper, image, repo.path, f"repo {repo.name!r}")
                    extract_tree(chunks, repo_host_dir(self.run_dir, repo.name))
                if from_image:
                    build_from_tar(_archive(helper, image, model.path, "model.path"), overlay, link_base=model.path)
            finally:
                helper.remove(force=True)
        for repo in self.task.repos:
            ensure_baseline(repo_host_dir(self.run_dir, repo.name))

    def _helper_labels(self) -> dict[str, str]:
        return {MANAGED_LABEL: "1", "porter.run": self.run_id, **owner_labels()}

    def _ensure_internal_network(self) -> None:
        name = internal_network(self.task)
        if not self._internal_networks(name):
            try:
                self.client.networks.create(
                    name,
                    driver="bridge",
                    internal=True,
                    check_duplicate=True,
                    options={"com.docker.network.bridge.enable_icc": "false"},
                    labels={MANAGED_LABEL: "1"},
                )
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # another sandbox created it first: fine
                    raise SandboxError(f"cannot create the network {name}: {exc.explanation}") from None
        # Docker ignores check_duplicate since API 1.44: porters starting together can each create one, and the
        # name is then ambiguous to every container start. All keep the same one (in use, else the oldest) and
        # remove the others, before any sandbox joins them.
        for extra in self._internal_networks(name)[1:]:
            try:
                extra.remove()
            except docker.errors.APIError:
                pass  # removed by the other porter meanwhile

    def _internal_networks(self, name: str) -> list:
        # `names` filters by substring: the exact name is kept
        networks = [n for n in self.client.networks.list(names=[name], greedy=True) if n.name == name]
        return sorted(networks, key=lambda n: (not n.attrs.get("Containers"), n.attrs.get("Created", ""), n.id))

    def _drop_default_route(self) -> None:
        """Docker gives containers on internal networks a default route (traffic is dropped, the route stays).

        Removing it needs NET_ADMIN, which the sandbox must not have: a throwaway container of the
        same image joins the sandbox's network namespace with NET_ADMIN and deletes it. Repeated on
        every start because docker re-adds it.
        """
        if self.task.sandbox.network != "none":
            return
        script = "ip route del default 2>/dev/null; ! ip route show default | grep -q ."
        try:
            self.client.containers.run(
                self.container.image.id,
                entrypoint=["sh", "-c", script],
                network_mode=f"container:{self.container.id}",
                cap_add=["NET_ADMIN"],
                remove=True,
                labels=self._helper_labels(),
            )
        except docker.errors.ContainerError as exc:
            raise SandboxError(
                f"cannot remove the default route of the sandbox (network none) with `ip` from its image: "
                f"{exc.stderr.decode(errors='replace').strip() if exc.stderr else exc}; the image needs iproute2"
            ) from None

    # ------------------------------------------------------------------ commands

    def exec(self, cmd: str, timeout: float, workdir: str | None = None) -> ExecResult:
        workdir = workdir or self.task.sandbox.workdir
        exec_id, stream, pgid_file = self._start_session(cmd, workdir)
        title = f"exec (timeout {timeout:g}s, workdir {workdir}): {cmd}"
        capture = OutputCapture(self.exec_log, title, self.output_limit)
        result = capture.run(
            stream, timeout, lambda: self.signal_group(pgid_file, "KILL"), lambda: self._exit_code(exec_id)
        )
        if 0 < result.exit_code < 128 and _LEADER_KILLED.search(result.output):
            result.output = _LEADER_KILLED.sub("", result.output)
            result.exit_code = result.exit_code if result.timed_out else 128 + result.exit_code  # a timeout reads 124
        if self.watch is not None and self.watch.notice:  # the cap on writes was hit: said once, where it is read
            result.output, self.watch.notice = f"{result.output}\n{self.watch.notice}", ""
        return result

    def spawn(self, cmd: str, log_path: Path, env: dict[str, str] | None = None) -> DockerProcess:
        refuse_secrets(env or {}, self.task)
        exec_id, stream, pgid_file = self._start_session(cmd, self.task.sandbox.workdir, env)
        return DockerProcess(self, exec_id, stream, Path(log_path), pgid_file)

    def kill_recorded(self, record: dict) -> bool:
        """KILL a group an earlier porter spawned in this run's container (its pgid file is still there)."""
        pgid_file = record.get("pgid_file")
        if record.get("sandbox") != "docker" or record.get("container") != self.run_id or not pgid_file:
            return False
        if self.container is None:
            self.start()
        if not self.signal_group(str(pgid_file), "KILL"):
            return False
        # The session's leader dies with its group, so the pgid file stays: wait for the group itself to go.
        wait = 'pgid=$(cat "$1") && for i in $(seq 100); do kill -0 -- "-$pgid" 2>/dev/null || exit 0; sleep 0.1; done'
        self.container.exec_run(["sh", "-c", wait, "porter-wait", str(pgid_file)])
        self.container.exec_run(["rm", "-f", str(pgid_file)])
        return True

    def _start_session(self, cmd: str, workdir: str, env: dict[str, str] | None = None) -> tuple[str, object, str]:
        """(exec id, output stream, pgid file) of `cmd` started in a session of its own (_SESSION_SCRIPT)."""
        if self.container is None:
            self.start()
        pgid_file = f"/tmp/porter/{uuid.uuid4().hex}.pgid"
        argv = ["setsid", "-w", "bash", "-c", _SESSION_SCRIPT, "porter-session", pgid_file, workdir, cmd]
        try:
            exec_id = self.client.api.exec_create(self.container.id, argv, environment=env)["Id"]
        except docker.errors.NotFound:
            raise self._died("the sandbox container is gone") from None
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # "container ... is not running"
                raise self._died("the sandbox container is not running") from None
            raise SandboxError(f"docker exec failed: {exc.explanation}") from None
        return exec_id, self.client.api.exec_start(exec_id, stream=True), pgid_file

    def _exit_code(self, exec_id: str) -> int | None:
        """The exit code docker recorded; one that may be the container's death (none, or a signal's) is checked."""
        for _ in range(20):  # the output stream can close a moment before docker records the exit: give it a second
            info = self.client.api.exec_inspect(exec_id)
            if not info["Running"]:
                break
            time.sleep(0.05)
        if info["ExitCode"] is None or info["ExitCode"] >= 128:
            self._check_alive()
        return info["ExitCode"]

    def signal_group(self, pgid_file: str, signal: str) -> bool:
        """Send `signal` to the group recorded in `pgid_file`; False when it is not recorded (yet) or gone."""
        try:
            return self.container.exec_run(["sh", "-c", _KILL_SCRIPT, "porter-kill", pgid_file, signal]).exit_code == 0
        except docker.errors.APIError:
            return False  # the container is gone, and the group with it

    def _check_alive(self) -> None:
        try:
            self.container.reload()
        except docker.errors.NotFound:
            raise self._died("the sandbox container was removed") from None
        if self.container.status != "running":
            raise self._died("the sandbox container stopped")

    def _died(self, what: str) -> SandboxDied:
        lines: list[str] = []
        state = "removed"
        try:
            self.container.reload()
            info = self.container.attrs["State"]
            state = f"{info['Status']}, exit code {info['ExitCode']}, OOM killed {info['OOMKilled']}"
            lines = self.container.logs(tail=40).decode(errors="replace").splitlines()
        except docker.errors.NotFound:
            pass
        name = self.container.name if self.container is not None else self.run_id
        return SandboxDied(f"{what}: {name} ({state}); the repos and the pending change live on the host", lines)

    # ------------------------------------------------------------------ files and addresses

    def repo_dir(self, name: str) -> Path:
        try:
            return repo_host_dir(self.run_dir, self.task.repo(name).name)
        except KeyError as exc:
            raise SandboxError(exc.args[0]) from None

    def describe(self) -> dict:
        """What a run records about its sandbox, so a replay can tell what changed."""
        if self.container is None:
            self.start()
        return {
            "kind": "docker",
            "image": image_name(self.task),
            "image_id": self.container.image.id,
            "container": self.container.name,
            "network": self.task.sandbox.network,
            "docker_host": self.task.sandbox.docker_host or "local",
        }

    def endpoint(self, port: int) -> str:
        network = self.task.sandbox.network
        if network == "host":
            return f"http://127.0.0.1:{port}"
        if self.container is None:
            self.start()
        self.container.reload()
        settings = self.container.attrs["NetworkSettings"]
        published = (settings.get("Ports") or {}).get(f"{port}/tcp")
        if published:
            return f"http://127.0.0.1:{published[0]['HostPort']}"
        network_name = internal_network(self.task) if network == "none" else "bridge"
        address = settings["Networks"][network_name]["IPAddress"]
        return f"http://{address}:{port}"


def _archive(helper, image: str, path: str, what: str):
    """Tar stream of `path` in a (created, not started) container of the image."""
    try:
        return helper.get_archive(path)[0]
    except docker.errors.NotFound:
        raise SandboxError(f"{what}: {path} does not exist in image {image}") from None
