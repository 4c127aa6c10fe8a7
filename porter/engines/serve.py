"""Launch the task's serve command in the sandbox and wait until it is healthy, dead or too slow.

Covers rendering the command from the task's template and the current flags, spelled for the engine release installed
in the sandbox (read from its package's metadata at each launch), refusing to launch onto a port something already
listens on, spawning it with its log streamed to `logs/` (its process record handed to the caller at once, so a kill
of porter never loses track of it), polling health from the host, the health identity (the spawned process is alive
and the server answering is the one it runs, by served model id), killing a server an earlier porter left behind, and
turning every way a start can end (healthy, exited, hung) into one `Launch` result with the triage of its log. Does
not decide what to do about a crash (the agent does) and does not measure anything but start-up time.
"""

from __future__ import annotations

import json
import re
import shlex
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from porter.engines.engine import Engine, FlagRefused, release
from porter.sandbox import Process, Sandbox, SandboxError
from porter.schema import serve_env
from porter.task import FlagValue, Task, render_flags
from porter.triage import Triage, triage_file

POLL_INTERVAL_S = 0.5
PROBE_TIMEOUT_S = 2.0  # connect + answer deadline of one health or identity probe
PROBE_MAX_BYTES = 1 << 20  # a /v1/models answer larger than this is not a model listing
VERSION_TIMEOUT_S = 30
PORT_FREE_WAIT_S = 10.0  # how long a killed leftover may take to let go of the port


class ServerConflict(SandboxError):
    """The port is held by a process porter did not start, or what answers there is not the spawned server."""


@dataclass
class Launch:
    healthy: bool
    seconds: float
    log_path: Path
    triage: Triage | None = None  # always set: the crash, or the warnings of a healthy start
    process: Process | None = field(default=None, repr=False)

    @property
    def crash_class(self) -> str | None:
        return None if self.healthy else (self.triage.category if self.triage else "other")


def render_command(task: Task, flags: dict[str, FlagValue], version: str | None = None) -> str:
    """The serve command for these flags, spelled as engine release `version` spells them (None: as the task writes
    them); the template's {placeholders} are the task's own values. FlagRefused: a flag that release does not have."""
    values = {
        "model_path": shlex.quote(task.model.container_path),
        "host": task.serve.host,
        "port": str(task.serve.port),
        "flags": shlex.join(render_flags(task.engine.spelled_for(version, flags))),
    }
    try:
        return task.serve.command.format(**values).strip()
    except (KeyError, IndexError) as exc:
        raise ValueError(f"serve.command uses an unknown placeholder {exc}; known: {sorted(values)}") from None


def command_words(task: Task, flags: dict[str, FlagValue], version: str | None = None) -> list[str]:
    """The serve command's words without a leading `exec` or VAR=value (the shell's business, not the engine's)."""
    words = shlex.split(render_command(task, flags, version))
    while words and (words[0] == "exec" or ("=" in words[0] and not words[0].startswith("-"))):
        words.pop(0)
    return words


def launcher(words: list[str]) -> tuple[str | None, list[str]]:
    """A shell template running Python code ({code}, argument {data}) with the interpreter of the serve command's
    launcher (`python3 -m MODULE`, or a console script's #! line), and the launcher's words."""
    if len(words) >= 3 and Path(words[0]).name.startswith("python") and words[1] == "-m":
        return f"{shlex.quote(words[0])} -c {{code}} {{data}} -m {shlex.quote(words[2])}", words[:3]
    if words and "/" not in words[0]:
        script = f'"$(command -v {shlex.quote(words[0])})"'
        interpreter = f"$(sed -n '1s/^#! *//p' {script})"
        return f"{interpreter} -c {{code}} {{data}} --script {script}", words[:1]
    return None, words[:1]


def installed_version(sandbox: Sandbox, task: Task) -> str | None:
    """The release of the package the serve command launches (`sglang` of sglang.launch_server, the `vllm` script),
    read from its metadata by the launcher's interpreter, nothing imported; None when that package is not the task's
    engine (the twin's `twin`) or has no metadata."""
    template, words = launcher(command_words(task, {}))
    package = Path(words[2].split(".")[0] if len(words) == 3 else words[0]).name
    if template is None or package != task.engine.name:
        return None
    read = "import importlib.metadata as m, sys\ntry: print(m.version(sys.argv[1]))\nexcept Exception: pass"
    found = sandbox.exec(template.format(code=shlex.quote(read), data=package), VERSION_TIMEOUT_S).output.split()
    return found[-1] if found and release(found[-1]) else None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an error (urllib raises it as one): the server answers where it is asked, never elsewhere."""

    def redirect_request(self, *args) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def probe(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> bytes | None:
    """The body of a 200 answer at `url` (its first PROBE_MAX_BYTES + 1 bytes); None for any other outcome."""
    try:
        with _OPENER.open(url, timeout=timeout_s) as response:
            return response.read(PROBE_MAX_BYTES + 1) if response.status == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def port_taken(base_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """True when something accepts TCP connections at the server's address (refused or unreachable: free)."""
    address = urllib.parse.urlsplit(base_url)
    try:
        with socket.create_connection((address.hostname, address.port), timeout=timeout_s):
            return True
    except OSError:
        return False


