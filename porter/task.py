"""The task spec: what model to port, where, how to serve it and what "done" means.

Covers the pydantic models of a task file, YAML loading with `${VAR}` interpolation, and errors
that name the file, the line, the field path and what was expected. Does not cover running
anything: the sandbox, serve and check modules read a validated `Task`.
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from porter.redaction import looks_secret

FlagValue = str | int | float | bool | None
PositiveFloat = Annotated[float, Field(gt=0)]
SIZE = r"^[0-9]+[kmgKMG]?$"  # docker's spelling of a size: bytes, or k, m, g
# The model overlay is one of the run's repos under this name (its branch, patches/ and prs/ folders).
OVERLAY_REPO = "model"


class TaskError(Exception):
    """A task file that cannot be used; the message names file, line, field and expectation."""

    def __init__(self, file: str | Path, problems: list[tuple[int | None, str, str]]):
        self.file = str(file)
        self.problems = problems
        super().__init__(self.render())

    def render(self) -> str:
        lines = []
        for line, field_path, message in self.problems:
            where = f"{self.file}:{line}" if line else self.file
            lines.append(f"{where}: {field_path}: {message}" if field_path else f"{where}: {message}")
        return "\n".join(lines)


class Spec(BaseModel):
    """Base for everything a person writes by hand: unknown keys are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelSpec(Spec):
    id: str = Field(min_length=1, description="Hub repository of the checkpoint, e.g. zai-org/GLM-5.2-MXFP4.")
    path: str = Field(
        min_length=1,
        description="Host path of the weights; with `in_image: true`, their path inside the sandbox image.",
    )
    mount: str | None = Field(
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

    @field_validator("mount")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"must be an absolute path inside the sandbox, got {value!r}")
        return value.rstrip("/") or "/" if value else value

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
    container: str = Field(min_length=1, description="Absolute path inside the sandbox.")
    read_only: bool = Field(True, description="Weights and datasets are mounted read-only by default.")

    @field_validator("container")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"must be an absolute path inside the sandbox, got {value!r}")
        return value


