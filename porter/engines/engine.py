"""What an engine is to porter: the declaration each engine module (engines/sglang.py, engines/vllm.py) fills in.

An `Engine` names, in that engine's own spelling and as the release `version` spells them, what the fields below say;
later releases' spellings are its `respellings`, applied by `spelled_for` for the release a launch finds installed
(engines/serve.py). Flag rules, the accept rules' move groups, the playbook's searches, serve, preflight, the report,
the PR drafts, the prompt and `porter init` ask it instead of naming a flag themselves. A task names its engine
(`serve.engine`); adding one is a module of its own and one entry in engines/known.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from porter.schema import FlagValue


@dataclass(frozen=True)
class Draft:
    """One speculative-decoding configuration, engine-neutral: what porter searches over."""

    method: str  # EAGLE (sglang's name for EAGLE/MTP heads), mtp (vLLM's), ...
    steps: int  # draft depth
    topk: int = 1
    draft_tokens: int | None = None  # tokens verified per step (sglang's num-draft-tokens); None: steps + 1


@dataclass(frozen=True)
class PrStyle:
    """How the upstream project's PRs read: the title's tag, as its merged PRs spell it, and its template's headings,
    each holding parts of porter's draft (problem, cause, fix, speed, accuracy, tested, environment, reproduce)."""

    prefix: str
    sections: tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class BenchLoad:
    """One check's load as a serving benchmark client sends it, engine-neutral (a check kind's `bench_load`)."""

    input_tokens: int
    output_tokens: int
    prefix_tokens: int  # of the input, a prefix each request shares with others (the prefix cache's part)
    pacing: str  # options both upstream clients spell alike: --max-concurrency, --request-rate, --num-prompts, --seed


@dataclass(frozen=True)
class Respelling:
    """From release `since` on, `old` is written `new` with its value (or the size `value_of`, one flag's spellings,
    when `old` switches that size); before `since`, `new` is refused."""

    since: str
    old: str
    new: str
    value_of: tuple[str, ...] = ()


class FlagRefused(ValueError):
    """A flag the engine release in the image does not have: one line naming the spelling it has."""