def served_ids(base_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> list[str] | None:
    """The model ids GET /v1/models lists; None when it does not answer a listing (yet)."""
    try:
        listing = json.loads(probe(base_url + "/v1/models", timeout_s)[:PROBE_MAX_BYTES])
    except (TypeError, ValueError):
        return None
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        return None
    return [str(card["id"]) for card in data if isinstance(card, dict) and card.get("id")]


def expected_names(command: str, engine: Engine) -> list[str]:
    """What the spawned server should list at /v1/models, read from its own rendered command: the served name,
    else the model path (sglang's --served-model-name defaults to --model-path, sglang server_args.py
    _handle_missing_default_values; vLLM's to --model or the positional model of `vllm serve`,
    vllm/entrypoints/openai/serving_models.py base_model_paths)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    for flags in ((f"--{engine.served_name}",), tuple(f"--{flag}" for flag in engine.model_flags)):
        names = [_after(words, index) for index, word in enumerate(words) if word in flags]
        names += [word.split("=", 1)[1] for word in words if word.split("=", 1)[0] in flags and "=" in word]
        if any(names):
            return [_unshell(name) for name in names if name]
    if "serve" in words:
        return [_unshell(_after(words, words.index("serve")))]
    return []


def _after(words: list[str], index: int) -> str:
    return words[index + 1] if index + 1 < len(words) else ""


def _unshell(name: str) -> str:
    # `$PORTER_SANDBOX_ROOT/models/x` is expanded in the sandbox: the id ends with what follows the variable.
    return re.sub(r"^(\$\{?\w+\}?)+", "", name)


def is_our_server(ids: list[str], expected: list[str]) -> bool:
    if not expected:
        return bool(ids)  # the command names no model: any listing from the live spawned process will do
    return any(served == name or (name and served.endswith(name)) for served in ids for name in expected)


def kill_leftover(sandbox: Sandbox, record: dict | None) -> bool:
    """Kill the server group an earlier porter process recorded (a SIGKILLed run's orphan); True if one was there."""
    if not record:
        return False
    return sandbox.kill_recorded(record)


def wait_port_free(base_url: str, wait_s: float = PORT_FREE_WAIT_S) -> None:
    deadline = time.monotonic() + wait_s
    while port_taken(base_url):
        if time.monotonic() > deadline:
            raise ServerConflict(
                f"{base_url} is already taken by a process this run did not start (another server, one started from "
                "bash, or the server of another porter run that was killed: `porter resume RUN_DIR` of that run "
                "ends it); porter does not launch onto a taken port: stop it first"
            )
        time.sleep(POLL_INTERVAL_S)


def launch(
    sandbox: Sandbox,
    task: Task,
    flags: dict[str, FlagValue],
    log_path: Path,
    on_spawn: Callable[[Process], None] | None = None,
) -> Launch:
    """Start the server; returns once it is healthy, has exited, or has missed the start-up timeout.

    `on_spawn` gets the process the moment it exists, before the (long) wait for health.
    Raises ServerConflict when the port is taken before the launch or a foreign server answers there.
    """
    try:
        command = render_command(task, flags, installed_version(sandbox, task))
    except FlagRefused as exc:
        raise SandboxError(f"{exc}. Nothing was launched.") from None
    log_path.parent.mkdir(parents=True, exist_ok=True)
    base_url = sandbox.endpoint(task.serve.port)
    wait_port_free(base_url)
    started = time.monotonic()
    process = sandbox.spawn(command, log_path, env=serve_env(flags))  # the $NAME entries of the flags
    if on_spawn:
        on_spawn(process)
    health_url = base_url + task.serve.health_path
    deadline = started + task.serve.startup_timeout_s
    while True:
        # Liveness first: health answered by whatever else holds the port must not count for a dead spawn.
        if not process.alive():
            seconds = time.monotonic() - started
            return Launch(False, seconds, log_path, triage=triage_file(log_path))
        if probe(health_url) is not None and _identify(process, base_url, command, task.engine):
            seconds = time.monotonic() - started
            return Launch(True, seconds, log_path, triage=triage_file(log_path), process=process)
        if time.monotonic() > deadline:
            process.stop(grace_s=10)
            seconds = time.monotonic() - started
            with open(log_path, "a", encoding="utf-8") as log:
                log.write(
                    f"\n[porter] startup timeout: {health_url} did not answer 200 within "
                    f"{task.serve.startup_timeout_s:.0f} s; the server was stopped\n"
                )
            # triage reads the line just written as startup_timeout, like an engine's own start-up timeout
            return Launch(False, seconds, log_path, triage=triage_file(log_path))
        time.sleep(POLL_INTERVAL_S)


def _identify(process: Process, base_url: str, command: str, engine: Engine) -> bool:
    """True when the answering server is the spawned one; False while it cannot tell yet (no listing)."""
    ids = served_ids(base_url)
    if ids is None:
        return False
    expected = expected_names(command, engine)
    if is_our_server(ids, expected):
        return True
    process.stop(grace_s=10)
    raise ServerConflict(
        f"{base_url} answers as {ids}, not as the server porter started (expected {expected}); "
        "another process holds the port: the spawned server was stopped"
    )
