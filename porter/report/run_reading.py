"""A finished or running run directory, read for people: what the report, the plots, the HTML page and the PRs share.

Covers loading a run (task, state, and environment.json, metrics.jsonl and the transcript as run_records.py types
them), the baseline configuration (the first one measured), configurations named by what changed from the baseline
in the engine's CLI form plus the commits their trees hold (`--tp 4 --dp 2 + twin 50d0a05`), one colour per
configuration (its order of first measurement), which attempt a measurement belongs to, the start-ups the serve tool
recorded (log, key line, crash class), figures rounded to what the measurement supports (tok/s to 3 significant
figures, scores to 3 decimals with their 95% interval) and the lines of a server log around its key line, as the
engine printed them. Reads only; writes nothing; runs nothing.
"""

from __future__ import annotations

import ast
import functools
import math
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import git

from porter.ledger.records import Attempt
from porter.ledger.state import RunState
from porter.models.base import ToolCall
from porter.report.run_records import (
    Environment,
    Measurement,
    Recording,
    StartUpAt,
    ToolOutcome,
    Turn,
    read_metrics,
    read_recording,
)
from porter.sandbox.trees import safe_git
from porter.schema import FlagValue, is_env, render_flags, serve_env
from porter.task import Task, load_task
from porter.terminal import printable

# matplotlib's tab10, one per configuration in the order of first measurement (the plots and the HTML agree)
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
MARKDOWN_ACTIVE = re.compile(r"[\\`\[\]<>#|]")  # what Markdown or HTML acts on in a line of text
EXCERPT_BEFORE, EXCERPT_AFTER = 8, 4  # lines of a log shown around its key line
EXCERPT_WIDTH, KEY_LINE_WIDTH = 240, 2000


