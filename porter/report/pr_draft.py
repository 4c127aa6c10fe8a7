"""`porter pr RUN`: one PR draft per change set of each repo, written for that project's maintainer.

Covers `prs/<repo>.md` (or `prs/<repo>-<n>.md` when a repo's commits make several change sets: pr_series.py
groups them) and `patches/<repo>/000N-*.patch`. Each draft reads in the project's own shape (an engine's title tag
and headings are its declaration's `pr_style`; the model overlay's: a Hugging Face Hub PR with the commands that
open it): a title from the records (the crash class and the file fixed, or the tuned file
and the model), the problem with the engine's own log lines around the crash's key line, the root cause (the
key line and the code the log names, or the agent's explanation), the fix in the agent's words from when it made
the edit, the files changed, a before -> after table of this change set's own commits only (the figures
of the configuration before and after each, with n and the noise bar, or the crash and the healthy start),
the accuracy, how it was tested, the environment and a reproduction in upstream's tools (pr_reproduce.py),
and `Signed-off-by` when the task asks. With `--push REMOTE` the exported series is pushed. Reads the run's
records and the repos' host trees; writes only under the run directory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import git

from porter.checks import registry
from porter.checks.kind import goal_text
from porter.engines.engine import PrStyle
from porter.ledger.records import RULES, Attempt
from porter.report import pr_reproduce, pr_series, run_reading
from porter.report.pr_series import ChangeSet
from porter.report.run_reading import RunRecord, cli_change, log_excerpt, percent, read_run, readable, significant
from porter.report.run_records import StartUpAt, ToolOutcome
from porter.sandbox.trees import safe_git
from porter.sandbox.trees.tracked import PORTER_AUTHOR, RepoState
from porter.task import OVERLAY_REPO, TuneSpec

CRASH_RULES = ("crash_fix", "crash_gone", "crash_progress")
WORDS = {"rocm": "ROCm", "cuda": "CUDA", "gpu": "GPU", "perf": "performance", "moe": "MoE", "kv": "KV"}


HUB = PrStyle(  # the model overlay's PR, on the Hugging Face Hub
    "",
    (
        ("What this fixes", ("problem", "cause")),
        ("The change", ("fix",)),
        ("Evidence", ("speed", "accuracy", "tested")),
        ("Reproduction", ("environment", "reproduce")),
        ("How to open this PR on the Hub", ("hub",)),
    ),
)


@dataclass
class Draft:
    """What one PR's parts read: the run, the repo, the change set and the attempts that kept its commits."""

    record: RunRecord
    repo: git.Repo
    repo_state: RepoState
    change: ChangeSet
    attempts: list[Attempt]
    style: PrStyle
    file_name: str
    where: dict[str, str] = field(default_factory=dict)  # every run commit -> the draft that holds it

    @property
    def crash(self) -> Attempt | None:
        return next((a for a in self.attempts if a.rule in CRASH_RULES and a.crash_class), None)


def write_prs(run_dir: str | Path, push_remote: str | None = None) -> list[Path]:
    record = read_run(run_dir)
    prs_dir = record.run_dir / "prs"
    prs_dir.mkdir(exist_ok=True)
    for old in prs_dir.glob("*.md"):
        old.unlink()  # a change set that is gone (a rerun of `porter pr`) must not leave its draft behind
    changed = [name for name, repo_state in record.state.repos.items() if repo_state.accepted]
    drafts, tips = [], {}
    for name in changed:
        repo_state = record.state.repos[name]
        repo = safe_git.open_repo(repo_state.path)
        sets, tips[name] = pr_series.export(repo, repo_state, record.task.outputs, record.run_dir / "patches" / name)
        for index, change in enumerate(sets, start=1):
            file_name = f"{name}.md" if len(sets) == 1 else f"{name}-{index}.md"
            drafts.append(_draft(record, repo, repo_state, change, file_name))
    where = {c.hexsha: d.file_name for d in drafts for c in d.change.commits}  # a commit -> its PR's draft
    for draft in drafts:
        draft.where = where
        (prs_dir / draft.file_name).write_text(describe(draft), encoding="utf-8")
    if push_remote:
        for name in changed:
            branch = record.state.repos[name].branch
            repo = safe_git.open_repo(record.state.repos[name].path)
            pr_series.push(repo, tips[name], push_remote, f"{name}/{branch}" if len(changed) > 1 else branch)
    return [prs_dir / draft.file_name for draft in drafts]


