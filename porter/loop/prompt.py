"""What the model is told when a run starts: the system prompt and the task message.

Rendered once per run from the task and one probe of the sandbox: the targets with each check's
workload and SLO, the serve command exactly as porter will run it, tunables and baseline flags as JSON
(null = the flag is left out), the rules between flags, what each action costs here, the workflow, the
programs the sandbox has, and the task author's notes as hints to verify rather than orders. Does not
cover what tools return (tools.py, observations.py) or the loop (agent.py).
"""

from __future__ import annotations

import json
import re

from porter.checks import registry
from porter.engines import flag_rules, serve
from porter.ledger import noise
from porter.loop.run_context import RunContext
from porter.loop.tools import run_status
from porter.models import Message
from porter.task import Task

# Programs a model reaches for; the probe says which the image has so it does not guess (no curl, say).
PROGRAMS = ("python3", "pip", "git", "grep", "rg", "sed", "awk", "find", "curl", "wget", "gcc", "g++", "make", "hipcc")

SYSTEM_PROMPT = """\
You are porter, an inference engineer porting {model_id} to {gpus} serving. You act through tools in a
sandbox built from the serving image. Goal: a healthy server that meets every target, with quality no worse
than the reference, reached by the smallest changes upstream would merge.

Targets, and how each is measured (run_check measures from the host against the running server):
{targets}

Serve command, as porter runs it with the baseline flags:
  {command}
The task's search space (JSON: flag -> values; null = the flag is left out): {tunables}
It is not a fence: set_flags also takes any other flag the engine's own parser accepts (checked in the sandbox
first) and environment variables of the serve process as $NAME (e.g. {{"$SOME_ENGINE_OPTION": "false"}}).
Rules between flags (set_flags refuses a set that breaks one; set related sizes in one call): {rules}
Tuning commands (`tune NAME`; run one only when a log shows it applies): {tune}
Repos you may patch (sandbox paths; porter commits what you accept): {repos}
Programs in the sandbox: {programs}. Server logs stay on the host: read them with read_log, not bash.

What each action costs here:
{costs}

Workflow: reproduce (serve the baseline and read what fails) -> read (read_log, read_file, bash grep) ->
the smallest fix (edit_file / apply_patch for source and configs, set_flags for flags) -> serve -> measure
(run_check) -> accept, or revert. accept measures the quality checks itself when they are missing, and tops up
a speed check run once to its minimum samples: a crash or quality fix needs no run_check before accept, a speed
change one run_check per speed check. Measure the baseline before changing anything for speed. Change one thing
at a time, so a measurement says what it was for.

Rules porter enforces: a pending change (diffs + flags) is kept by `accept` only on evidence porter owns,
and every accept and revert names the rule that decided it: a change that removes the crash of the accepted
configuration (crash_gone), or, when the accepted configuration crashed too, gets further by the engine's own
start-up stage lines (crash_progress; lines your change prints itself do not count); a source fix that makes
the accepted tree start with flags that crashed it is committed on its own (crash_fix), whatever becomes of
those flags; a quality check that failed passes beyond its interval (quality_restored); or throughput /
single-stream speed improves beyond noise with quality within tolerance (gain). A change that crashes where
the accepted configuration starts is never kept.{speed_rules} Serve after every change before measuring. porter
ends the run itself once the accepted configuration meets every target; when nothing sensible is left to try, call
finish with the reason.
"""

# Said only when a target is a speed: on a task whose targets are all quality it is text to read past.
SPEED_RULES = """ Beyond noise means past a bar: the larger of {min_gain} and a 95% bound from the spread of both
configurations' samples (plus {steps} x the knee's bracket for a sweep, whose knee is only known to a bracket); each
accept and revert states the bar. Every speed check measured on both configurations is compared: one that gets worse
beyond noise is accepted only as a trade, when each of its new samples still meets its target."""


def system_prompt(ctx: RunContext, programs: str) -> str:
    task = ctx.task
    targets = [f"- {row.target}: goal {row.goal}" for row in run_status(ctx)["targets"]]
    per_node = f" per node x {task.hardware.nodes} nodes" if task.hardware.nodes > 1 else ""
    speed = has_speed_target(task)
    return SYSTEM_PROMPT.format(
        model_id=task.model.id,
        gpus=f"{task.hardware.count}x {task.hardware.gpu}{per_node}",
        targets="\n".join(targets + workload_lines(task)) or "- none declared",
        command=serve.render_command(task, task.serve.flags),
        tunables=json.dumps(task.serve.tunables) if task.serve.tunables else "none",
        rules="; ".join(flag_rules.describe(task)) or "none",
        tune="; ".join(f"{t.name}: {' '.join(t.description.split())}" for t in task.tune if speed) or "none",
        repos=", ".join(f"{r.name} at {r.path}" for r in task.patchable_repos()) or "none",
        programs=programs,
        costs="\n".join(cost_lines(task, speed)),
        speed_rules=speed_rules(task) if speed else "",
    )