@dataclass
class RunRecord:
    run_dir: Path
    task: Task
    state: RunState
    metrics: list[Measurement]
    environment: Environment
    outcomes: list[ToolOutcome] = field(default_factory=list)  # the transcript's tool results, in order
    turns: list[Turn] = field(default_factory=list)  # the agent's replies, in order

    @property
    def baseline(self) -> str | None:
        """The configuration the run started from: the first one measured while nothing was pending."""
        first = next((m for m in self.metrics if not m.pending), None)
        return first.config if first else self.state.samples[0].config if self.state.samples else None

    def configurations(self) -> list[str]:
        """Every measured configuration, in the order of its first measurement."""
        seen = dict.fromkeys(m.config for m in self.metrics)
        return [fingerprint for fingerprint in seen if fingerprint]

    def colour(self, fingerprint: str) -> str:
        order = self.configurations()
        return PALETTE[order.index(fingerprint) % len(PALETTE)] if fingerprint in order else PALETTE[-1]

    def reverted(self, fingerprint: str) -> bool:
        """Measured only while pending, and never the configuration a later keep or the baseline is."""
        # a crash fix's attempt names the configuration it was served in, with flags that were not kept with it
        kept = {a.fingerprint for a in self.state.kept_attempts() if a.rule != "crash_fix"}
        kept |= {self.baseline, self.state.accepted_config}
        return fingerprint not in kept and all(m.pending for m in self.metrics if m.config == fingerprint)

    def flags_of(self, fingerprint: str | None) -> dict[str, FlagValue]:
        """A configuration's serve flags, in the task's order (a configuration keeps them sorted)."""
        config = self.state.configs.get(fingerprint or "")
        measured = [m.flags for m in self.metrics if m.config == fingerprint and m.flags is not None]
        flags = dict(config.flags if config else measured[0] if measured else self.task.serve.flags)
        order = list(self.task.serve.flags)
        return dict(sorted(flags.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order)))

    def label(self, fingerprint: str, since: str | None = None) -> str:
        """A configuration as what changed from another (the baseline unless `since`): CLI flags, then the commits
        its trees hold that the other's do not."""
        since = since or self.baseline
        if fingerprint == since:
            return "baseline" if since == self.baseline else "unchanged"
        words = cli_change(self.task, self.flags_of(since), self.flags_of(fingerprint))
        before = self.commits_in(since or "")
        held = self.commits_in(fingerprint)
        commits = {repo: [sha for sha in shas if sha not in before.get(repo, [])] for repo, shas in held.items()}
        parts = [words] if words else []
        for repo, shas in commits.items():
            path = self.state.repos[repo].path
            named = [f"{sha[:7]} ({', '.join(Path(f).name for f in _commit_files(path, sha))})" for sha in shas]
            parts += [f"{repo} {', '.join(named)}"] if named else []
        if fingerprint in self.state.configs and not any(commits.values()) and self._edited(fingerprint):
            parts.append(self._edit_label(fingerprint))
        return " + ".join(parts) or "baseline"

    def tried_on(self, fingerprint: str) -> str | None:
        """The accepted configuration when this one was first measured (what it changed): the baseline, then each
        keep, and whatever was measured as the accepted configuration."""
        first = next((m.step for m in self.metrics if m.config == fingerprint), 0)
        earlier = [config for step, config in self.accepted_events() if step < first and config != fingerprint]
        return earlier[-1] if earlier else self.baseline

    def accepted_events(self) -> list[tuple[int, str]]:
        """(step, configuration) whenever the accepted configuration is known: each measurement made while nothing
        was pending, and each keep that kept its flags (a crash fix names the configuration it was served in)."""
        events = [(m.step, m.config) for m in self.metrics if not m.pending]
        kept = [a for a in self.state.kept_attempts() if a.rule != "crash_fix" and a.fingerprint]
        return sorted([*events, *((a.step, a.fingerprint) for a in kept)], key=lambda event: event[0])

    def commits_in(self, fingerprint: str) -> dict[str, list[str]]:
        """Per repo, the run's commits a configuration's tree holds (its tree is that commit's or a later one's)."""
        config = self.state.configs.get(fingerprint)
        if config is None:
            return {}
        held: dict[str, list[str]] = {}
        for name, repo_state in self.state.repos.items():
            trees = _commit_trees(repo_state.path, tuple(repo_state.accepted))
            tree = config.repos.get(name)
            if tree in trees:
                held[name] = list(repo_state.accepted[: trees.index(tree) + 1])
        return held

    def files_of(self, attempt: Attempt) -> dict[str, list[str]]:
        """Per repo, the files a change edited: its commits' files, else (a reverted edit) those its moves name."""
        files = {name: _commit_files(self.state.repos[name].path, sha) for name, sha in attempt.commits.items()}
        for move in attempt.moves:  # "<repo>: a, b" (a flag group starts with "--")
            repo, separator, names = move.partition(": ")
            if separator and repo in self.state.repos and repo not in files:
                files[repo] = names.split(", ")
        return {name: names for name, names in files.items() if names}

    def _edit_label(self, fingerprint: str) -> str:
        """An edit that never became a commit, by the files the change that measured it named."""
        first = next((m.step for m in self.metrics if m.config == fingerprint), 0)
        attempt = next((a for a in self.state.attempts if a.step >= first), None)  # the decision it was evidence for
        files = self.files_of(attempt) if attempt else {}
        named = [f"{repo} edit ({', '.join(Path(name).name for name in names)})" for repo, names in files.items()]
        return " + ".join(named) or "uncommitted edit"

    def _edited(self, fingerprint: str) -> bool:
        baseline = self.state.configs.get(self.baseline or "")
        config = self.state.configs[fingerprint]
        return baseline is not None and any(config.repos.get(n) != t for n, t in baseline.repos.items())

    def startups(self, reduced: bool = False) -> list[StartUpAt]:
        """The serve tool's full start-ups, in order (a reduced one starts no configuration of the run); with
        `reduced`, the reduced ones among them (where a crash a fix cleared may have been met)."""
        return [o.startup for o in self.outcomes if o.startup is not None and (reduced or not o.reduced)]

    def _arguments(self, step: int, names: tuple[str, ...]) -> dict:
        """The arguments of the agent's first call at a step of one of these tools ({}: none)."""
        return next((c.arguments for t in self.turns if t.step == step for c in t.calls if c.name in names), {})

    def summary(self, step: int) -> str | None:
        """The agent's own summary of the change it asked to keep at a step (a commit's subject is cut at 72)."""
        summary = self._arguments(step, ("accept",)).get("summary")
        return readable(self.task, str(summary)) if summary else None

    def why(self, step: int) -> str:
        """What the agent said it was doing in the accept or revert call that ended an attempt."""
        arguments = self._arguments(step, ("accept", "revert"))
        return readable(self.task, str(arguments.get("why") or arguments.get("reason") or ""))

    def explanation(self, attempt: Attempt, files: list[str] | None = None) -> str:
        """Why the agent made this change, in its own words when it made it: the reply that came with the last
        edit or tune of the change's files (or of `files`, one PR's share of it), or with the last set_flags of its
        flags; else the accept's why."""
        if files is None:
            files = [name for names in self.files_of(attempt).values() for name in names]
        for turn in reversed([t for t in self.turns if t.step <= attempt.step]):
            for call in turn.calls:
                flags = call.arguments.get("flags") if call.name == "set_flags" else None
                if (files and self.edits(turn.step, call, files)) or (
                    isinstance(flags, dict) and attempt.flags and flags.keys() & attempt.flags.keys()
                ):
                    return readable(self.task, re.sub(r"^\[[\w:.-]+\]\s*", "", turn.text))  # a playbook's rule tag
        return self.why(attempt.step)

    def edits(self, step: int, call: ToolCall, files: list[str]) -> bool:
        """Whether a tool call wrote one of `files` (an edit, a patch, a write, or a tune that changed it)."""
        if call.name == "tune":
            tuned = [outcome.changed for outcome in self.outcomes if outcome.step == step]
            return any(set(names) & set(files) for changed in tuned for names in changed.values())
        text = str(call.arguments.get("path") or call.arguments.get("patch") or "")
        return call.name in ("edit_file", "apply_patch", "write_file") and any(f in text for f in files)


