"""`porter preflight TASK`: in a minute or two, everything that would otherwise fail after a long model load.

Covers, without loading weights: the image is present; the devices are visible inside a container of it
and as many as `hardware.count` (amd-smi or rocm-smi inside); the checkpoint's config.json is readable
where the sandbox will see it; every serve flag and every tunable value is accepted by the engine's own
argument parser (asked inside the sandbox: engines/parser_check.py); each `tune` command's script
or module exists; each quality dataset exists (its sha256 is shown); the serve port is free where it
would clash; the disk holds the repo copies; the agent's API key variable is set (its value is never
shown). The checks run in a throwaway container of the task's image with the task's devices, env and
mounts but no network (or, for a local sandbox, in a scratch local root). Does not start the server,
copy repos or build anything but the local root: a run does that.
"""

from __future__ import annotations

import contextlib
import hashlib
import shlex
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from porter.checks.loadgen import CheckError
from porter.checks.quality_data import resolve_dataset
from porter.engines.parser_check import ask_parser
from porter.evaluate.runs import prepare_local_root
from porter.models import DEFAULT_KEY_ENV, ModelError, api_key
from porter.sandbox import DockerSandbox, LocalSandbox, Sandbox, SandboxError
from porter.sandbox.image_build import build_task_image
from porter.sandbox.trees.overlay import WEIGHTS_MOUNT
from porter.task import FlagValue, Task, TuneSpec

FIND_MODULE = "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)"


@dataclass
class Finding:
    check: str
    ok: bool | None  # None: skipped (the note says why)
    detail: str
    fix: str = ""


def run_preflight(task: Task) -> list[Finding]:
    """Every check of the task, in the order a person fixes them."""
    findings = [*_host_resources(task), *_mount_sources(task), *_datasets(task), _api_key(task), _port(task)]
    try:
        with open_probe(task) as probe:
            findings.insert(0, Finding("image", True, _describe(probe)))
            findings += [_devices(task, probe), _weights(task, probe), *_serve_flags(task, probe)]
            findings += [_tune(spec, probe) for spec in task.tune]
            findings.append(_disk(task, probe))
    except SandboxError as exc:
        findings.insert(0, Finding("image", False, str(exc).splitlines()[0], _image_fix(task)))
        skipped = "skipped: no sandbox to ask (GPU count, weights in the container, flags, tuners, disk)"
        findings.append(Finding("in-sandbox checks", None, skipped))
    return findings


def _host_resources(task: Task) -> list[Finding]:
    """What the node itself must have, checked even when the image is missing: devices and the weights."""
    findings = []
    if task.sandbox.kind == "docker" and not task.sandbox.docker_host:
        for device in task.sandbox.devices:
            if not Path(device.split(":", 1)[0]).exists():
                fix = "run on the GPU node the task is for (the amdgpu driver provides /dev/kfd and /dev/dri)"
                findings.append(Finding(f"device {device}", False, "does not exist on this host", fix))
    model = task.model
    if not model.in_image and not (Path(model.path) / "config.json").is_file():
        fix = f"huggingface-cli download {model.id} --local-dir {model.path} (or fix model.path)"
        findings.append(Finding("weights", False, f"{model.path}/config.json is not readable on this host", fix))
    return findings


def render_table(findings: list[Finding]) -> str:
    width = max(len(finding.check) for finding in findings)
    lines = [f"{'check':<{width}}  status   detail", f"{'-' * width}  ------   ------"]
    for finding in findings:
        status = {True: "ok", False: "FAILED", None: "skipped"}[finding.ok]
        lines.append(f"{finding.check:<{width}}  {status:<7}  {finding.detail}")
        if finding.ok is False and finding.fix:
            lines.append(f"{'':<{width}}  {'':<7}  fix: {finding.fix}")
    return "\n".join(lines)


def preflight_main(task: Task) -> int:
    """Print the table; 0 when nothing failed, 2 (bad input, nothing started) when something did."""
    findings = run_preflight(task)
    print(render_table(findings), flush=True)
    return 2 if any(finding.ok is False for finding in findings) else 0


# ---------------------------------------------------------------- where the checks run


@contextlib.contextmanager
def open_probe(task: Task) -> Iterator[Sandbox]:
    """The task's sandbox, started for questions only: a docker sandbox as a throwaway container of the image
    (DockerSandbox.start_probe: devices, env, the task's mounts; no repos, no network), a local one in a scratch
    root laid out by sandbox.local_setup. Every check below asks it through Sandbox.exec."""
    with tempfile.TemporaryDirectory(prefix="porter-preflight-") as scratch:
        run_dir = Path(scratch)
        if task.sandbox.kind == "local":
            if task.sandbox.local_setup:
                prepare_local_root(task, run_dir / "root")
            sandbox = LocalSandbox(task, run_dir, "preflight")
            sandbox.start()
        else:
            build_task_image(task, run_dir)  # a local-only image builds itself
            sandbox = DockerSandbox(task, run_dir, f"preflight-{task.name}")
            sandbox.start_probe()
        try:
            yield sandbox
        finally:
            sandbox.stop(remove=True)


