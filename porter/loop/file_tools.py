"""The tools that touch the sandbox and the repos' files: bash, read_file, edit_file, apply_patch.

File tools only touch the declared repos (and the model overlay), through the host copies of the trees, with
every path resolved and confined (porter/sandbox/guard.py); a patch is all or nothing and refused when it
would make a link or touch `.git`. Each tool's schema stands next to its handler (toolbox.tool).
"""

from __future__ import annotations

import difflib

from porter.errors import ToolError
from porter.loop.run_context import RunContext
from porter.loop.toolbox import STRING, Result, tool
from porter.sandbox.guard import MAX_READ_BYTES, MAX_READ_MIB, refuse_patch
from porter.sandbox.trees import safe_git


@tool(
    "bash",
    "Run a shell command in the sandbox (bash -lc). Output is capped (head + tail).",
    {"command": STRING, "timeout_s": {"type": "number"}},
    ("command",),
)
def bash(ctx: RunContext, command: str, timeout_s: float = 600) -> Result:
    result = ctx.sandbox.exec(command, timeout=min(float(timeout_s), 3600))
    status = "timed out (killed)" if result.timed_out else f"exit {result.exit_code}"
    return (
        f"{status} after {result.duration_s:.1f} s\n{result.output}",
        {"exit_code": result.exit_code, "timed_out": result.timed_out},
    )


@tool(
    "read_file",
    "Read a file of a declared repo (sandbox path), optionally a line range.",
    {"path": STRING, "start_line": {"type": "integer"}, "end_line": {"type": "integer"}},
    ("path",),
)
def read_file(ctx: RunContext, path: str, start_line: int | None = None, end_line: int | None = None) -> Result:
    host = ctx.host_path(path)
    if not host.is_file():
        raise ToolError(f"{path} does not exist (or is not a file) in repo {ctx.repo_of(path)!r}")
    lines = ctx.guard.read_text(path, cut=True).splitlines()  # bounded: a huge file ends in a note
    first, last = max(1, start_line or 1), min(len(lines), end_line or len(lines))
    numbered = "\n".join(f"{number:6d}  {lines[number - 1]}" for number in range(first, last + 1))
    return f"{path} lines {first}-{last} of {len(lines)}\n{numbered}", {"path": path, "lines": len(lines)}


@tool(
    "edit_file",
    "Replace one exact occurrence of `old` by `new` in a repo file (sandbox path); `old` empty creates the file.",
    {"path": STRING, "old": STRING, "new": STRING},
    ("path", "old", "new"),
)
def edit_file(ctx: RunContext, path: str, old: str, new: str) -> Result:
    host = ctx.host_path(path)
    if old == "":
        if host.exists():
            raise ToolError(f"{path} exists; give the exact text to replace in `old` (empty `old` creates a new file)")
        _refuse_oversized(f"the new file {path}", len(new.encode()))
        ctx.guard.write_text(path, new)
        return (f"created {path}", {"path": path, "created": True})
    if not host.is_file():
        raise ToolError(f"{path} does not exist in repo {ctx.repo_of(path)!r}; check the path with bash `ls`")
    text = ctx.guard.read_text(path)
    count = text.count(old)
    if count == 0:
        raise ToolError(f"`old` was not found in {path}; nothing was changed. {nearest_lines(text, old)}")
    if count > 1:
        raise ToolError(f"`old` occurs {count} times in {path}; nothing was changed. Include more surrounding lines.")
    edited = text.replace(old, new, 1)
    _refuse_oversized(f"{path} after the edit", len(edited.encode()))
    ctx.guard.write_text(path, edited)
    return (f"edited {path} (1 replacement)", {"path": path})


def _refuse_oversized(what: str, size: int) -> None:
    """File tools write what porter can read back whole; a bigger change is not one a person reviews as a patch."""
    if size > MAX_READ_BYTES:
        raise ToolError(
            f"{what} would be {size / 2**20:.1f} MiB, over the {MAX_READ_MIB} MiB a file tool writes in one call; "
            "nothing was changed. Send smaller changes; large generated files come from a tuning command or bash."
        )


def nearest_lines(text: str, wanted: str) -> str:
    """The real lines closest to what the model thought was there, so it can resend the right text."""
    lines = text.splitlines()
    first = wanted.strip().splitlines()[0] if wanted.strip() else ""
    close = difflib.get_close_matches(first, lines, n=1, cutoff=0.5)
    if not close:
        return "No similar line exists; read the file first."
    index = lines.index(close[0])
    window = "\n".join(lines[max(0, index - 2) : index + 3])
    return f"The nearest real lines (around line {index + 1}) are:\n{window}"


@tool(
    "apply_patch",
    "Apply a unified diff (paths relative to the repo root) to one repo; all or nothing.",
    {"repo": STRING, "patch": STRING},
    ("patch",),
)
def apply_patch(ctx: RunContext, patch: str, repo: str | None = None) -> Result:
    name = repo or ctx.only_repo()
    tree = ctx.repo_dir(name)
    if not patch.endswith("\n"):
        patch += "\n"
    _refuse_oversized("the patch", len(patch.encode()))
    refuse_patch(patch, tree)
    check = safe_git.run(tree, ["apply", "--check", "--recount", "-"], stdin=patch)
    if check.returncode != 0:
        raise ToolError(
            f"the patch does not apply to repo {name!r}; nothing was changed.\n{check.stderr.strip()}\n"
            "Read the current file and resend the whole patch against it (or use edit_file)."
        )
    safe_git.run(tree, ["apply", "--recount", "-"], stdin=patch).check_returncode()
    files = ctx.repos[name].changed_files()
    return (f"applied to {name}; changed files now: {files}", {"repo": name})
