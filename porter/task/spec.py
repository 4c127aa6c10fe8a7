"""The task spec: what model to port, where, how to serve it and what "done" means, as pydantic models.

Covers the models of a task file (a docstring per field; unknown keys are errors), with the `checks:`
section composed from the check registry (each kind declares its own spec: porter/checks/). Does not
read files (loader.py) and does not run anything: the sandbox, serve and check modules read a `Task`.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from porter.checks.registry import ChecksSpec
from porter.engines.engine import Engine
from porter.engines.known import ENGINES, engine_named, launched_engine
from porter.redaction import looks_secret
from porter.schema import (
    ENV_NAME,
    OVERLAY_REPO,
    FlagValue,
    PositiveFloat,
    Size,
    Spec,
    absolute_sandbox_path,
    normal_sandbox_path,
    reject_duplicates,
)

# Where a mount, a service or the checkpoint appears; where a source tree is (a folder, no `..` to climb out of it).
SandboxPath = Annotated[str, AfterValidator(absolute_sandbox_path)]
RepoPath = Annotated[str, AfterValidator(normal_sandbox_path)]


class ModelSpec(Spec):
    id: str = Field(min_length=1, description="Hub repository of the checkpoint, e.g. zai-org/GLM-5.2-MXFP4.")
    path: str = Field(
        min_length=1,
        description="Host path of the weights; with `in_image: true`, their path inside the sandbox image.",
    )
    mount: SandboxPath | None = Field(
        None,
        description="Path of the checkpoint inside the sandbox, what {model_path} renders; default /models/<basename>.",
    )
    in_image: bool = Field(False, description="The weights ship inside the image (the twin): nothing is mounted.")
    overlay: bool = Field(
        True,
        description="Make the checkpoint's small files (config, tokenizer, remote code) a patchable git tree, repo "
        f"`{OVERLAY_REPO}`, at `mount` with the weight files linked read-only (never copied).",
    )
    quantization: str | None = Field(None, description="Checkpoint quantization, e.g. mxfp4 (quark).")
    dtype: str = Field("bfloat16", description="Activation dtype the engine runs with.")

    @model_validator(mode="after")
    def _overlay_does_not_hide_its_source(self) -> ModelSpec:
        if self.in_image and self.overlay and self.container_path == self.path.rstrip("/"):
            raise ValueError(
                f"the overlay mounted at {self.container_path} would hide the image's checkpoint there; "
                "set model.mount to another path (or overlay: false)"
            )
        return self

    @property
    def container_path(self) -> str:
        """Where the engine finds the checkpoint inside the sandbox: what {model_path} renders."""
        if self.in_image and not self.overlay:
            return self.path.rstrip("/") or "/"
        return self.mount or f"/models/{PurePosixPath(self.path.rstrip('/')).name}"

    @property
    def hub_url(self) -> str:
        return f"https://huggingface.co/{self.id}"


class HardwareSpec(Spec):
    gpu: str = Field(min_length=1, description="GPU model, e.g. MI355X; used for reports and per-node figures.")
    count: int = Field(ge=1, description="GPUs per node.")
    nodes: int = Field(1, ge=1, description="Nodes; throughput targets are per node.")


class Mount(Spec):
    host: str = Field(min_length=1, description="Host path (relative paths are relative to the task file).")
    container: SandboxPath = Field(description="Absolute path inside the sandbox.")
    read_only: bool = Field(True, description="Weights and datasets are mounted read-only by default.")


class ServiceSpec(Spec):
    """A host process the sandbox needs (e.g. a simulated device), sharing one directory with it."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Short name, used for its folder and log.")
    command: list[str] = Field(
        min_length=1,
        description="Host argv; {dir} is the shared directory. A relative first word is relative to the task file.",
    )
    mount: SandboxPath = Field(description="Absolute path where the shared directory appears inside the sandbox.")
    ready: str | None = Field(None, description="File the service creates in {dir} once it is ready.")
    ready_timeout_s: PositiveFloat = Field(30, description="How long to wait for `ready`.")