def _describe(sandbox: Sandbox) -> str:
    facts = sandbox.describe()
    if facts.get("kind") == "local":
        return "local sandbox (no image; laid out by sandbox.local_setup)"
    return str(facts.get("image") or facts.get("image_id", "")[:19])


def _image_fix(task: Task) -> str:
    if task.sandbox.kind == "local":
        return "fix sandbox.local_setup (see the error) or the repo paths"
    image = task.sandbox.image or "the task's dockerfile image"
    if task.sandbox.image_build:
        return f"fix sandbox.image_build (it should leave {image} on the engine; see the error)"
    return f"`docker pull {image}` on the node (porter never pulls), or correct sandbox.image"


# ---------------------------------------------------------------- the checks


def _devices(task: Task, probe) -> Finding:
    if not task.sandbox.devices:
        return Finding("devices", None, "skipped: the task declares no devices (the twin simulates its GPUs)")
    count_script = (
        "if command -v amd-smi >/dev/null; then amd-smi list | grep -c '^GPU'; "
        "elif command -v rocm-smi >/dev/null; then rocm-smi --showid | grep -o 'GPU\\[[0-9]*\\]' | sort -u | wc -l; "
        "else echo none; fi"
    )
    output = probe.exec(count_script, 60).output
    seen = output.strip().splitlines()[-1] if output.strip() else ""
    if seen == "none":
        return Finding("devices", False, "neither amd-smi nor rocm-smi is in the image", "use a ROCm image")
    if not seen.isdigit() or int(seen) != task.hardware.count:
        return Finding(
            "devices",
            False,
            f"{seen or 0} GPUs visible in the container, hardware.count is {task.hardware.count}",
            "check sandbox.devices (/dev/kfd, /dev/dri), group_add (video, render) and the node's driver",
        )
    return Finding("devices", True, f"{seen} GPUs visible in the container")


def _weights(task: Task, probe) -> Finding:
    model = task.model
    if model.in_image:
        where = model.path
    else:
        where = WEIGHTS_MOUNT if model.overlay else model.container_path
        if not (Path(model.path) / "config.json").is_file():
            return Finding("weights in the sandbox", None, "skipped: not on this host (see above)")
    if isinstance(probe, LocalSandbox):  # a local sandbox sees its paths under its root, on this host
        folder = probe.host_path(model.path) if model.in_image else Path(model.path)
        if not (folder / "config.json").is_file():
            return Finding("weights", False, f"{folder}/config.json is not readable", "check model.path")
        return Finding("weights", True, f"config.json readable at {folder}")
    # config.json, and the first shard's first byte: a hub-cache snapshot's links would dangle in the mount
    folder = shlex.quote(where)
    script = f"test -r {folder}/config.json && f=$(ls {folder}/*.safetensors 2>/dev/null | head -1) && "
    script += '{ [ -z "$f" ] || head -c 1 "$f" >/dev/null; }'
    if probe.exec(script, 60).exit_code != 0:
        fix = "model.path must be a plain directory (huggingface-cli download --local-dir), readable by the container"
        return Finding("weights", False, f"{where}/config.json or its first shard is not readable in the sandbox", fix)
    return Finding("weights", True, f"config.json readable at {where} ({model.container_path} for the engine)")


def _serve_flags(task: Task, probe) -> list[Finding]:
    """Baseline flags and each tunable value, through the engine's own parser, in one process."""
    variants: list[tuple[str, dict[str, FlagValue]]] = [("baseline flags", dict(task.serve.flags))]
    for flag, values in task.serve.tunables.items():
        for value in values:
            if value is not None and value is not False and value != task.serve.flags.get(flag):
                variants.append((f"tunable {flag}={value}", {**task.serve.flags, flag: value}))
    answer = ask_parser(probe, task, [flags for _, flags in variants])
    if answer.problem and "is not a Python launcher" in answer.problem:
        return [Finding("serve flags", None, f"skipped: {answer.problem}")]
    if answer.problem:
        return [Finding("serve flags", False, answer.problem, "see the output, or check serve.command")]
    findings = []
    baseline_error = answer.verdicts[0]
    for index, ((label, _), error) in enumerate(zip(variants, answer.verdicts, strict=True)):
        if error and (index == 0 or error != baseline_error):  # a bad baseline fails every variant: say it once
            findings.append(
                Finding("serve flags", False, f"{label}: {error}", "fix the flag name or value in the task")
            )
    parser_flags = {name for name in task.serve.flags if not name.startswith("$")}
    unknown = set() if baseline_error else parser_flags - set(answer.known)  # abbreviations
    for name in sorted(unknown):
        fix = "write the option's full name (argparse would take a prefix, which breaks when a new option appears)"
        findings.append(Finding("serve flags", False, f"--{name} is not one of the engine's option names", fix))
    if not findings:
        release = f"{task.engine.name} {answer.version}" if answer.version else "no release read: the task's spellings"
        findings.append(Finding("serve flags", True, f"{len(variants)} flag sets accepted by the parser of {release}"))
    return findings