def _draft(record: RunRecord, repo: git.Repo, repo_state: RepoState, change: ChangeSet, file_name: str) -> Draft:
    shas = {c.hexsha for c in change.commits}
    attempts = [a for a in record.state.attempts if a.kept and a.commits.get(repo_state.name) in shas]
    is_model = repo_state.name == OVERLAY_REPO and record.task.model.overlay
    style = HUB if is_model else record.task.engine.pr_style
    return Draft(record, repo, repo_state, change, attempts, style, file_name)


def describe(draft: Draft) -> str:
    title = pr_title(draft)
    parts = {
        "problem": _problem,
        "cause": _cause,
        "fix": _fix,
        "speed": _speed,
        "accuracy": _accuracy,
        "tested": _tested,
        "environment": _environment,
        "reproduce": _reproduce,
        "hub": lambda d: pr_reproduce.hub_instructions(
            d.record.task,
            title,
            d.change.files,
            [f"../patches/{d.repo_state.name}/{p.name}" for p in d.change.patches],
            d.file_name,
        ),
    }
    lines = [f"# {title}", ""]
    for heading, names in draft.style.sections:
        lines += [f"## {heading}", ""]
        for name in names:
            lines += [*parts[name](draft), ""]
    if "twin" in (draft.record.task.sandbox.image or ""):
        lines += ["Figures are the twin engine's (porter's test bed), not measurements on hardware.", ""]
    outputs = draft.record.task.outputs
    if outputs.signoff and outputs.author:
        lines += [f"Signed-off-by: {outputs.author}", ""]
    return "\n".join(lines)


def pr_title(draft: Draft) -> str:
    """In the project's style, from the records: the crash fixed and where, or the tuned file and the model."""
    task, files = draft.record.task, [Path(f).name for f in draft.change.files]
    named = ", ".join(files[:2]) + (f" and {len(files) - 2} more" if len(files) > 2 else "")
    model = task.model.id.split("/")[-1]
    crash = _crash_startup(draft)
    if crash:
        where = f"loading {model} with {task.engine.name}" if draft.style.prefix == "" else named
        return f"{draft.style.prefix}Fix {phrase(crash.crash_class)} in {where}" + (
            f" ({named})" if draft.style.prefix == "" else ""
        )
    gains = [c for a in draft.attempts for c in a.comparisons if c.better]
    gain = f" ({percent(gains[0].change)} {_short_label(draft, gains[0].key)})" if gains else ""
    made_by = "tuned " if _tune_of(draft) and "tuned" not in named else ""
    return f"{draft.style.prefix}Add {made_by}{named} entries for {model} on {task.hardware.gpu}{gain}"


def phrase(category: str) -> str:
    return " ".join(WORDS.get(word, word) for word in category.split("_"))


def _short_label(draft: Draft, key: str) -> str:
    item = registry.by_key(draft.record.task, key)
    return item.kind.label(item.spec).split(" (")[0]


def _tune_of(draft: Draft) -> tuple[ToolOutcome, TuneSpec | None] | None:
    """The tune call whose changed files are this change set's (the tuner wrote them), with its task entry."""
    for outcome in draft.record.outcomes:
        changed = outcome.changed.get(draft.repo_state.name) or []
        if outcome.tool == "tune" and changed and set(changed) <= set(draft.change.files):
            return outcome, next((t for t in draft.record.task.tune if t.name == outcome.facts.get("name")), None)
    return None


def _crash_startup(draft: Draft) -> StartUpAt | None:
    """The failed start-up this change set cleared: the last one before the first edit of its files (one bring-up
    that clears two crashes holds two repos' fixes, each PR names its own), else the attempt's first crash."""
    crash = draft.crash
    if crash is None:
        return None
    record = draft.record
    edits = [
        turn.step
        for turn in record.turns
        for call in turn.calls
        if turn.step <= crash.step and record.edits(turn.step, call, draft.change.files)
    ]
    failed = [s for s in record.startups(reduced=True) if s.step <= crash.step and s.crash_class]
    if edits:
        before = [s for s in failed if s.step < min(edits)]
        return before[-1] if before else None
    same = [s for s in failed if s.crash_class == crash.crash_class]
    return same[-1] if same else None