class SandboxSpec(Spec):
    kind: Literal["docker", "local"] = Field("docker", description="docker (isolated) or local (subprocesses).")
    image: str | None = Field(None, description="Image to run, e.g. lmsysorg/sglang:...-rocm700-mi35x.")
    dockerfile: str | None = Field(None, description="Dockerfile to build instead of using `image`.")
    context: str | None = Field(None, description="Build context for `dockerfile` (default: its folder).")
    build_args: dict[str, str] = Field(default_factory=dict, description="--build-arg values.")
    devices: list[str] = Field(default_factory=list, description="Device paths, e.g. /dev/kfd, /dev/dri.")
    group_add: list[str] = Field(default_factory=list, description="Extra groups, e.g. video, render.")
    ipc: str | None = Field(None, description="IPC mode, e.g. host (RCCL needs shared memory).")
    shm_size: str | None = Field(None, description="Size of /dev/shm, e.g. 64g.")
    security_opt: list[str] = Field(default_factory=list, description="e.g. seccomp=unconfined.")
    cap_add: list[str] = Field(default_factory=list, description="e.g. SYS_PTRACE.")
    mounts: list[Mount] = Field(default_factory=list, description="Bind mounts (weights, caches).")
    env: dict[str, str] = Field(default_factory=dict, description="The only environment the sandbox gets.")
    network: Literal["none", "bridge", "host"] = Field("none", description="none: no route out of the sandbox.")
    reach_host: bool = Field(
        False,
        description="With network none: let the sandbox open connections to the host's own listeners (a Ray head, "
        "a service on 0.0.0.0) through its network's gateway. Off: a firewall rule porter puts on the Docker host "
        "refuses them, and only the host opens connections (the checks). bridge and host reach the host anyway.",
    )
    memory: Size | None = Field(
        "32g",
        description="Memory (RAM and swap together) the sandbox may use, e.g. 1536g on an 8-GPU node; past it the "
        "kernel kills a process inside the sandbox, never the host's. null: no limit.",
    )
    pids: int | None = Field(
        4096, ge=16, description="Processes and threads the sandbox may run at once (a fork bomb stops there)."
    )
    max_file_size: Size | None = Field(
        "16g",
        description="Largest file a sandbox process may write, in its mounts too (RLIMIT_FSIZE: a write past it "
        "fails with 'File too large'). null: no limit.",
    )
    max_written: Size | None = Field(
        "64g",
        description="Most bytes the sandbox may add to its scratch, repo trees, writable mounts and own layer; past "
        "it every process in it is killed, with one line saying so (sandbox/write_watch.py). null: no limit.",
    )
    build_products: list[str] = Field(
        default_factory=list,
        description="Glob patterns of sandbox paths the engine writes while it runs (JIT caches, compiled kernels); "
        "every other change outside the repos makes accept refuse.",
    )
    workdir: str = Field("/", description="Default working directory inside the sandbox.")
    docker_host: str | None = Field(None, description="Docker engine URL (e.g. ssh://node7); default: local.")
    local_setup: list[str] = Field(
        default_factory=list,
        description="Host command (argv) that lays out the local sandbox's root ({root}) before its first start; "
        "a relative first word is relative to the task file. With it, a docker task also runs where no "
        "Docker engine answers (commands reach sandbox paths through $PORTER_SANDBOX_ROOT).",
    )
    image_build: list[str] = Field(
        default_factory=list,
        description="Host command (argv) that builds `image` locally; porter runs it before a Docker sandbox "
        "starts (run, replay, eval), so a local-only image is never missing. A relative first word is relative "
        "to the task file.",
    )
    services: list[ServiceSpec] = Field(
        default_factory=list,
        description="Host processes started before the sandbox and stopped with the run, each sharing a "
        "directory mounted into the sandbox (porter/sandbox/services.py).",
    )

    @model_validator(mode="after")
    def _image_or_dockerfile(self) -> SandboxSpec:
        if self.kind == "docker" and bool(self.image) == bool(self.dockerfile):
            raise ValueError("a docker sandbox needs exactly one of `image` or `dockerfile`")
        return self


class RepoSpec(Spec):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Short name, used for branches and patch folders.")
    path: RepoPath = Field(description="Path of the source tree inside the sandbox.")
    upstream: str | None = Field(None, description="Upstream git URL the PRs target.")
    base_branch: str = Field("main", description="Upstream branch the patches apply to.")

    @field_validator("name")
    @classmethod
    def _not_a_directory_step(cls, value: str) -> str:
        # The name becomes a folder of the run directory (repos/<name>, patches/<name>): `.`/`..` would leave it.
        if value in (".", ".."):
            raise ValueError(f"{value!r} is not a repo name (it names a directory step); use a word")
        return value


