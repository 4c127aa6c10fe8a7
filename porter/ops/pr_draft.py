"""`porter pr RUN`: per repo, the patch series and a PR description a maintainer can review.

Covers `patches/<repo>/000N-*.patch` (git format-patch of the run's commits), `prs/<repo>.md` (title,
problem with the crash excerpt, root cause in a sentence, fix, evidence rounded to what it supports, how
to reproduce with paths relative to the run directory, from upstream's commit plus the image's own
uncommitted changes when the image's tree had some, `patches/<repo>/image-state.diff`; the model
overlay's draft is addressed to the checkpoint's hub repository) and, with `--push REMOTE`, pushing the
run's branch with real git. Reads the repos' host trees; writes only under the run directory.
"""

from __future__ import annotations

import re
from pathlib import Path

import git

from porter.engines.serve import render_command
from porter.ledger.state import RunState
from porter.sandbox.trees import safe_git
from porter.sandbox.trees.tracked import PORTER_AUTHOR, RepoState, export_series
from porter.task import OVERLAY_REPO, Task, load_task
from porter.triage import triage_file


def write_prs(run_dir: str | Path, push_remote: str | None = None) -> list[Path]:
    run_dir = Path(run_dir)
    state = RunState.read(run_dir)  # first: an empty or foreign directory is named as such
    task = load_task(run_dir / "task.yaml")
    written = []
    changed = [name for name, repo_state in state.repos.items() if repo_state.accepted]
    for name, repo_state in state.repos.items():
        if not repo_state.accepted:
            continue
        repo = safe_git.open_repo(repo_state.path)
        patches = export_series(repo, repo_state, run_dir / "patches" / name)
        text = describe(task, state, repo, repo_state, patches, run_dir)
        path = run_dir / "prs" / f"{name}.md"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
        if push_remote:
            push(repo, repo_state, push_remote, f"{name}/{repo_state.branch}" if len(changed) > 1 else None)
    return written


def push(repo: git.Repo, state: RepoState, remote: str, remote_branch: str | None = None) -> None:
    """Push the run branch; `remote` is a configured remote's name, a URL or a path. Several repos of one run
    (the engine and the model overlay) pushed to one remote go to `<repo>/<branch>`, so neither rejects the other."""
    repo.git.push(remote, f"{state.branch}:{remote_branch or state.branch}")


def describe(
    task: Task, state: RunState, repo: git.Repo, repo_state: RepoState, patches: list[Path], run_dir: Path
) -> str:
    commits = [repo.commit(sha) for sha in repo_state.accepted]
    spec = task.repo(repo_state.name)
    is_model = repo_state.name == OVERLAY_REPO and task.model.overlay
    title = (
        commits[0].summary
        if len(commits) == 1
        else (f"[ROCm] {task.model.id} on {task.hardware.gpu}: {len(commits)} fixes for day-0 serving")
    )
    lines = [f"# {title}", ""]
    if is_model:
        lines += [
            f"For the Hugging Face Hub repository [{task.model.id}]({task.model.hub_url}): open it there as a pull "
            "request (Community, New pull request) with these file changes.",
            "",
        ]
    lines += [
        f"Found and fixed by porter while serving {task.model.id} on "
        f"{task.hardware.count}x {task.hardware.gpu} (run `{state.run_id}`).",
    ]
    lines += ["", "## Problem", ""]
    lines += _problem(state, run_dir, repo_state.name)
    lines += ["", "## Root cause and fix", ""]
    for commit in commits:
        lines += [f"### {commit.summary}", "", *_commit_sections(commit.message), ""]
    lines += ["## Evidence", ""]
    lines += _evidence(state)
    base = _base(repo, repo_state, run_dir, is_model, task)
    lines += ["", "## How to reproduce", "", *base["text"], "", "```bash", *base["commands"]]
    lines += [f"git am {_relative(run_dir, run_dir / 'patches' / repo_state.name / p.name)}" for p in patches]
    lines += [render_command(task, state.accepted_flags), "```", ""]
    lines += [
        f"Paths are relative to the run directory; the patches apply to {base['onto']} "
        f"of {spec.upstream or 'the image tree'}.",
        "",
    ]
    return "\n".join(lines)