def _problem(draft: Draft) -> list[str]:
    task, record = draft.record.task, draft.record
    serving = f"Serving {task.model.id} on {task.hardware.count}x {task.hardware.gpu} with {task.engine.name}"
    startup = _crash_startup(draft)
    if startup is not None:
        flags = cli_change(task, task.serve.flags, record.flags_of(startup.fingerprint))
        lines = [f"{serving}{f' and `{flags}`' if flags else ''}, the server fails to start (`{startup.log}`):"]
        return [*lines, "", "```", *log_excerpt(record.run_dir, startup.log, startup.key_line), "```"]
    lines = []
    for attempt in draft.attempts:
        for comparison in attempt.comparisons:
            item = registry.by_key(task, comparison.key)
            lines.append(
                f"{serving}, {item.kind.label(item.spec)} is {significant(comparison.accepted_median)} "
                f"(target {goal_text(item.kind.goal(item.spec))})."
            )
    warning = _warning_before(draft)
    if warning:
        lines += ["", f"The engine's log warns at start-up (`{warning.log}`):", "", "```"]
        lines += [*log_excerpt(record.run_dir, warning.log, warning.key_line, before=2, after=0), "```"]
    return lines or [f"{serving}: see the evidence below."]


def _warning_before(draft: Draft) -> StartUpAt | None:
    """The last healthy start-up before the change set that logged a finding (a slow fallback, say)."""
    first = min((a.step for a in draft.attempts), default=0)
    warned = [s for s in draft.record.startups() if s.healthy and s.key_line and s.step < first]
    return warned[-1] if warned else None


def _cause(draft: Draft) -> list[str]:
    startup = _crash_startup(draft)
    found = next((f for f in (startup.findings if startup else []) if f.get("implicated")), None)
    why = _sentences(draft.record.explanation(draft.attempts[0], draft.change.files)) if draft.attempts else ""
    why = f"{why[0].upper()}{why[1:]}" if why else ""
    if found is None:
        return [f"**Root cause:** {why}"] if why else []
    key_line = found.get("key_line") or startup.key_line or ""
    where = "" if found["implicated"].split(" ")[0] in key_line else f" (in `{found['implicated']}`)"
    lines = [f"**Root cause:** `{key_line}`{where}"]
    return [*lines, "", f"**Fix:** {why}"] if why else lines


def _sentences(text: str, limit: int = 2) -> str:
    """The first sentences of an agent's explanation (a reasoning trail past them stays in the commit)."""
    flat = re.sub(r"\s+", " ", text).strip()
    found = re.findall(r".+?[.!?](?=\s|$)", flat)
    shown = " ".join(found[:limit]) if found else flat
    return shown if shown.endswith((".", "!", "?")) else shown + "."


def _fix(draft: Draft) -> list[str]:
    lines = []
    summaries = {sha: a.step for a in draft.attempts for sha in a.commits.values()}
    for commit in draft.change.commits:
        step = summaries.get(commit.hexsha)
        said = (draft.record.summary(step) if step is not None else None) or readable(draft.record.task, commit.summary)
        stats = commit.stats.files
        for path in sorted(stats):
            lines.append(f"- `{path}` (+{stats[path]['insertions']} -{stats[path]['deletions']}): {said}")
    _, spec = _tune_of(draft) or (None, None)
    if spec is not None:
        lines += ["", "Written by the tuner, run in the image:", "", "```bash", spec.command, "```"]
    return lines


def _speed(draft: Draft) -> list[str]:
    """Before -> after for this change set's commits only."""
    startup, crash = _crash_startup(draft), draft.crash
    if crash is not None and startup is not None:
        after = next((s for s in draft.record.startups() if s.fingerprint == crash.fingerprint), None)
        healthy = f"starts, healthy in {after.seconds:.0f} s" if after and after.healthy else "starts healthy"
        stage = f" at stage {startup.stage}" if startup.stage is not None else ""
        row = [f"`{startup.log}`", f"fails: {startup.crash_class}{stage}", healthy]
        return run_reading.markdown_table("start-up, same image and flags | before | after", [row])
    rows, notes = [], []
    for attempt in draft.attempts:
        for c in attempt.comparisons:
            item = registry.by_key(draft.record.task, c.key)
            before, after = significant(c.accepted_median), significant(c.pending_median)
            n = f"{len(c.accepted)}/{len(c.pending)}"
            rows.append([item.kind.label(item.spec), before, after, percent(c.change), f"{c.threshold:.1%}", n])
        if attempt.flags:
            notes += [
                "",
                f"The serve flags changed in the same step: `{cli_change(draft.record.task, {}, attempt.flags)}`.",
            ]
    if not rows and not notes:
        return ["No speed figure was compared for this change."]
    return [
        *run_reading.markdown_table("figure | before | after | change | noise bar | n (before/after)", rows),
        *notes,
    ]


def _accuracy(draft: Draft) -> list[str]:
    lines = []
    for attempt in draft.attempts:
        for key, result in draft.record.state.checks_on(attempt.fingerprint).items():
            item = registry.by_key(draft.record.task, key)
            if item.kind.accuracy is not None:
                lines.append(f"- {item.kind.accuracy(key, result, item.spec)}")
    return lines or ["Not measured on the configuration with this change (it changes no model output)."]