class ServeSpec(Spec):
    engine: str | None = Field(
        None,
        description=f"The engine the command launches, one of {sorted(ENGINES)} (porter/engines/): its flag names, "
        "default port and start-up stages; default: the one whose declaration recognises the command, else the first.",
    )
    command: str = Field(
        description="Command template; {model_path} (the container path), {host}, {port} and {flags} are filled in."
    )
    host: str = Field("0.0.0.0", description="Address the server binds inside the sandbox.")
    port: int | None = Field(
        None, ge=1, le=65535, description="Port the server listens on inside the sandbox; default: the engine's."
    )
    health_path: str = Field("/health", description="GET path that answers 200 once the server is ready.")
    startup_timeout_s: PositiveFloat = Field(1800, description="A server not healthy by then is a startup_timeout.")
    flags: dict[str, FlagValue] = Field(
        default_factory=dict,
        description="Baseline flags, name -> value, rendered `--name value`; true -> `--name`; false/null -> absent. "
        "`$NAME: value` is an environment variable of the serve process (never a secret).",
    )
    tunables: dict[str, list[FlagValue]] = Field(
        default_factory=dict,
        description="Flag name -> values: the search space the playbook walks and the prompt shows, not a fence: "
        "the agent may set any flag the engine's own parser accepts and any environment variable ($NAME) of the "
        "serve process. Each must be a flag in `flags`.",
    )

    @field_validator("command")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the serve command is empty")
        return value

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str | None) -> str | None:
        if value is not None:
            engine_named(value)
        return value

    @model_validator(mode="after")
    def _engine_defaults(self) -> ServeSpec:
        if self.engine is None:
            self.engine = launched_engine(self.command)
        if self.port is None:
            self.port = engine_named(self.engine).default_port
        return self

    @field_validator("flags", "tunables")
    @classmethod
    def _bare_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if ENV_NAME.fullmatch(name):
                if looks_secret(name[1:]):
                    raise ValueError(f"{name} names a secret; a secret never enters the serve process's environment")
                continue
            if name.startswith("-") or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
                raise ValueError(
                    f"flag names are bare kebab-case (tp, kv-cache-dtype), or $NAME for an environment variable of the "
                    f"serve process, got {name!r}"
                )
        return value

    @model_validator(mode="after")
    def _tunables_are_flags(self) -> ServeSpec:
        unknown = sorted(set(self.tunables) - set(self.flags))
        if unknown:
            raise ValueError(
                f"tunables {unknown} are not flags of this serve spec; declare them under `flags` "
                f"(null for off by default). Known flags: {sorted(self.flags)}"
            )
        for name, values in self.tunables.items():
            if not values:
                raise ValueError(f"tunable {name!r} lists no values")
        return self


class TuneSpec(Spec):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Name the agent calls the command by.")
    command: str = Field(min_length=1, description="Shell command run in the sandbox.")
    description: str = Field("", description="What it tunes; shown to the agent.")
    workdir: str | None = Field(None, description="Working directory inside the sandbox.")
    timeout_s: PositiveFloat = Field(3600, description="The command is killed after this long.")
    aiter_tuned_output: str | None = Field(
        None,
        description="The file, under the aiter repo, that the command's aiter tuner writes (its -o): porter merges its "
        "rows into aiter's shipped tables by aiter's lookup key (a faster row replaces upstream's) and removes it.",
    )


class LimitsSpec(Spec):
    max_steps: int = Field(80, ge=1, description="Model calls before the run stops.")
    max_cost_usd: float = Field(25.0, ge=0, description="Dollars of model usage before the run stops.")
    max_wall_hours: PositiveFloat = Field(12.0, description="Wall-clock hours before the run stops.")
    max_relaunches: int = Field(40, ge=1, description="Server launches before the run stops.")


class PriceSpec(Spec):
    input: float = Field(ge=0, description="$ per million input tokens.")
    output: float = Field(ge=0, description="$ per million output tokens.")
    cache_read: float | None = Field(None, ge=0)
    cache_write: float | None = Field(None, ge=0)