def speed_rules(task: Task) -> str:
    return SPEED_RULES.format(min_gain=f"{task.checks.min_improvement:.0%}", steps=f"{noise.RESOLUTION_STEPS:g}")


def has_speed_target(task: Task) -> bool:
    """Whether a declared check measures speed (throughput, single stream): tuning and the noise bar matter then."""
    return any(item.kind.performance for item in registry.declared(task))


def workload_lines(task: Task) -> list[str]:
    """What each declared check sends, as its kind says it."""
    return [f"  {item.kind.workload(item.spec)}" for item in registry.declared(task)]


def cost_lines(task: Task, speed: bool = True) -> list[str]:
    limits = task.agent.limits
    lines = [
        f"- serve: a start-up can take up to {task.serve.startup_timeout_s:g} s (the first one tells you how long); "
        f"{limits.max_relaunches} launches in all; `serve` with reduced: true checks a crash fix on the engine's "
        "reduced start-up (random weights, a few layers; it says when the crash does not reproduce there) in a "
        "fraction of that, so only a fix that passes there pays for a full start-up (the only kind accept reads)",
    ]
    lines += [f"- {item.kind.cost(item.spec, task)}" for item in registry.declared(task)]
    if speed:
        lines += [f"- tune {spec.name}: up to {spec.timeout_s:g} s; it stops the server" for spec in task.tune]
        lines.append(one_batch_line(task))
    lines.append(
        f"- the run: {limits.max_steps} model calls, {limits.max_wall_hours:g} h, ${limits.max_cost_usd:g}; "
        "bash, read_file, read_log and edits are cheap"
    )
    return lines


def one_batch_line(task: Task) -> str:
    """What one batch costs, the engine's way: its own one-batch benchmark (engines/*.py `one_batch`), named as this
    image runs it when the task launches the engine under another package than upstream's (`python3 -m
    twin.launch_server` for sglang's `python3 -m sglang.launch_server`: the benchmark sits beside it)."""
    engine, command = task.engine, task.engine.one_batch
    upstream = re.search(r"-m (\w+)\.launch_server", engine.launch)
    here = re.search(r"-m (\w+)\.launch_server", task.serve.command)
    if upstream and here and upstream.group(1) != here.group(1):
        command = command.replace(f"-m {upstream.group(1)}.", f"-m {here.group(1)}.")
    return (
        f"- what one batch costs, from the engine's own benchmark in bash: {command}. Upstream {engine.name} has it "
        "on a real node too; it starts an engine of its own on the GPUs (on a node, with the memory a running "
        "server does not hold)"
    )


def probe_programs(ctx: RunContext) -> str:
    """Which of PROGRAMS the sandbox has: "has ...; lacks ...". A ROCm image keeps its toolchain in $ROCM_PATH/bin
    (default /opt/rocm), often off PATH, where the engine's JIT builds still find hipcc: said with its path."""
    words = " ".join(PROGRAMS)
    rocm_bins = '"${ROCM_PATH:-/opt/rocm}/bin" /opt/rocm/bin'
    # `; true`: the loop's status is that of the last program probed, which may well be missing
    result = ctx.sandbox.exec(
        f"for p in {words}; do if command -v $p >/dev/null 2>&1; then echo $p; else for d in {rocm_bins}; do "
        '[ -x "$d/$p" ] && echo "$p=$d/$p" && break; done; fi; done; true',
        timeout=30,
    )
    found = dict(line.partition("=")[::2] for line in result.output.split()) if result.exit_code == 0 else {}
    has = [f"{name} (at {found[name]}, not on PATH)" if found[name] else name for name in PROGRAMS if name in found]
    lacks = [name for name in PROGRAMS if name not in found]
    return f"has {', '.join(has) or 'none of the usual'}; lacks {', '.join(lacks) or 'nothing of those'}"


def first_messages(ctx: RunContext) -> list[Message]:
    task = ctx.task
    hints = " ".join(task.description.split())
    note = f"\nNotes from the task's author (hints to verify, not instructions): {hints}" if hints else ""
    return [
        Message("system", system_prompt(ctx, probe_programs(ctx))),
        Message(
            "user",
            f"Task {task.name}.{note}\nPhase: bring-up. Start by serving with the baseline flags "
            f"{json.dumps(ctx.state.flags)}.",
        ),
    ]
