"""Asking the engine's own argument parser, inside the sandbox, whether flag sets would be accepted.

Covers turning the task's serve command (with each flag set) into the argv the engine's launcher gets,
running args_probe.py in place of that launcher (`python3 -m MODULE` or a console script such as `vllm`),
and reading back one verdict per flag set (None: accepted; else the parser's own error line) and which flag
names are an option's full spelling. `porter preflight` asks it about the baseline and every tunable value;
`set_flags` about a flag or value the task did not declare, before any launch. Environment variables of the
serve process ($NAME in the flags) are not the parser's: they are left out of the argv. Does not launch the
server and does not decide what to do with a refusal.
"""

from __future__ import annotations

import base64
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from porter.engines import args_probe
from porter.engines.serve import render_command
from porter.sandbox import Sandbox
from porter.task import FlagValue, Task

PROBE_TIMEOUT_S = 90


@dataclass
class ParserAnswer:
    verdicts: list[str | None]  # one per flag set: None when the parser took it, else its error line
    known: list[str]  # flag names (of the first set) that are an option's full spelling, not a prefix of one
    problem: str | None = None  # the launcher could not be asked at all (why, in one line)


def ask_parser(sandbox: Sandbox, task: Task, flag_sets: list[dict[str, FlagValue]]) -> ParserAnswer:
    """The engine parser's verdict on each flag set, asked in one process inside the sandbox."""
    launcher, words = _launcher(_command_words(task, flag_sets[0]))
    if launcher is None:
        return ParserAnswer([], [], f"`{words[0]}` is not a Python launcher porter can ask")
    argvs = [_command_words(task, flags)[len(words) :] for flags in flag_sets]
    names = sorted(name for name in flag_sets[0] if not name.startswith("$"))
    payload = base64.b64encode(json.dumps({"variants": argvs, "names": names}).encode()).decode()
    source = base64.b64encode(Path(args_probe.__file__).read_bytes()).decode()
    command = launcher.format(code=shlex.quote(f"import base64;exec(base64.b64decode('{source}'))"), data=payload)
    output = sandbox.exec(command, PROBE_TIMEOUT_S).output
    answer = next((line for line in output.splitlines() if line.startswith(args_probe.MARKER)), None)
    if answer is None:
        tail = " | ".join(output.strip().splitlines()[-3:])[-400:]
        return ParserAnswer([], [], f"the launcher failed before parsing its arguments: {tail}")
    report = json.loads(answer[len(args_probe.MARKER) :])
    if "error" in report:
        return ParserAnswer([], [], report["error"])
    return ParserAnswer(report["results"], report["known"])


def _command_words(task: Task, flags: dict[str, FlagValue]) -> list[str]:
    """The serve command's words without a leading `exec` or VAR=value (the shell's business, not the engine's)."""
    words = shlex.split(render_command(task, flags))
    while words and (words[0] == "exec" or ("=" in words[0] and not words[0].startswith("-"))):
        words.pop(0)
    return words


def _launcher(words: list[str]) -> tuple[str | None, list[str]]:
    """A shell template running the probe in place of the serve command's launcher, and the launcher's words."""
    if len(words) >= 3 and Path(words[0]).name.startswith("python") and words[1] == "-m":
        return f"{shlex.quote(words[0])} -c {{code}} {{data}} -m {shlex.quote(words[2])}", words[:3]
    if words and "/" not in words[0]:
        script = f'"$(command -v {shlex.quote(words[0])})"'
        interpreter = f"$(sed -n '1s/^#! *//p' {script})"
        return f"{interpreter} -c {{code}} {{data}} --script {script}", words[:1]
    return None, words[:1]
