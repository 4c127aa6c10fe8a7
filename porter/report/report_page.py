"""`report.html`: the report as one self-contained page a person can keep open in a browser during a run.

Covers rendering report.md (the baseline -> final table, the timeline, the plots inlined as data URIs) and
every PR draft (prs/*.md, folded) into one HTML file with its own stylesheet and nothing fetched from
anywhere (a Content-Security-Policy forbids it, and links with a scheme are not made links); while the run
goes (state.json not finished) the page reloads itself every REFRESH_S seconds, so an overnight run can be
watched from a browser (run_report.py rewrites it after every step). Markdown is rendered with raw HTML off, so
nothing an agent or a server wrote becomes markup. Writes only report.html.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import re
from pathlib import Path

from markdown_it import MarkdownIt

from porter.report.run_reading import RunRecord

REFRESH_S = 30
# the page loads nothing: its images are data URIs, its style inline, and it runs no script
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
MAX_IMAGE_BYTES = 8 << 20  # a plot is ~150 kB; anything bigger in plots/ is not porter's

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1400px; margin: 1.5em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
td { overflow-wrap: anywhere; }
td code { white-space: normal; overflow-wrap: normal; }
th { background: #f0f0f0; }
code, pre { font-family: ui-monospace, monospace; font-size: 0.9em; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; }
img { max-width: 100%; }
.status { background: #eef4fb; border-left: 4px solid #1f77b4; padding: 0.6em 1em; }
.status.done { background: #eef7ee; border-left-color: #2ca02c; }
details { border: 1px solid #ddd; margin: 0.6em 0; padding: 0.4em 0.8em; }
summary { cursor: pointer; font-weight: 600; }
"""


def write_html(record: RunRecord, report_markdown: str) -> Path:
    running = record.state.finished is None
    markdown = MarkdownIt("commonmark", {"html": False}).enable("table")
    markdown.validateLink = _local_link  # an agent's `![](http://...)` must not make the page fetch anything
    body = markdown.render(_inline_images(record.run_dir, report_markdown))
    drafts = []
    for draft in sorted((record.run_dir / "prs").glob("*.md")):
        text = draft.read_text(encoding="utf-8", errors="replace")
        title = text.split("\n", 1)[0].removeprefix("# ")
        drafts.append(
            f"<details><summary>prs/{html.escape(draft.name)}: {html.escape(title)}</summary>"
            f"{markdown.render(text)}</details>"
        )
    prs = "".join(drafts) or "<p>The PR drafts are written when the run ends.</p>"
    page = "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
            f'<meta http-equiv="refresh" content="{REFRESH_S}">' if running else "",
            f"<title>porter: {html.escape(record.state.run_id)}</title>",
            f"<style>{STYLE}</style></head><body>",
            _status(record, running),
            body,
            "<h2>PR drafts</h2>",
            prs,
            "</body></html>",
        ]
    )
    path = record.run_dir / "report.html"
    partial = path.with_suffix(".html.partial")
    partial.write_text(page, encoding="utf-8")
    partial.replace(path)  # a browser reloading mid-write never reads half a page
    return path


def _status(record: RunRecord, running: bool) -> str:
    state = record.state
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    if running:
        text = (
            f"Running: step {state.step} of at most {record.task.agent.limits.max_steps}, phase {state.phase()}. "
            f"Updated {now}; this page reloads every {REFRESH_S} s."
        )
    else:
        text = f"Finished: {'solved' if state.solved else 'not solved'} ({state.finished}). Written {now}."
    return f'<p class="status{"" if running else " done"}">{html.escape(text)}</p>'


def _local_link(url: str) -> bool:
    """A link or image the page may hold: the plots' data URIs and paths inside the run directory, no scheme."""
    return url.startswith("data:image/png;base64,") or not re.match(r"^\s*([a-z][a-z0-9+.-]*:|//)", url, re.I)


def _inline_images(run_dir: Path, markdown: str) -> str:
    """The report's plot links as data URIs (plots/ only, PNG only): the page needs no other file."""

    def inline(match: re.Match) -> str:
        path = (run_dir / match.group(2)).resolve()
        plots = (run_dir / "plots").resolve()
        if path.parent != plots or path.suffix != ".png" or not path.is_file() or path.stat().st_size > MAX_IMAGE_BYTES:
            return match.group(0)
        data = base64.b64encode(path.read_bytes()).decode()
        return f"![{match.group(1)}](data:image/png;base64,{data})"

    return re.sub(r"!\[([^\]]*)\]\(([^)\s]+)\)", inline, markdown)