def _tested(draft: Draft) -> list[str]:
    rules = list(dict.fromkeys(a.rule for a in draft.attempts if a.rule))
    if draft.crash is not None:
        return [
            "The server was started from the same image with the same flags before and after the change: the crash "
            "(classified from the engine's log) is gone and the server answers on its port. "
            + "; ".join(f"Kept by rule `{r}`: {RULES[r]}" for r in rules if r in RULES)
            + "."
        ]
    keys = {c.key for a in draft.attempts for c in a.comparisons}
    declared = registry.declared(draft.record.task)
    workloads = [f"- {item.kind.workload(item.spec)}" for item in declared if item.key in keys]
    return [
        "porter's checks, run from the host against the server on the same image and flags before and after:",
        "",
        *workloads,
        "",
        "A figure is the median of n samples of one configuration. The change was kept because the median after "
        "beats the median before by more than the noise bar: the larger of the task's minimum and a one-sided 95% "
        "Student-t bound from the samples' own spread, plus 1.5 times the knee's bracket for a figure read at a "
        "sweep's knee. " + "; ".join(f"Rule `{r}`: {RULES[r]}" for r in rules if r in RULES) + ".",
    ]


def _environment(draft: Draft) -> list[str]:
    upstream, _ = upstream_of(draft.repo, draft.repo_state.base_commit)
    rows = pr_reproduce.environment_rows(draft.record, upstream.hexsha[:12] if upstream else None)
    return run_reading.markdown_table(" | ", rows)


def _reproduce(draft: Draft) -> list[str]:
    record, task = draft.record, draft.record.task
    spec = task.repo(draft.repo_state.name)
    patches = [f"patches/{draft.repo_state.name}/{p.name}" for p in draft.change.patches]
    startup = _crash_startup(draft)
    config = startup.fingerprint if startup else (draft.attempts[-1].fingerprint if draft.attempts else None)
    lines = []
    needs = {name: shas for name, shas in record.commits_in(config or "").items() if name != draft.repo_state.name}
    for name, shas in needs.items():
        held = ", ".join(f"{sha[:7]} (`prs/{draft.where.get(sha, name + '.md')}`)" for sha in shas)
        lines += [f"The configuration measured here also held {name}'s {held}: apply it the same way.", ""]
    lines += ["From the run directory:", "", "```bash", *pr_reproduce.docker_run(task)]
    lines += _apply(draft, spec.path, patches)
    lines += [pr_reproduce.serve_command(task, record.flags_of(config))]
    if startup is not None:
        lines += [f"# without the patches: {startup.key_line}", "# with them: the server starts"]
    else:
        keys = {c.key for a in draft.attempts for c in a.comparisons}
        results = record.state.checks_on(config)
        for key in sorted(keys):
            lines += ["# in a second shell of the container, once the server is up; then again without the patches"]
            lines += pr_reproduce.bench_commands(record, key, results.get(key, {}))
    return [*lines, "```"]


def _apply(draft: Draft, path: str, patches: list[str]) -> list[str]:
    """Apply the patches (mounted at /patches) to the tree the image ships, with `git apply` (a throwaway container
    has no git identity to commit with): to a checkpoint, or to an engine tree at upstream's commit, after the
    image's own uncommitted changes when it had some (the image's state, not upstream's)."""
    if draft.style is HUB:
        return [f"cd {pr_reproduce.model_dir(draft.record.task)}", *(f"git apply /{patch}" for patch in patches)]
    upstream, image_commits = upstream_of(draft.repo, draft.repo_state.base_commit)
    lines = [f"cd {path}"]
    if image_commits and upstream is not None:
        diff = draft.record.run_dir / "patches" / draft.repo_state.name / "image-state.diff"
        diff.write_text(draft.repo.git.diff(upstream.hexsha, draft.repo_state.base_commit) + "\n", encoding="utf-8")
        lines += [
            f"# the image's tree is upstream {upstream.hexsha[:12]} plus uncommitted changes of its own (the image's "
            "state, not upstream's); the patches apply on top of them",
        ]
    return [*lines, *(f"git apply /{patch}" for patch in patches)]


def upstream_of(repo: git.Repo, base_commit: str) -> tuple[git.Commit | None, list[git.Commit]]:
    """The newest commit not made by porter at or below the run's base, and porter's commits above it."""
    mine = []
    commit = repo.commit(base_commit)
    while commit.author.email == PORTER_AUTHOR.email:
        mine.append(commit)
        if not commit.parents:
            return None, mine
        commit = commit.parents[0]
    return commit, mine
