"""The playbook: a rule-based Model for the failure classes with known remedies. No network, no key.

It reads the conversation the loop keeps (every tool result carries its facts and the run's status as a
field of the message, read once per call into `Event`s by playbook_history.py) and answers with the next tool call.
Rules are keyed by triage class and use the triage's facts (file, header, module names, shapes, flags), never an
engine's file names or a scenario's text:
- missing CUDA-only header under ROCm -> guard the include with the ROCm macro and the HIP header;
- weight-load shape mismatch on a module the quantization config meant to keep unquantized, registered
  under another prefix -> add its exclude entries under the engine's prefix (exact names or `re:`);
- slow fallback for a shape -> run the task's tuning command for that shape (again for a shape it did not answer),
  after the TP x DP splits the search has yet to try (a tuned config is per rank's shape);
- out of memory -> the next lower value of a memory tunable the log names; an unsupported kernel or
  backend -> another allowed value of the flag the log names;
- below target or open (as high as the budget allows) -> walk the tunables (speculative decoding for single stream,
  deepest draft first, topology then KV dtype and the rest for throughput), measure, and let porter keep or revert.
A source fix is served reduced first (the engine's reduced start-up): a crash met there is fixed there too, and only a
fix that passes (or that reduced cannot judge) pays for a full start-up, the only kind accept reads.
When no rule applies it says why and finishes, or hands the run to the LLM named after `+`. Multi-step rules carry
their stage in the reply text (`[playbook:rule:stage]`), so a resumed run continues (a call cut by the interruption
is served again); the remedies (names, aliases, searches) are pure functions in remedies.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from itertools import count

from porter.models import remedies
from porter.models.base import Finding, Message, Model, Reply, StatusFacts, ToolCall, ToolSpec, Usage
from porter.models.playbook_history import Event, parse_history
from porter.task import Task


@dataclass
class Action:
    tool: str
    arguments: dict
    why: str
    tag: tuple[str, str] | None = None


class PlaybookModel:
    """Model protocol; `handover` (an LLM) takes over for good when no rule applies."""

    def __init__(self, task: Task, handover: Model | None = None):
        self.task = task
        self.handover = handover
        self.name = "playbook" + (f"+{handover.name}" if handover else "")
        self._ids = count(1)
        self._handed_over = False

    def step(self, messages: list[Message], tools: list[ToolSpec]) -> Reply:
        if self._handed_over:
            return self.handover.step(messages, tools)
        history = parse_history(messages)
        playbook = Playbook(self.task, history)
        action = playbook.decide()
        if action.tool == "finish" and self.handover is not None and not playbook.status.all_met():
            self._handed_over = True
            note = Message("user", f"The rule-based playbook stopped: {action.why}. You take over from here.")
            return self.handover.step([*messages, note], tools)
        tag = f"[playbook:{action.tag[0]}:{action.tag[1]}] " if action.tag else ""
        call = ToolCall(f"pb-{len(history) + 1}-{next(self._ids)}", action.tool, action.arguments)
        return Reply(text=f"{tag}{action.why}", tool_calls=[call], usage=Usage(cost_usd=0.0))


class Playbook:
    """One decision from the history: the next action."""

    def __init__(self, task: Task, history: list[Event]):
        self.task = task
        self.history = history
        self.last = history[-1] if history else None
        # the run's status as the latest result that carries one reported it
        self.status = next((event.status for event in reversed(history) if event.status), StatusFacts())

    def decide(self) -> Action:
        if self.last is None:
            return Action("serve", {}, "bring the server up with the baseline flags")
        if self.last.tag and self.last.tag[1] != "done" and self.last.ok:
            return self._continue_rule()
        if not self.last.ok and self.last.name not in ("serve", "run_check"):
            return self._after_failure()
        handler = getattr(self, f"_after_{self.last.name}", None)
        return handler() if handler else self._serve_or_measure()

    # ------------------------------------------------------------ after each tool

    def _after_serve(self) -> Action:
        if self.last.arguments.get("reduced") and self.last.reduced in ("healthy", None):  # passed, or did not run
            return Action("serve", {}, "the fix passes the engine's reduced start-up: a full start-up judges it")
        return self._measure() if self.last.serve.healthy else self._on_crash()

    def _after_run_check(self) -> Action:
        if not self.last.ok:
            return self._after_failure()
        if self.status.pending:
            return self._accept("the pending change has been measured; porter decides whether it is kept")
        return self._measure()

    def _after_accept(self) -> Action:
        if self.status.pending:
            return Action("serve", {}, "the fix was kept; serve again with the flags still pending")
        # a fix that made the server start leaves the checks never measured to do; a crash fix kept as its own commit
        # while its flags were reverted leaves an accepted configuration with no figures for the next move to beat
        if self.last.kept or self._accepted_unmeasured():
            return self._measure()
        return self._next_candidate()

    def _after_revert(self) -> Action:
        if not any(event.name == "serve" and event.serve.healthy for event in self.history):
            crash = self._crash_finding().category or "a crash"
            reason = f"the server never started: the fix tried for {crash} was reverted and no other rule covers it"
            return Action("finish", {"reason": reason}, "a flag search needs a server that starts")
        # a crash fix committed before its flags were reverted: a new configuration
        return self._measure() if self._accepted_unmeasured() else self._next_candidate()

    def _accepted_unmeasured(self) -> bool:
        """A target with no sample on the accepted configuration (measured only on another, or never)."""
        if self.status.phase == "bring-up":
            return False
        return any(target.key not in self.status.accepted_checks for target in self.status.targets)

    def _serve_or_measure(self) -> Action:
        if self.last.name == "edit_file" and self.last.tag:  # a rule's source fix of a crash
            why = "check the fix on the engine's reduced start-up: only a fix that passes there pays for a full one"
            return Action("serve", {"reduced": True}, why)
        if self.last.name in ("set_flags", "edit_file", "apply_patch", "tune"):
            return Action("serve", {}, "apply the change: restart the server")
        return self._measure()

    def _after_failure(self) -> Action:
        if self.last.interrupted:  # the run was stopped mid-call and resumed, the server with it
            return Action("serve", {}, "resumed after an interruption: serve again, then measure")
        if self.status.pending:
            return Action("revert", {}, f"{self.last.name} failed; drop the pending change")
        return Action("finish", {"reason": f"{self.last.name} failed and no rule covers it"}, "nothing left to try")

    # ------------------------------------------------------------ crashes

    def _on_crash(self) -> Action:
        crash = self.last.serve.crash_class or "other"
        finding = self.last.serve.finding
        if self._rule_already_tried(self.last.serve.signature):
            return self._give_up_crash(crash, "its fix did not remove it")
        rule = CRASH_RULES.get(crash)
        action = rule(self, finding) if rule else None
        if action is None and self.last.reduced:  # the reduced mode's own crash, or one it cannot judge
            return Action("serve", {}, f"no rule covers {crash} on the reduced start-up: a full one judges the fix")
        return action or self._give_up_crash(crash, "no playbook rule covers it")

    def _rule_already_tried(self, signature: str | None) -> bool:
        """The same crash (full or reduced, other crashes between) after a fix of ours since the last decision."""
        if signature is None:
            return False
        for index in reversed(range(len(self.history) - 1)):
            event = self.history[index]
            if event.name in ("accept", "revert"):
                return False
            if event.name == "serve" and event.serve.signature == signature:
                return any(later.tag for later in self.history[index + 1 : -1])
        return False

    def _give_up_crash(self, crash: str, reason: str) -> Action:
        if self.status.pending:
            return Action("revert", {}, f"{crash}: {reason}; revert the change that led here")
        return Action("finish", {"reason": f"the server fails with {crash} and {reason}"}, "stop")

    def _guard_rule(self, finding: Finding) -> Action | None:
        header = finding.facts.get("header")
        path = remedies.repo_path([repo.path for repo in self.task.repos], finding.facts.get("file"))
        if not header or header not in remedies.HIP_HEADERS or path is None:
            return None
        return Action("read_file", {"path": path}, f"read {path} to guard <{header}> for ROCm", ("guard", "read"))

    def _exclude_rule(self, finding: Finding) -> Action | None:
        names = remedies.renamed_module(finding.facts)
        if names is None or not re.fullmatch(r"[\w.]+", names[3]):
            return None
        checkpoint_prefix = names[3]
        roots = " ".join(repo.path for repo in self.task.patchable_repos())
        patterns = "--include=*.json --include=*.yaml --include=*.yml"
        spelled = r"(\\)*\.".join(re.escape(part) for part in checkpoint_prefix.split("."))  # also as a re: entry
        command = f"grep -rlE {patterns} -- '{spelled}' {roots} | xargs -r grep -lw exclude | head -5"
        why = f"find the quantization config that names {checkpoint_prefix}.* (the checkpoint's prefix)"
        return Action("bash", {"command": command}, why, ("exclude", "find"))

    def _memory_rule(self, finding: Finding) -> Action | None:
        """Out of memory: lower the memory tunable the log names, else the task's static-memory fraction
        (a tunable named like mem-fraction-static or gpu-memory-utilization)."""
        named = self._step_flag(finding.text, lower=True)
        if named:
            return named
        memory_flags = [flag for flag in self.task.serve.tunables if "mem" in flag]
        return self._step_flag(json.dumps({"flags": memory_flags}).lower(), lower=True) if memory_flags else None

    def _switch_flag_rule(self, finding: Finding) -> Action | None:
        return self._step_flag(finding.text, lower=False)

    def _step_flag(self, finding_text: str, lower: bool) -> Action | None:
        """Move a tunable the failure names, or one the engine reports having chosen itself ("Attention backend:
        triton" with the flag unset), to another allowed value: the next lower one for memory, else the first
        allowed value that is neither set nor in use."""
        for flag, values in self.task.serve.tunables.items():
            current = self.status.flags.get(flag)
            mentions = self.last.serve.flag_mentions.get(flag, [])
            # what the engine chose itself, not us
            in_use = [v for v in remedies.values_in_use(values, mentions) if v != current]
            if flag not in finding_text and flag.replace("-", "_") not in finding_text and not in_use:
                continue
            value = remedies.next_flag_value(values, current, in_use, lower)
            if value is not None:
                why = f"the failure names {flag}" + (f" (in use: {in_use[0]})" if in_use else "")
                return Action("set_flags", {"flags": {flag: value}}, f"{why}; try {value}", ("flag", "done"))
        return None

    # ------------------------------------------------------------ multi-step rules

    def _continue_rule(self) -> Action:
        rule, stage = self.last.tag
        if rule == "guard":
            return self._guard_edit()
        if rule == "exclude" and stage == "find":
            return self._exclude_read()
        if rule == "exclude" and stage == "read":
            return self._exclude_edit()
        return Action("serve", {}, "apply the change: restart the server")

    def _crash_finding(self) -> Finding:
        """The primary finding of the latest launch that crashed."""
        crashed = [event for event in self.history if event.name == "serve" and not event.serve.healthy]
        return crashed[-1].serve.finding if crashed else Finding()

    def _guard_edit(self) -> Action:
        facts = self._crash_finding().facts
        header, macro = facts["header"], facts.get("macro") or "USE_ROCM"
        edit = remedies.guarded_include(remedies.file_lines(self.last.text), header, macro)
        if edit is None:
            return self._after_failure()
        arguments = {"path": self.last.arguments["path"], "old": edit[0], "new": edit[1]}
        why = f"guard <{header}> with {macro}; ROCm builds get <{remedies.HIP_HEADERS[header]}>"
        return Action("edit_file", arguments, why, ("guard", "done"))

    def _exclude_read(self) -> Action:
        paths = [line.strip() for line in self.last.text.splitlines()[1:] if line.strip().startswith("/")]
        if not paths:
            return self._after_failure()
        return Action("read_file", {"path": paths[0]}, "read the exclude list", ("exclude", "read"))

    def _exclude_edit(self) -> Action:
        engine_name, checkpoint_name, engine_prefix, checkpoint_prefix = remedies.renamed_module(
            self._crash_finding().facts
        )
        lines = remedies.file_lines(self.last.text)
        edit = remedies.exclude_alias_edit(lines, checkpoint_prefix, engine_prefix, checkpoint_name)
        if edit is None:
            return self._after_failure()
        why = (
            f"the quantization config keeps {checkpoint_prefix}.* modules unquantized, but the engine registers "
            f"this one as {engine_name}; exclude its module group under that prefix too, as the loader matches "
            "entries (exact names or re:)"
        )
        arguments = {"path": self.last.arguments["path"], "old": edit[0], "new": edit[1]}
        return Action("edit_file", arguments, why, ("exclude", "done"))

    # ------------------------------------------------------------ measuring and searching

    def _measure(self) -> Action:
        """Measure what the current state still lacks; with nothing to measure, pick the next candidate."""
        if self.status.server != "healthy":
            return Action("serve", {}, "the server is not running; start it")
        measured = self.status.accepted_checks
        if self.status.pending:
            if self.status.phase == "bring-up":  # the accepted configuration never served: starting is the gain
                return self._accept("the server starts now; porter checks quality and decides")
            kind = self._candidate_goal()
            return Action("run_check", {"kind": kind}, f"measure the pending change ({kind})")
        checks = self.task.checks
        wanted = [
            ("quality", bool(checks.quality) and not any(k.startswith("quality:") for k in measured)),
            ("single_stream", checks.single_stream is not None and "single_stream" not in measured),
            ("throughput", checks.throughput is not None and "throughput" not in measured),
        ]
        for kind, missing in wanted:
            if missing:
                return Action("run_check", {"kind": kind}, f"baseline: measure {kind}")
        return self._next_candidate()

    def _next_candidate(self) -> Action:
        unmet = self.status.unmet()
        moves = self._fresh_moves(unmet)
        splits = remedies.topologies(self.task.serve.tunables, self.task.hardware.count, self.task.engine)
        tune = self._tune_candidate()
        # a tuned kernel config is per rank's shape: the tuning command waits for the TP x DP split the search keeps
        # (tuned at TP8 first, it did not pay there and ran again after the split)
        if tune and not any(goal == "throughput" and move in splits for goal, move in moves):
            return tune
        if moves:
            goal, candidate = moves[0]
            return Action("set_flags", {"flags": candidate}, f"try {candidate} for {goal}", ("search", goal))
        if not unmet:
            return Action("finish", {"reason": "every target is met"}, "done")
        tried = [e.arguments.get("flags") for e in self.history if e.name == "set_flags"]
        goal = "throughput" if "throughput" in unmet else "single_stream"
        for pair in remedies.pair_candidates(self._reverted_moves(), tried):
            why = f"each move of {pair} stalled alone; try them together, judged as one stack"
            return Action("set_flags", {"flags": pair}, why, ("search", goal))
        return Action("finish", {"reason": f"targets still unmet ({sorted(unmet)}) and no candidate is left"}, "stop")

    def _fresh_moves(self, unmet: set[str]) -> list[tuple[str, dict]]:
        """(goal, flags) moves not judged for that goal yet (fp8 KV may not move a prefill-bound knee and still speed
        up decode), held by neither the baseline nor the served flags; nothing is pending when a move is picked."""
        tried_for = [(e.tag[1], e.arguments.get("flags")) for e in self.history if e.name == "set_flags" and e.tag]
        held = (self.task.serve.flags, self.status.flags)
        return [
            (goal, move)
            for goal, move in remedies.flag_candidates(self.task, unmet)
            if (goal, move) not in tried_for and not any(remedies.holds_all(flags, move) for flags in held)
        ]

    def _reverted_moves(self) -> list[dict]:
        """Flag candidates of the search that porter reverted (not kept by accept, or reverted outright)."""
        reverted, candidate = [], None
        for event in self.history:
            if event.name == "set_flags" and event.tag and event.tag[0] == "search":
                candidate = event.arguments.get("flags")
            elif event.name in ("accept", "revert") and candidate is not None:
                if event.name == "revert" or not event.kept:
                    reverted.append(candidate)
                candidate = None
        return reverted

    def _tune_candidate(self) -> Action | None:
        """A slow-fallback warning in the last healthy start, and a tuning command not yet run for its shape (a
        command reverted at one configuration runs again when a later one reports another shape: TP4's width)."""
        serve = next((e for e in reversed(self.history) if e.name == "serve" and e.serve.healthy), None)
        tried = self._tuned_shapes()
        for shape in serve.serve.untuned_shapes() if serve else []:
            done = {name for name, signature in tried if signature == remedies.shape_signature(shape)}
            spec = remedies.tuning_command_for(self.task, [str(v) for v in shape.values()], exclude=done)
            if spec:
                dims = ", ".join(f"{k}={v}" for k, v in shape.items() if str(v).isdigit() and int(v) > 1)
                why = f"the engine has no tuned config for ({dims}) and falls back to a slow path: run {spec.name}"
                return Action("tune", {"name": spec.name}, why, ("search", "throughput"))
        return None

    def _tuned_shapes(self) -> set[tuple[str, tuple]]:
        """(tuning command, shape) pairs already run: each tune answered the shapes its last healthy start showed."""
        tried, serve = set(), None
        for event in self.history:
            if event.name == "serve" and event.serve.healthy:
                serve = event
            elif event.name == "tune":
                shapes = serve.serve.untuned_shapes() if serve else []
                tried |= {(event.arguments.get("name"), remedies.shape_signature(shape)) for shape in shapes}
        return tried

    def _candidate(self) -> Event | None:
        for event in reversed(self.history):
            if event.tag and event.tag[0] == "search":
                return event
            if event.name in ("accept", "revert"):
                return None
        return None

    def _candidate_goal(self) -> str:
        declared = [kind for kind in ("single_stream", "throughput") if getattr(self.task.checks, kind)]
        candidate = self._candidate()
        goal = candidate.tag[1] if candidate else None
        return goal if goal in declared else (declared[0] if declared else "quality")

    def _changes_since_decision(self) -> list[Event]:
        """The changes made since the last accept or revert: what an accept now would keep."""
        changes: list[Event] = []
        for event in self.history:
            if event.name in ("accept", "revert"):
                changes = []
            elif event.name in ("set_flags", "edit_file", "apply_patch", "tune") and event.ok:
                changes.append(event)
        return changes

    def _accept(self, why: str) -> Action:
        return Action("accept", {"summary": self._candidate_summary(), "why": self._candidate_why()}, why)

    def _candidate_summary(self) -> str:
        changes = self._changes_since_decision()
        fixes = [e for e in changes if e.name in ("edit_file", "apply_patch")]
        if fixes:  # one bring-up may stack fixes in two repos (the checkpoint's config, a kernel): each is named
            subjects = [remedies.fix_subject(e.tag[0] if e.tag else "fix", e.arguments) for e in fixes]
            return "; ".join(dict.fromkeys(subjects))
        tunes = [e for e in changes if e.name == "tune"]
        if tunes:
            return f"Add the tuned config written by {tunes[-1].arguments['name']}"
        flags: dict = {}
        for event in changes:
            flags.update(event.arguments.get("flags") or {})
        return "Serve with " + (", ".join(f"--{k} {v}" for k, v in flags.items()) or "the pending flags")

    def _candidate_why(self) -> str:
        since = self.history.index(self._candidate()) if self._candidate() else 0
        reasons = [e.why for e in self.history[since:] if e.tag and e.why]
        return "; ".join(dict.fromkeys(reasons))


CRASH_RULES = {
    "missing_rocm_guard": Playbook._guard_rule,
    "shape_mismatch": Playbook._exclude_rule,
    "quant_config_mismatch": Playbook._exclude_rule,
    "out_of_memory": Playbook._memory_rule,
    "unsupported_arch_or_kernel": Playbook._switch_flag_rule,
    "dtype_unsupported": Playbook._switch_flag_rule,
    "compile_error": Playbook._switch_flag_rule,
}