def read_run(run_dir: str | Path) -> RunRecord:
    run_dir = Path(run_dir)
    state = RunState.read(run_dir)  # first: an empty or foreign directory is named as such
    task = load_task(run_dir / "task.yaml")
    environment = Environment.read(run_dir / "environment.json")
    transcript = run_dir / "transcript.jsonl"
    recording = read_recording(transcript) if transcript.exists() else Recording()
    return RunRecord(run_dir, task, state, read_metrics(run_dir), environment, recording.outcomes, recording.turns)


@functools.cache
def _commit_trees(path: str, shas: tuple[str, ...]) -> list[str]:
    """The tree of each commit (cached: a report asks for every configuration)."""
    try:
        repo = safe_git.open_repo(path)
        return [repo.commit(sha).tree.hexsha for sha in shas]
    except (safe_git.UntrustedRepo, git.GitError, ValueError):
        return []


def _commit_files(path: str, sha: str) -> list[str]:
    try:
        return sorted(safe_git.open_repo(path).commit(sha).stats.files)
    except (safe_git.UntrustedRepo, git.GitError, ValueError):
        return []


def cli_change(task: Task, before: dict[str, FlagValue], after: dict[str, FlagValue]) -> str:
    """The flags that differ, as a command line reads them (`--tp 4 --dp 2`; a flag turned off: `no --dp`; a serve
    environment variable as `NAME=value`, or `unset NAME`). A draft reads whole: when one speculative flag moved,
    every speculative flag is shown."""
    changed = {k: v for k, v in after.items() if before.get(k) != v}
    speculative = task.engine.speculative_flags
    if any(k in speculative for k in changed):
        changed.update({k: after.get(k) for k in speculative if k in after})
    changed = {k: after.get(k) for k in after if k in changed}  # in the command's order
    set_now = {k: v for k, v in changed.items() if not _off(v)}
    words = [env_prefix(set_now), *render_flags(set_now)]
    off = [k for k, v in changed.items() if _off(v) and not _off(before.get(k))]
    words += [f"unset {k[1:]}" if is_env(k) else f"no --{k}" for k in off]
    return " ".join(word for word in words if word)


