"""What may reach a person's terminal from text porter did not write: server answers, logs, model output.

Covers removing what a terminal would act on instead of showing (escape sequences that move the cursor,
retitle the window, write the clipboard or clear the screen; other C0/C1 controls; bidirectional
overrides that reorder what is shown) and escaping rich markup, so a server's `[/]` is printed, not
parsed. Newlines and tabs stay; a carriage return becomes a newline, so progress bars read as lines.
Does not cover files: logs and transcripts keep every byte as it came.
"""

from __future__ import annotations

import re

from rich.markup import escape

_CONTROLS = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, screen clears
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window title, clipboard, hyperlinks
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[ -~]?"  # any other escape
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
)


def printable(text: str) -> str:
    """`text` without anything a terminal would interpret; newlines and tabs are kept."""
    return _CONTROLS.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def markup_safe(text: str) -> str:
    """`printable(text)` for a rich console that parses markup: square brackets are shown as written."""
    return escape(printable(text))
