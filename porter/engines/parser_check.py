"""Asking the engine's own argument parser, inside the sandbox, whether flag sets would be accepted.

Covers turning the task's serve command with each flag set, spelled for the engine release installed in the sandbox
(a flag it lacks is refused here), into the argv args_probe.py parses in place of the launcher, and reading back one
verdict per set (None: accepted; else the parser's error line) and which names are an option's full spelling, for
`porter preflight` (the baseline, every tunable value) and `set_flags` (an undeclared flag or value). $NAME entries
are the serve process's environment, not the parser's. Does not launch the server nor decide about a refusal.
"""

from __future__ import annotations

import base64
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from porter.engines import args_probe
from porter.engines.engine import FlagRefused
from porter.engines.serve import command_words, installed_version, launcher
from porter.sandbox import Sandbox
from porter.task import FlagValue, Task

PROBE_TIMEOUT_S = 90


@dataclass
class ParserAnswer:
    verdicts: list[str | None]  # one per flag set: None when the parser took it, else its error line
    known: list[str]  # flag names (of the first set) that are an option's full spelling, not a prefix of one
    problem: str | None = None  # the launcher could not be asked at all (why, in one line)
    version: str | None = None  # the engine release installed in the sandbox (None: none under the engine's name)


def ask_parser(sandbox: Sandbox, task: Task, flag_sets: list[dict[str, FlagValue]]) -> ParserAnswer:
    """The engine parser's verdict on each flag set, spelled as the release installed in the sandbox spells it (a
    flag that release does not have is refused here, before the parser), asked in one process inside the sandbox."""
    version = installed_version(sandbox, task)
    refusals, argvs = [], []
    for flags in flag_sets:
        try:
            argvs.append(command_words(task, flags, version))
            refusals.append(None)
        except FlagRefused as exc:
            argvs.append(command_words(task, {}, version))
            refusals.append(str(exc))
    template, words = launcher(argvs[0])
    if template is None:
        return ParserAnswer([], [], f"`{words[0]}` is not a Python launcher porter can ask")
    argvs = [argv[len(words) :] for argv in argvs]
    names = sorted(name for name in flag_sets[0] if not name.startswith("$"))
    payload = base64.b64encode(json.dumps({"variants": argvs, "names": names}).encode()).decode()
    source = base64.b64encode(Path(args_probe.__file__).read_bytes()).decode()
    command = template.format(code=shlex.quote(f"import base64;exec(base64.b64decode('{source}'))"), data=payload)
    output = sandbox.exec(command, PROBE_TIMEOUT_S).output
    answer = next((line for line in output.splitlines() if line.startswith(args_probe.MARKER)), None)
    if answer is None:
        tail = " | ".join(output.strip().splitlines()[-3:])[-400:]
        return ParserAnswer([], [], f"the launcher failed before parsing its arguments: {tail}")
    report = json.loads(answer[len(args_probe.MARKER) :])
    if "error" in report:
        return ParserAnswer([], [], report["error"])
    verdicts = [refusal or verdict for refusal, verdict in zip(refusals, report["results"], strict=True)]
    return ParserAnswer(verdicts, report["known"], version=version)