class AgentSpec(Spec):
    provider: str = Field(
        "playbook",
        description="playbook, anthropic, openai, replay:PATH, scripted:PATH, file:DIR, human, or playbook+PROVIDER.",
    )
    model: str | None = Field(None, description="Provider's model name, e.g. claude-sonnet-4-5 or glm-5.2.")
    base_url: str | None = Field(None, description="OpenAI-compatible endpoint (GLM, Kimi, a local sglang).")
    api_key_env: str | None = Field(None, description="Name of the environment variable holding the API key.")
    temperature: float = Field(0.0, ge=0, le=2)
    max_output_tokens: int = Field(4096, ge=1)
    # 60k estimated tokens (at a conservative 3 characters per token: under 180k characters) leaves a
    # 200k-token window room for the reply and for estimation error, and keeps each step cheap.
    context_budget_tokens: int = Field(
        60_000, ge=4_000, description="Upper bound of one request's prompt; older tool results are elided to fit."
    )
    request_timeout_s: PositiveFloat = Field(
        600, description="Longest wait for one model reply (an HTTP request, or a reply file for file:DIR)."
    )
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    price: PriceSpec | None = Field(None, description="Overrides the price table for this model.")

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(f"must be the NAME of an environment variable, not its value (got {value[:4]!r}...)")
        return value


class OutputsSpec(Spec):
    runs_dir: str = Field("runs", description="Where run directories are written (relative to the working dir).")
    progress_every_s: PositiveFloat = Field(
        30.0,
        description="Longest silence of the run's progress log (RUN_DIR/progress.log), in seconds: while work runs, "
        "a line saying what runs and for how long goes out at least this often.",
    )
    author: str | None = Field(
        None,
        description="`Name <email>`: the author (and committer) of the exported patch series, the pushed branch and "
        "the PR drafts; unset, they stay porter's own commits (porter <porter@localhost>). The run's branch itself "
        "is never rewritten.",
    )
    signoff: bool = Field(
        False,
        description="Add `Signed-off-by: <author>` to every exported commit and PR draft (the Developer Certificate of "
        "Origin line vLLM's DCO check requires); needs `author`, the person certifying it.",
    )

    @field_validator("author")
    @classmethod
    def _author_identity(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[^<>\n]*[^<>\s] <[^<>@\s]+@[^<>\s]+>", value):
            raise ValueError(f"must read `Name <email>`, as git spells an identity (got {value!r})")
        return value

    @model_validator(mode="after")
    def _signoff_names_someone(self) -> OutputsSpec:
        if self.signoff and not self.author:
            raise ValueError("signoff needs author: the Signed-off-by line names the person certifying the change")
        return self


class Task(Spec):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Short name; prefixes the run directory.")
    description: str = ""
    model: ModelSpec
    hardware: HardwareSpec
    sandbox: SandboxSpec
    repos: list[RepoSpec] = Field(default_factory=list)
    serve: ServeSpec
    checks: ChecksSpec = Field(default_factory=ChecksSpec)
    tune: list[TuneSpec] = Field(default_factory=list)
    agent: AgentSpec = Field(default_factory=AgentSpec)
    outputs: OutputsSpec = Field(default_factory=OutputsSpec)

    @field_validator("repos")
    @classmethod
    def _unique_repos(cls, value: list[RepoSpec]) -> list[RepoSpec]:
        reject_duplicates([repo.name for repo in value], "repo name")
        reject_duplicates([repo.path for repo in value], "repo path")
        return value

    @field_validator("tune")
    @classmethod
    def _unique_tune(cls, value: list[TuneSpec]) -> list[TuneSpec]:
        reject_duplicates([tune.name for tune in value], "tune command")
        return value

    @model_validator(mode="after")
    def _overlay_is_its_own_repo(self) -> Task:
        if not self.model.overlay:
            return self
        for repo in self.repos:
            if repo.name == OVERLAY_REPO or repo.path == self.model.container_path:
                raise ValueError(
                    f"repo {repo.name!r} at {repo.path} collides with the model overlay (repo {OVERLAY_REPO!r} at "
                    f"{self.model.container_path}); rename it or set model.overlay: false"
                )
        return self

    @property
    def engine(self) -> Engine:
        """The declaration of the engine the serve command launches (its flag names, port, start-up stages)."""
        return engine_named(self.serve.engine)

    def patchable_repos(self) -> list[RepoSpec]:
        """The trees the agent may change: the declared engine repos, then the model overlay when it is on."""
        if not self.model.overlay:
            return list(self.repos)
        overlay = RepoSpec(name=OVERLAY_REPO, path=self.model.container_path, upstream=self.model.hub_url)
        return [*self.repos, overlay]

    def repo(self, name: str) -> RepoSpec:
        repos = self.patchable_repos()
        for repo in repos:
            if repo.name == name:
                return repo
        raise KeyError(f"no repo named {name!r}; the task declares {[r.name for r in repos]}")