class ServiceSpec(Spec):
    """A host process the sandbox needs (e.g. a simulated device), sharing one directory with it."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Short name, used for its folder and log.")
    command: list[str] = Field(
        min_length=1,
        description="Host argv; {dir} is the shared directory. A relative first word is relative to the task file.",
    )
    mount: str = Field(description="Absolute path where the shared directory appears inside the sandbox.")
    ready: str | None = Field(None, description="File the service creates in {dir} once it is ready.")
    ready_timeout_s: PositiveFloat = Field(30, description="How long to wait for `ready`.")

    @field_validator("mount")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"must be an absolute path inside the sandbox, got {value!r}")
        return value


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
    memory: str | None = Field(
        "32g",
        pattern=SIZE,
        description="Memory (RAM and swap together) the sandbox may use, e.g. 1536g on an 8-GPU node; past it the "
        "kernel kills a process inside the sandbox, never the host's. null: no limit.",
    )
    pids: int | None = Field(
        4096, ge=16, description="Processes and threads the sandbox may run at once (a fork bomb stops there)."
    )
    max_file_size: str | None = Field(
        "16g",
        pattern=SIZE,
        description="Largest file a sandbox process may write, in its mounts too (RLIMIT_FSIZE: a write past it "
        "fails with 'File too large'). Docker cannot cap the total written to bind mounts. null: no limit.",
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
    path: str = Field(description="Path of the source tree inside the sandbox.")
    upstream: str | None = Field(None, description="Upstream git URL the PRs target.")
    base_branch: str = Field("main", description="Upstream branch the patches apply to.")

    @field_validator("name")
    @classmethod
    def _not_a_directory_step(cls, value: str) -> str:
        # The name becomes a folder of the run directory (repos/<name>, patches/<name>): `.`/`..` would leave it.
        if value in (".", ".."):
            raise ValueError(f"{value!r} is not a repo name (it names a directory step); use a word")
        return value

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        return normal_sandbox_path(value, allow_root=False)


class ServeSpec(Spec):
    command: str = Field(
        description="Command template; {model_path} (the container path), {host}, {port} and {flags} are filled in."
    )
    host: str = Field("0.0.0.0", description="Address the server binds inside the sandbox.")
    port: int = Field(30000, ge=1, le=65535, description="Port the server listens on inside the sandbox.")
    health_path: str = Field("/health", description="GET path that answers 200 once the server is ready.")
    startup_timeout_s: PositiveFloat = Field(1800, description="A server not healthy by then is a startup_timeout.")
    flags: dict[str, FlagValue] = Field(
        default_factory=dict,
        description="Baseline flags, name -> value, rendered `--name value`; true -> `--name`; false/null -> absent.",
    )
    tunables: dict[str, list[FlagValue]] = Field(
        default_factory=dict, description="Flag name -> values the agent may try; each must be a flag in `flags`."
    )

    @field_validator("command")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the serve command is empty")
        return value

    @field_validator("flags", "tunables")
    @classmethod
    def _bare_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if name.startswith("-") or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
                raise ValueError(f"flag names are bare kebab-case (tp, kv-cache-dtype), got {name!r}")
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


class QualityCheckSpec(Spec):
    name: str = Field(min_length=1, description="Name in reports, e.g. gsm8k.")
    kind: Literal["gsm8k", "multiple_choice"] = Field(description="gsm8k (#### N answers) or GPQA-style choices.")
    dataset: str = Field(min_length=1, description="Dataset path, or `builtin:NAME` for a set shipped with porter.")
    samples: int = Field(200, ge=1, description="Questions to ask (the first N after a seeded shuffle).")
    few_shot: int = Field(5, ge=0, description="Few-shot examples in the prompt (gsm8k).")
    metric: Literal["strict_match", "flexible_match", "accuracy"] = Field("flexible_match")
    max_tokens: int = Field(512, ge=1, description="Generation budget per question.")
    reference: float | None = Field(None, ge=0, le=1, description="Reference score (e.g. of the FP8 model).")
    tolerance: float | None = Field(None, ge=0, le=1, description="Allowed drop below `reference`.")
    minimum: float | None = Field(None, ge=0, le=1, description="Absolute floor, instead of a reference.")

    @model_validator(mode="after")
    def _has_a_bar(self) -> QualityCheckSpec:
        if self.minimum is None and (self.reference is None or self.tolerance is None):
            raise ValueError("a quality check needs `reference` and `tolerance`, or a `minimum`")
        return self


class WorkloadSpec(Spec):
    input_tokens: int = Field(ge=1, description="Prompt length in tokens.")
    output_tokens: int = Field(ge=1, description="Generated tokens per request (ignore_eos).")
    cache_hit_rate: float = Field(0.0, ge=0, lt=1, description="Share of prompt tokens served from the prefix cache.")
    duration_s: PositiveFloat | None = Field(None, description="Length of each RPS level.")
    num_prompts: int | None = Field(None, ge=1, description="Requests per level, instead of a duration.")
    warmup_s: float = Field(0.0, ge=0, description="Start of each level discarded from the statistics.")
    seed: int = Field(0, description="Seed of the prompts and of the Poisson arrivals.")
    min_requests: int = Field(
        32, ge=1, description="Requests each level measures at least (after warm-up), whatever `duration_s` says."
    )

    @model_validator(mode="after")
    def _duration_or_count(self) -> WorkloadSpec:
        if self.duration_s is None and self.num_prompts is None:
            raise ValueError("a workload needs `duration_s` or `num_prompts`")
        return self


class SloSpec(Spec):
    ttft_s: PositiveFloat = Field(description="Time-to-first-token limit in seconds.")
    percentile: float = Field(99, gt=0, le=100, description="Percentile of TTFT held to the limit.")


class ThroughputCheckSpec(Spec):
    workload: WorkloadSpec
    rps: list[PositiveFloat] = Field(min_length=1, description="Offered request rates, swept in order.")
    slo: SloSpec
    metric: Literal["output_throughput", "total_throughput"] = Field(
        description="bench_serving metric the target holds, per node at the knee: output_throughput (generated "
        "tok/s, what serving figures usually quote) or total_throughput (prompt + generated tok/s)."
    )
    target_tok_s_per_node: PositiveFloat = Field(description="Tok/s per node of `metric` at the knee to reach.")
    bisect_steps: int = Field(2, ge=0, description="Bisection steps between the last pass and the first fail.")


class SingleStreamSpec(Spec):
    input_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=1)
    num_requests: int = Field(3, ge=1, description="Requests run one at a time; the median is reported.")
    target_output_tok_s: PositiveFloat = Field(description="Output tokens per second after the first token.")


class ChecksSpec(Spec):
    quality: list[QualityCheckSpec] = Field(default_factory=list)
    throughput: ThroughputCheckSpec | None = None
    single_stream: SingleStreamSpec | None = None
    min_improvement: float = Field(
        0.03, ge=0, lt=1, description="Smallest relative gain kept; the measured spread raises the bar above it."
    )

    @field_validator("quality")
    @classmethod
    def _unique_names(cls, value: list[QualityCheckSpec]) -> list[QualityCheckSpec]:
        _reject_duplicates([check.name for check in value], "quality check")
        return value


class TuneSpec(Spec):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Name the agent calls the command by.")
    command: str = Field(min_length=1, description="Shell command run in the sandbox.")
    description: str = Field("", description="What it tunes; shown to the agent.")
    workdir: str | None = Field(None, description="Working directory inside the sandbox.")
    timeout_s: PositiveFloat = Field(3600, description="The command is killed after this long.")


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
        _reject_duplicates([repo.name for repo in value], "repo name")
        _reject_duplicates([repo.path for repo in value], "repo path")
        return value

    @field_validator("tune")
    @classmethod
    def _unique_tune(cls, value: list[TuneSpec]) -> list[TuneSpec]:
        _reject_duplicates([tune.name for tune in value], "tune command")
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


def normal_sandbox_path(value: str, allow_root: bool = True) -> str:
    """`value` if it is an absolute path in normal form (no `..`, `.`, `//`, NUL); else ValueError saying why."""
    if not value.startswith("/"):
        raise ValueError(f"must be an absolute path inside the sandbox, got {value!r}")
    trimmed = value.rstrip("/") or "/"
    if "\0" in value or posixpath.normpath(trimmed) != trimmed or trimmed.startswith("//"):
        raise ValueError(f"must be a normal absolute path (no `..`, `.`, `//`), got {value!r}")
    if trimmed == "/" and not allow_root:
        raise ValueError("must be a folder inside the sandbox, not / itself")
    return trimmed


def _reject_duplicates(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"duplicate {what} {name!r}; each must be unique")
        seen.add(name)


def render_flags(flags: dict[str, FlagValue]) -> list[str]:
    """Flags as argv words: `--name value`; true -> `--name`; false/None -> left out."""
    words: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        words.append(f"--{name}")
        if value is not True:
            words.append(str(value))
    return words


# ---------------------------------------------------------------- loading

_SCALARS = yaml.SafeLoader("")  # only its constructors are used: ints, floats, bools, nulls
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
MAX_TASK_BYTES = 1 << 20  # the real tasks are a few kB
MAX_VALUES = 50_000  # values after aliases are expanded: a task has hundreds, an alias bomb billions
MAX_PROBLEMS = 20  # problems shown; the rest are counted
_COLLECTION_TAGS = {yaml.MappingNode: "tag:yaml.org,2002:map", yaml.SequenceNode: "tag:yaml.org,2002:seq"}


def load_task(path: str | Path, environ: dict[str, str] | None = None) -> Task:
    """Read, interpolate and validate a task file; any problem raises TaskError (never a traceback)."""
    path = Path(path)
    reader = _Reader(path, os.environ if environ is None else environ)
    data = reader.read()
    _resolve_paths(data, path.parent)
    try:
        return Task.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        problems = [(reader.line_of(tuple(e["loc"])), _dotted(tuple(e["loc"])), _explain(e)) for e in errors]
        raise TaskError(path, _capped(problems)) from None


def _capped(problems: list[tuple[int | None, str, str]]) -> list[tuple[int | None, str, str]]:
    if len(problems) <= MAX_PROBLEMS:
        return problems
    return [*problems[:MAX_PROBLEMS], (None, "", f"... and {len(problems) - MAX_PROBLEMS} more problems")]


class _Reader:
    """A task file as plain data, every value's line indexed by its field path for the error messages.

    Aliases are expanded under a cap (a 351-byte alias bomb is billions of values); a recursive alias,
    a key that is not a plain scalar and an explicit tag the safe loader does not know are errors.
    """

    def __init__(self, file: Path, environ: dict[str, str]):
        self.file, self.environ = file, environ
        self.lines: dict[tuple, int] = {}
        self.values = 0
        self.open_nodes: set[int] = set()

    def read(self) -> dict:
        text = self._text()
        try:
            root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark else None
            problem = getattr(exc, "problem", None) or str(exc)
            raise TaskError(self.file, [(line, "", f"YAML syntax error: {problem}")]) from None
        if not isinstance(root, yaml.MappingNode):
            raise TaskError(self.file, [(1, "", "expected a mapping of task fields at the top level")])
        return self.convert(root, ())

    def _text(self) -> str:
        try:
            with open(self.file, "rb") as handle:
                raw = handle.read(MAX_TASK_BYTES + 1)
        except OSError as exc:
            raise TaskError(self.file, [(None, "", f"cannot read the task file: {exc.strerror or exc}")]) from None
        if len(raw) > MAX_TASK_BYTES:
            raise TaskError(self.file, [(None, "", f"larger than {MAX_TASK_BYTES} bytes: is this a task YAML file?")])
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            problem = f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}): is this a task YAML file?"
            raise TaskError(self.file, [(line, "", problem)]) from None

    def fail(self, node: yaml.Node, loc: tuple, problem: str) -> TaskError:
        return TaskError(self.file, [(node.start_mark.line + 1, _dotted(loc), problem)])

    def convert(self, node: yaml.Node, loc: tuple) -> Any:
        """Plain data from a composed YAML node, with ${VAR} filled in (errors carry the node's line)."""
        self.values += 1
        if self.values > MAX_VALUES:
            raise self.fail(node, loc, f"more than {MAX_VALUES} values (aliases expanded); a task file has hundreds")
        if id(node) in self.open_nodes:
            raise self.fail(node, loc, "an alias refers to a node that contains it (a recursive alias)")
        self.lines.setdefault(loc, node.start_mark.line + 1)
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, loc)
        if node.tag != _COLLECTION_TAGS[type(node)]:
            raise self.fail(node, loc, f"unsupported YAML tag {node.tag}; task files use plain mappings and lists")
        self.open_nodes.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.convert(item, loc + (index,)) for index, item in enumerate(node.value)]
            return self._mapping(node, loc)
        finally:
            self.open_nodes.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, loc: tuple) -> dict:
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.fail(key_node, loc, "a key must be a plain name, not a list or a mapping")
            key = key_node.value
            if key in result:
                raise self.fail(key_node, loc + (key,), "duplicate key")
            self.lines[loc + (key,)] = key_node.start_mark.line + 1
            result[key] = self.convert(value_node, loc + (key,))
        return result

    def _scalar(self, node: yaml.ScalarNode, loc: tuple) -> Any:
        if node.tag == "tag:yaml.org,2002:str":
            scalar = node.value
        else:
            try:
                scalar = _SCALARS.construct_object(node)
            except yaml.YAMLError:
                raise self.fail(node, loc, f"unsupported YAML tag {node.tag}; write a plain value") from None
        if isinstance(scalar, str) and "${" in scalar:
            return _interpolate(scalar, self.environ, self.file, node.start_mark.line + 1, _dotted(loc))
        return scalar

    def line_of(self, loc: tuple) -> int | None:
        """Line of the deepest value on the error's path (a missing key points at its parent)."""
        for end in range(len(loc), -1, -1):
            if loc[:end] in self.lines:
                return self.lines[loc[:end]]
        return None