def _base(repo: git.Repo, repo_state: RepoState, run_dir: Path, is_model: bool, task: Task) -> dict:
    """What the patches apply to: upstream's commit, plus the image's own changes when the tree had them."""
    upstream, image_commits = _upstream_of(repo, repo_state.base_commit)
    if is_model:
        clone = f"GIT_LFS_SKIP_SMUDGE=1 git clone {task.model.hub_url} && cd {task.model.id.split('/')[-1]}"
        return {
            "text": ["In a clone of the hub repository (the weights are not needed):"],
            "commands": [clone],
            "onto": "the checkpoint's files as published",
        }
    if upstream is None:
        return {
            "text": ["The image ships this tree without its git history; start from the tree as shipped in the image."],
            "commands": [],
            "onto": "the tree as shipped in the image",
        }
    commands = [f"git checkout {upstream.hexsha}"]
    text = [f"In a checkout of upstream at {upstream.hexsha[:12]} ({_first_line(upstream.summary)}):"]
    if image_commits:
        diff = run_dir / "patches" / repo_state.name / "image-state.diff"
        diff.write_text(repo.git.diff(upstream.hexsha, repo_state.base_commit) + "\n", encoding="utf-8")
        text = [
            f"The image's tree is upstream {upstream.hexsha[:12]} plus uncommitted changes of its own (the image's "
            f"state, not upstream's: {_relative(run_dir, diff)}). In a checkout of upstream:"
        ]
        image_state = _relative(run_dir, diff)
        commands.append(f'git apply {image_state} && git add -A && git commit -qm "the image\'s own changes"')
    return {
        "text": text,
        "commands": commands,
        "onto": f"upstream {upstream.hexsha[:12]}" + (" + the image's changes" if image_commits else ""),
    }


def _upstream_of(repo: git.Repo, base_commit: str) -> tuple[git.Commit | None, list[git.Commit]]:
    """The newest commit not made by porter at or below the run's base, and porter's commits above it."""
    mine = []
    commit = repo.commit(base_commit)
    while commit.author.email == PORTER_AUTHOR.email:
        mine.append(commit)
        if not commit.parents:
            return None, mine
        commit = commit.parents[0]
    return commit, mine


def _commit_sections(message: str) -> list[str]:
    """The commit's sections for a reader: what failed, the root cause in one sentence, what changed, evidence."""
    body = message.split("\n", 1)[1] if "\n" in message else ""
    sections: dict[str, str] = {}
    for block in re.split(r"\n\s*\n(?=[A-Z][a-z ]+:\n)", body.replace("Generated by porter.", "").strip()):
        title, _, text = block.partition(":\n")
        sections[title.strip()] = text.strip()
    if not sections.keys() & {"What failed", "Why", "What changed", "Evidence"}:
        return [round_figures(body.replace("Generated by porter.", "").strip())]
    lines = []
    for title in ("What failed", "Why", "What changed", "Evidence"):
        text = sections.get(title)
        if not text:
            continue
        if title == "Why":
            text = _first_sentence(text)
        lines += [f"**{title}:** {round_figures(text)}", ""]
    return lines[:-1]


def _first_sentence(text: str) -> str:
    flat = re.sub(r"\s+", " ", text).strip()
    match = re.match(r"(.+?[.!?])(\s|$)", flat)
    return match.group(1) if match else flat


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


def round_figures(text: str) -> str:
    """Numbers as precise as a benchmark or a few hundred questions support: 0.9361057 -> 0.936, 1944.37 -> 1944."""

    def rounded(match: re.Match) -> str:
        value = float(match.group(0))
        digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 3
        return f"{value:.{digits}f}"

    return re.sub(r"(?<![\w.])\d+\.\d{4,}(?![\w.])", rounded, text)


def _relative(run_dir: Path, path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path(run_dir).resolve()))
    except ValueError:
        return str(path)


def _problem(state: RunState, run_dir: Path, repo_name: str) -> list[str]:
    """The crashes this repo's commits fixed (a crash fixed in another repo belongs to that repo's PR)."""
    lines = []
    crashes = [a for a in state.kept_attempts() if a.crash_class and repo_name in a.commits]
    for attempt in crashes:
        lines.append(f"- `{attempt.crash_class}`, fixed at step {attempt.step}: {attempt.summary}")
    logs = sorted((run_dir / "logs").glob("serve-*.log"))
    for log in logs:
        triage = triage_file(log)
        if triage.category in {a.crash_class for a in crashes}:
            lines += [
                "",
                f"Crash excerpt ({log.name}, triaged as `{triage.category}`):",
                "",
                "```",
                triage.excerpt.strip()[:3000],
                "```",
            ]
            break
    return lines or ["- The engine ran below target on this hardware; see the evidence."]


def _evidence(state: RunState) -> list[str]:
    lines = ["| change | outcome | evidence |", "|---|---|---|"]
    for attempt in state.attempts:
        row = f"| {attempt.summary} | {attempt.outcome} | {round_figures(attempt.evidence)} |"
        lines.append(row.replace("\n", " "))
    quality = {k: v for k, v in state.checks_on(state.accepted_config).items() if k.startswith("quality:")}
    if quality:
        lines += ["", "Quality of the final configuration:", ""]
        for key, result in quality.items():
            lines.append(
                round_figures(
                    f"- {key.split(':', 1)[1]}: {result.get('score')} (95% CI {result.get('ci_low')}"
                    f"-{result.get('ci_high')}, n={result.get('n')}, dataset sha256 "
                    f"{str(result.get('dataset_sha256'))[:12]}), passed: {result.get('passed')}"
                )
            )
    return lines