def _tune(spec: TuneSpec, probe: Sandbox) -> Finding:
    """The scripts (`python3 path.py`) and modules (`python3 -m mod`) the tuning command runs, present."""
    words = shlex.split(spec.command.replace("&&", " ; ").replace("|", " ; "))
    needs = []
    for index, word in enumerate(words[:-1]):
        if Path(word).name.startswith("python"):
            following = words[index + 1]
            if following == "-m" and index + 2 < len(words):
                needs.append(("module", words[index + 2]))
            elif following.endswith(".py"):
                needs.append(("script", following))
    if not needs:
        return Finding(f"tune {spec.name}", None, "skipped: no python script or module found in the command")
    for kind, target in needs:
        if kind == "script":
            script = f"test -f {shlex.quote(target)}"
        else:
            script = f"python3 -c {shlex.quote(FIND_MODULE)} {shlex.quote(target)}"
        code = probe.exec(script, 60, workdir=spec.workdir).exit_code
        if code != 0:
            where = f" (workdir {spec.workdir})" if spec.workdir else ""
            return Finding(
                f"tune {spec.name}",
                False,
                f"{kind} {target} not found in the sandbox{where}",
                "fix tune.command to the path in this image",
            )
    return Finding(f"tune {spec.name}", True, ", ".join(f"{kind} {target}" for kind, target in needs) + " present")


def _mount_sources(task: Task) -> list[Finding]:
    if task.sandbox.kind != "docker":
        return []
    missing = [mount for mount in task.sandbox.mounts if not Path(mount.host).exists()]
    return [
        Finding(f"mount {m.container}", False, f"{m.host} does not exist on this host", f"mkdir -p {m.host}")
        for m in missing
    ]


def _datasets(task: Task) -> list[Finding]:
    findings = []
    for check in task.checks.quality:
        files = [(check.name, check.dataset, "gpqa-diamond" if check.kind == "multiple_choice" else "gsm8k")]
        if check.few_shot_dataset:
            files.append((f"{check.name} few-shot", check.few_shot_dataset, "gsm8k-train"))
        for label, reference, name in files:
            try:
                path = resolve_dataset(reference)
            except CheckError:
                fix = f"porter data get {name} --out {shlex.quote(str(Path(reference).parent))}"
                findings.append(Finding(f"dataset {label}", False, f"{reference} does not exist", fix))
                continue
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            findings.append(Finding(f"dataset {label}", True, f"{path} sha256 {digest}"))
    return findings


def _api_key(task: Task) -> Finding:
    providers = [part.split(":", 1)[0] for part in task.agent.provider.split("+")]
    keyed = [provider for provider in providers if provider in DEFAULT_KEY_ENV]
    if not keyed:
        return Finding("api key", None, f"skipped: provider {task.agent.provider!r} needs no key")
    for provider in keyed:
        try:
            name, _ = api_key(task.agent, provider)
        except ModelError as exc:
            return Finding("api key", False, str(exc), "export the variable in the shell that runs porter")
    return Finding("api key", True, f"{name} is set (value not shown)")


def _port(task: Task) -> Finding:
    port = task.serve.port
    if task.sandbox.kind == "docker" and task.sandbox.network != "host":
        return Finding("port", True, f"{port} is inside the sandbox's own network namespace")
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return Finding(
                "port", False, f"port {port} is in use on this host", "stop what listens there or change serve.port"
            )
    return Finding("port", True, f"{port} is free on this host")


def _disk(task: Task, probe) -> Finding:
    paths = " ".join(shlex.quote(repo.path) for repo in task.repos)
    if not paths or isinstance(probe, LocalSandbox):
        return Finding("disk", None, "skipped: no repo copies to make from an image")
    result = probe.exec(f"du -sk {paths} | awk '{{s+=$1}} END {{print s}}'", 120)
    code, output = result.exit_code, result.output
    needed = int(output.strip().splitlines()[-1]) * 1024 if code == 0 and output.strip() else 0
    runs_dir = Path(task.outputs.runs_dir).resolve()
    existing = next(parent for parent in [runs_dir, *runs_dir.parents] if parent.exists())
    free = shutil.disk_usage(existing).free
    detail = f"repo copies need {needed / 2**30:.1f} GiB, {existing} has {free / 2**30:.1f} GiB free"
    return Finding("disk", free > needed * 1.2, detail, "free space or set outputs.runs_dir elsewhere")