def _interpolate(value: str, environ: dict[str, str], file: Path, line: int, field_path: str) -> str:
    def substitute(match: re.Match) -> str:
        name, default = match.group(1), match.group(2)
        if looks_secret(name) and field_path != "agent.api_key_env":  # prompts, logs and sandboxes read the task
            raise TaskError(file, [(line, field_path, f"${{{name}}} names a secret; use agent.api_key_env: {name}")])
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        hint = f"${{{name}}} is not set in the environment (or write ${{{name}:-default}})"
        raise TaskError(file, [(line, field_path, hint)])

    return _VAR.sub(substitute, value)


def _resolve_paths(data: dict, base: Path) -> None:
    """Host paths written relative to the task file are made absolute, so runs work from any cwd."""
    sandbox = data.get("sandbox")
    if isinstance(sandbox, dict):
        for key in ("dockerfile", "context"):
            if isinstance(sandbox.get(key), str):
                sandbox[key] = str((base / sandbox[key]).resolve())
        commands = [sandbox.get("local_setup"), sandbox.get("image_build")]
        commands += [s.get("command") for s in sandbox.get("services") or [] if isinstance(s, dict)]
        for command in commands:
            if isinstance(command, list) and command and isinstance(command[0], str) and "/" in command[0]:
                command[0] = str((base / command[0]).resolve())
        for mount in sandbox.get("mounts") or []:
            if isinstance(mount, dict) and isinstance(mount.get("host"), str):
                mount["host"] = str((base / mount["host"]).resolve())
    checks = data.get("checks")
    if isinstance(checks, dict):
        for check in checks.get("quality") or []:
            dataset = check.get("dataset") if isinstance(check, dict) else None
            if isinstance(dataset, str) and not dataset.startswith("builtin:"):
                check["dataset"] = str((base / dataset).resolve())


def _dotted(loc: tuple) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _explain(error: dict) -> str:
    kind, message = error["type"], error["msg"]
    if kind == "extra_forbidden":
        return "unknown field (check the spelling; see `porter validate --help` for the format)"
    if kind == "missing":
        return "required field is missing"
    message = message.removeprefix("Value error, ")
    if "input" in error and kind not in ("model_type", "dict_type", "list_type"):
        shown = repr(error["input"])
        if len(shown) <= 60:
            return f"{message} (got {shown})"
    return message
