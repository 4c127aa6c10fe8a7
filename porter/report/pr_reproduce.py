"""How a maintainer reproduces a PR: the environment it was found in and the commands, in upstream's own tools.

Covers the environment block (image and digest, ROCm version, aiter commit, GPU, the upstream commit the
patches apply to; from environment.json and the repos), the `docker run` of the task's image with the task's
devices and options, the serve command with a configuration's flags (the checkpoint by its hub id when it is
not in the image; no porter path), the benchmark commands of the checks a PR's figures came from, in each
engine's own benchmark client, and how to open the model overlay's PR on the Hugging Face Hub.

The benchmark client is the engine declaration's (`bench_client`), sent the load a check kind declares
(`bench_load`). The hub upload: huggingface_hub 2.4.0 `hf upload REPO_ID LOCAL_PATH PATH_IN_REPO --create-pr
--commit-message --commit-description` (cli/upload.py) and `HfApi.upload_folder(..., create_pr=True)` (hf_api.py).
"""

from __future__ import annotations

import shlex

from porter.checks import registry
from porter.engines.serve import render_command
from porter.report.run_reading import RunRecord, env_prefix
from porter.schema import FlagValue
from porter.task import Task


def environment_rows(record: RunRecord, upstream: str | None) -> list[tuple[str, str]]:
    """(what, value) rows of the environment block."""
    found = record.environment
    image = found.image or record.task.sandbox.image or "-"
    hardware = record.task.hardware
    gpu = f"{hardware.count}x {hardware.gpu} per node, {hardware.nodes} node(s)"
    if found.gpu:
        gpu += f" (the device reports: {found.gpu})"
    aiter = found.aiter_commit or found.aiter_version or "not found in the image"
    return [
        ("image", f"`{image}`"),
        ("image digest", f"`{found.image_id or '-'}`"),
        ("ROCm", found.rocm or "not recorded (no /opt/rocm/.info/version in the image)"),
        ("aiter", aiter),
        ("GPU", gpu),
        ("engine", f"{record.task.engine.name}" + (f", upstream commit `{upstream}`" if upstream else "")),
    ]


def model_dir(task: Task) -> str:
    """Where the checkpoint is in the container: the image's own path when it ships there, else a mount of the
    maintainer's copy (docker_run's -v)."""
    return task.model.path.rstrip("/") if task.model.in_image else f"/models/{task.model.id.split('/')[-1]}"


def docker_run(task: Task) -> list[str]:
    """`docker run` of the task's image with its devices and options (what the engine needs on ROCm), the patches
    and the checkpoint mounted."""
    sandbox = task.sandbox
    words = ["docker", "run", "-it", "--rm", "--network", "host", "-v", '"$PWD/patches:/patches:ro"']
    lines = []
    if not task.model.in_image:
        name = task.model.id.split("/")[-1]
        lines.append(f"MODEL=/path/to/{name}   # the checkpoint: hf download {task.model.id} --local-dir $MODEL")
        words += ["-v", f'"$MODEL:{model_dir(task)}"']
    options = {
        "--device": sandbox.devices,
        "--group-add": sandbox.group_add,
        "--ipc": [sandbox.ipc] if sandbox.ipc else [],
        "--shm-size": [sandbox.shm_size] if sandbox.shm_size else [],
        "--security-opt": sandbox.security_opt,
        "--cap-add": sandbox.cap_add,
        "-e": [f"{name}={value}" for name, value in sandbox.env.items()],
    }
    words += [word for option, values in options.items() for value in values for word in (option, value)]
    return [*lines, " ".join([*words, sandbox.image or "IMAGE", "bash"])]


def serve_command(task: Task, flags: dict[str, FlagValue]) -> str:
    """The serve command with these flags, the checkpoint where the container has it (model_dir), never porter's
    own overlay path."""
    text = render_command(task, flags).replace(shlex.quote(task.model.container_path), shlex.quote(model_dir(task)))
    for root in ("${PORTER_SANDBOX_ROOT}", "$PORTER_SANDBOX_ROOT"):  # the local sandbox's root: empty in an image
        text = text.replace(root, "")
    return f"{env_prefix(flags)} {text}".strip()  # the `$NAME` settings are the server's environment


def bench_commands(record: RunRecord, key: str, result: dict) -> list[str]:
    """The engine's own benchmark client for a check's workload, at the rate the figure was read at."""
    task, item = record.task, registry.by_key(record.task, key)
    load = item.kind.bench_load(item.spec, result)
    return task.engine.bench_client(task.serve.port, model_dir(task), load) if load else []


def hub_instructions(task: Task, title: str, files: list[str], patches: list[str], draft_name: str) -> list[str]:
    """How to open the overlay's PR on the hub: apply the patches in a clone (no weights), then upload as a PR."""
    name = task.model.id.split("/")[-1]
    uploads = [
        f"hf upload {task.model.id} {shlex.quote(path)} {shlex.quote(path)} --create-pr "
        f'--commit-message {shlex.quote(title)} --commit-description "$(cat ../prs/{draft_name})"'
        for path in files
    ]
    return [
        "```bash",
        "# from the run directory; the weights are not downloaded",
        "pip install -U huggingface_hub && hf auth login   # a token that may open PRs on the repository",
        f"GIT_LFS_SKIP_SMUDGE=1 git clone {task.model.hub_url} && cd {name}",
        *(f"git am {patch}" for patch in patches),
        *uploads,
        "```",
        "",
        "or from Python, one PR for every changed file:",
        "",
        "```python",
        "from huggingface_hub import HfApi",
        "HfApi().upload_folder(",
        f"    repo_id={task.model.id!r}, folder_path='.', allow_patterns={files!r},",
        f"    create_pr=True, commit_message={title!r}, commit_description=open('../prs/{draft_name}').read(),",
        ")",
        "```",
        "",
        "or on the web: the model page, *Files and versions*, open the file, edit it, and choose *Open as a pull "
        "request* when committing.",
    ]