def release(version: str) -> tuple[int, ...]:
    """A release as numbers ("0.5.23" -> (0, 5, 23)): what the respellings compare; a suffix (rc1, +rocm) drops."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(part) for part in match[0].split(".")) if match else ()


@dataclass(frozen=True)
class Engine:
    name: str
    launch: str  # the serve command template: {model_path}, {host}, {port}, {flags}
    launched_by: str  # a regex: a serve command it matches launches this engine (a task that names no engine)
    default_port: int
    tensor_parallel: tuple[str, ...]  # flag spellings the engine accepts, its canonical one first
    data_parallel: tuple[str, ...]
    pipeline_parallel: tuple[str, ...]
    expert_parallel: tuple[str, ...]  # a size (sglang --ep-size) or a switch (vLLM --enable-expert-parallel)
    dp_attention: str | None  # sglang's --enable-dp-attention: DP groups split the TP ranks instead of multiplying
    memory_fraction: str  # the share of device memory the engine takes statically
    model_flags: tuple[str, ...]  # the flag naming the checkpoint; empty: a positional word after the launcher
    speculative_flags: tuple[str, ...]  # every flag that configures speculative decoding
    draft_flags: Callable[[Draft], dict[str, FlagValue]]  # a Draft in this engine's flags
    read_draft: Callable[[dict[str, FlagValue]], Draft | None]  # the Draft a flag set configures (None: off)
    stages: tuple[tuple[str, str], ...]  # (stage, regex) in start-up order: the engine's own progress lines
    one_batch: str  # the engine's one-batch latency benchmark, for the prompt
    # What `porter init` writes and plans with (init/layout_plan.py):
    expert_parallel_switch: bool  # expert parallelism is a switch (True) or a group size (False)
    moe_over_data_parallel: bool  # without expert parallelism, MoE layers shard over tp x dp ranks, not tp
    memory_share: float  # the static-memory share init writes for memory_fraction, and why (in the module)
    max_batched_tokens: str  # the flag bounding the tokens of one forward step (the largest MoE batch)
    config_override: str  # the flag whose JSON object overrides keys of the checkpoint's config.json
    eager: tuple[tuple[str, FlagValue], ...]  # (flag, value): no graph capture, each forward run eagerly
    mtp_method: str  # the draft method that runs a checkpoint's own MTP layers
    rocm_environment: tuple[tuple[str, str], ...]  # (variable, value) the engine's ROCm image serves with
    pr_style: PrStyle  # what a PR to the engine's project reads like
    bench_client: Callable[[int, str, BenchLoad], list[str]]  # port, model path, load -> its client's command, notes
    kernel_lines: tuple[tuple[str, str], ...] = ()  # (choice, regex): the lines where it logs a kernel choice
    version: str = ""  # the release the names above were read in (the real task's image)
    respellings: tuple[Respelling, ...] = ()  # later releases' spellings of the flags above, oldest first
    dp_attention_architectures: tuple[str, ...] = ()  # the architectures upstream names as running DP attention
    # (architecture, windowed layer kind: sliding or chunked) -> whether the engine caches only that layer's window,
    # not every token (what `porter init` counts as a growing KV cache)
    bounds_window: Callable[[str, str], bool] = lambda architecture, mixer: False
    # Spelled alike by both engines (sglang fields/model.py, memory.py, serving.py; vLLM engine/arg_utils.py):
    kv_cache_dtype: str = "kv-cache-dtype"
    kv_cache_fp8: str = "fp8_e4m3"  # the kv_cache_dtype value of an fp8 e4m3 cache
    served_name: str = "served-model-name"
    remote_code: str = "trust-remote-code"  # the flag that lets the engine run the checkpoint's own code (auto_map)

    def reduced_flags(self, layers: int = 4) -> dict[str, FlagValue]:
        """The engine's own reduced start-up: random weights (`--load-format dummy`, both engines: sglang 0.5.20/0.5.23
        arg_groups/fields/model.py and choices.py, vLLM 0.25.1/0.34.0 engine/arg_utils.py and model_loader/__init__.py),
        the first `layers` layers (4: DeepSeek-V3's and GLM-5's three dense layers and an MoE one; the NextN layer, read
        at index num_hidden_layers, moves with them) and no graph capture."""
        overrides = json.dumps({"num_hidden_layers": layers})
        return {"load-format": "dummy", self.config_override: overrides, **dict(self.eager)}

    def topology_flags(self) -> set[str]:
        return {*self.tensor_parallel, *self.data_parallel, *self.pipeline_parallel, *self.expert_parallel} | (
            {self.dp_attention} if self.dp_attention else set()
        )

    def spelled_for(self, version: str | None, flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
        """The flags as release `version` spells them (None: unknown, as declared); FlagRefused: one it lacks."""
        spelled = dict(flags)
        for change in self.respellings if version else ():
            value, new = spelled.get(change.old), spelled.get(change.new)
            if release(version) < release(change.since):
                if new not in (None, False):
                    size = f" --{change.value_of[0]} N" if change.value_of else ""
                    raise FlagRefused(
                        f"{self.name} {version} has no --{change.new} ({change.since} on): --{change.old}{size}"
                    )
                continue
            spelled.pop(change.old, None)
            if value not in (None, False) and new in (None, False):  # as upstream's hook: a value of `new` stands
                sizes = [spelled.pop(name) for name in change.value_of if name in spelled]
                spelled[change.new] = (
                    next((size for size in sizes if size is not None), 1) if change.value_of else value
                )
        return spelled

    def group_of(self, flag: str) -> str:
        """The move a flag belongs to: topology, speculative, or the flag itself."""
        if flag in self.topology_flags():
            return "topology"
        if flag in self.speculative_flags:
            return "speculative"
        return flag

    def stage_reached(self, lines: list[str]) -> tuple[int, list[str]]:
        """How far a start-up got by this engine's own stage lines: the index past the last stage seen in order,
        and the stages seen."""
        seen, reached = [], 0
        for index, (stage, pattern) in enumerate(self.stages):
            if any(re.search(pattern, line) for line in lines):
                seen.append(stage)
                reached = index + 1
        return reached, seen

    def describe_flags(self, changed: dict[str, FlagValue]) -> str:
        """Flags as a person reads them in a legend or a table: the draft as method steps/topk/tokens."""
        draft = self.read_draft(changed)
        rest = {k: v for k, v in changed.items() if k not in self.speculative_flags}
        words = [f"--{k} {v}" if v is not True else f"--{k}" for k, v in rest.items() if v is not None]
        if draft:
            words.append(f"{draft.method} {draft.steps}/{draft.topk}/{draft.draft_tokens or draft.steps + 1}")
        return ", ".join(words)


def json_draft(flag: str) -> tuple[Callable, Callable]:
    """Draft spelling of an engine whose one flag holds the draft as JSON (vLLM's --speculative-config)."""

    def write(draft: Draft) -> dict[str, FlagValue]:
        config = {"method": draft.method, "num_speculative_tokens": draft.steps}
        return {flag: json.dumps(config)}

    def read(flags: dict[str, FlagValue]) -> Draft | None:
        value = flags.get(flag)
        if not isinstance(value, str):
            return None
        try:
            config = json.loads(value)
        except ValueError:
            return None
        steps = config.get("num_speculative_tokens") if isinstance(config, dict) else None
        return Draft(str(config.get("method")), int(steps)) if isinstance(steps, int) else None

    return write, read