def _off(value: FlagValue) -> bool:
    return value is None or value is False  # not `in (None, False)`: 0 == False


def env_prefix(flags: dict[str, FlagValue]) -> str:
    """The serve process's environment entries of a flag set (`$NAME`), as a shell command's prefix."""
    return " ".join(f"{name}={shlex.quote(value)}" for name, value in serve_env(flags).items())


def readable(task: Task, text: str) -> str:
    """An agent's words as one line of Markdown for a person: the flag sets it wrote as Python dicts
    (`{'tp': 4, 'dp': 2}`) in CLI form and a tune named by its command, as code; the rest markdown_text."""
    commands = {tune.name: tune.command for tune in task.tune}
    names = "".join(f"|(?<![\\w-]){re.escape(name)}(?![\\w-])" for name in commands)
    parts, end = [], 0
    for match in re.finditer(r"\{'[\w.-]+': [^{}]{0,400}\}" + names, text):
        code = commands.get(match.group(0)) or _cli_form(task, match.group(0))
        shown = f"`{code}`" if code and "`" not in code else markdown_text(match.group(0))
        parts += [markdown_text(text[end : match.start()]), shown]
        end = match.end()
    return "".join([*parts, markdown_text(text[end:])]).strip()


def _cli_form(task: Task, written: str) -> str | None:
    try:
        flags = ast.literal_eval(written)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(flags, dict) or not all(isinstance(key, str) for key in flags):
        return None
    return " ".join(cli_change(task, {}, flags).split())


def markdown_text(text: str) -> str:
    """Text from an agent or a file as inline Markdown showing the same characters: one line (no heading, list,
    table row or comment of its own), every character Markdown or HTML acts on backslash-escaped (CommonMark
    escapes any ASCII punctuation; GitHub's table cells take `\\|`)."""
    return MARKDOWN_ACTIVE.sub(r"\\\g<0>", re.sub(r"\s+", " ", str(text)))


def markdown_table(header: str, rows: Iterable[Iterable[object]]) -> list[str]:
    """A Markdown table's lines: `header` spelled 'a | b | c', then a line per row, each cell on one line with no
    pipe of its own (shown as /) and - where empty."""
    lines = [f"| {header} |", "|---" * (header.count(" | ") + 1) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(" ".join(str(cell).split()).replace("|", "/") or "-" for cell in row) + " |")
    return lines


def significant(value: float | None, digits: int = 3) -> str:
    """A figure to `digits` significant figures, never in exponent form: 854.509 -> 855, 1944.4 -> 1,940."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(digits - 1 - magnitude, 0)
    rounded = round(value, digits - 1 - magnitude)
    return f"{rounded:,.{decimals}f}"


def percent(change: float | None) -> str:
    if change is None or not math.isfinite(change):
        return "-"
    return f"{change:+.0%}" if abs(change) >= 0.1 else f"{change:+.1%}"


def log_excerpt(
    run_dir: Path, log: str, key_line: str | None, before: int = EXCERPT_BEFORE, after: int = EXCERPT_AFTER
) -> list[str]:
    """The lines of a server log around its key line, as the engine printed them (control characters made
    printable, very long lines cut). The last lines when the key line is not found."""
    path = (run_dir / log).resolve()
    if not path.is_relative_to(run_dir.resolve()) or not path.is_file():
        return []
    with path.open(encoding="utf-8", errors="replace") as handle:
        lines = [line.rstrip("\n") for line in handle]
    needle = (key_line or "").strip()
    at = next((i for i in range(len(lines) - 1, -1, -1) if needle and needle in lines[i]), len(lines) - 1)
    start = max(at - before, 0)
    shown = lines[start : at + after + 1]
    # the key line whole (it is what the PR is about), the others cut: a log line can be a megabyte
    return [printable(line)[: KEY_LINE_WIDTH if start + i == at else EXCERPT_WIDTH] for i, line in enumerate(shown)]
