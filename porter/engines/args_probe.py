"""Ask a serving engine's own argument parser about argument lists, without starting the engine.

Run inside the sandbox by `porter preflight` (its source is sent there; it imports nothing of porter):
    python3 -c SOURCE BASE64_JSON -m MODULE        (a `python3 -m sglang.launch_server ...` command)
    python3 -c SOURCE BASE64_JSON --script PATH    (a console script such as `vllm serve ...`)
BASE64_JSON holds {"variants": [[argv words after the launcher], ...], "names": [flag names]}. The
launcher is imported and run as __main__ with the first variant as its argv; the first `parse_args` of
a parser that has `--port` or sub-commands (the engine's own, not one a library builds at import) is
intercepted: that parser parses every variant (argparse exits on an unknown flag or a bad value, which
is caught), and one line `PORTER-ARGCHECK {"results": [null | error line, ...], "known": [...]}` is
printed; then the process exits before anything is loaded. `known` lists the flag names that are an
option's full spelling (argparse also accepts unambiguous abbreviations, which porter refuses).
$VARS in the words are expanded as the shell would. Covers nothing else; preflight.py reads the line.
"""

import argparse
import base64
import contextlib
import io
import json
import os
import runpy
import sys

MARKER = "PORTER-ARGCHECK "


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of the parser and of its sub-commands' parsers."""
    found = set(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found |= option_strings(child)
    return found


def is_engine_parser(parser: argparse.ArgumentParser) -> bool:
    has_subcommands = any(isinstance(action, argparse._SubParsersAction) for action in parser._actions)
    return has_subcommands or "--port" in parser._option_string_actions


def expanded(words: list) -> list:
    return [os.path.expandvars(str(word)) for word in words]


def report(parser: argparse.ArgumentParser, variants: list, names: list) -> None:
    results = []
    for argv in variants:
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
                type(parser).parse_args(parser, expanded(argv))
            results.append(None)
        except SystemExit:
            lines = [line.strip() for line in errors.getvalue().splitlines() if line.strip()]
            results.append(lines[-1] if lines else "rejected by the parser")
    known = option_strings(parser)
    print(MARKER + json.dumps({"results": results, "known": [n for n in names if "--" + n in known]}), flush=True)
    os._exit(0)  # nothing of the engine may start: no atexit hooks, no server


def main() -> None:
    request = json.loads(base64.b64decode(sys.argv[1]))
    mode, target = sys.argv[2], sys.argv[3]
    original = argparse.ArgumentParser.parse_args
    busy: list[bool] = []

    def intercept(self, args=None, namespace=None):
        if busy or not is_engine_parser(self):
            return original(self, args, namespace)
        busy.append(True)
        report(self, request["variants"], request["names"])

    argparse.ArgumentParser.parse_args = intercept
    sys.argv = [target, *expanded(request["variants"][0])]
    if mode == "-m":
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(target, run_name="__main__")
    print(MARKER + json.dumps({"error": f"{target} finished without parsing its arguments"}), flush=True)


if __name__ == "__main__":
    main()
