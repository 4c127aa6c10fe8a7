"""A task as `porter init` writes it: YAML a person edits, with a comment beside each decision and a header.

Covers emitting nested mappings in block style, lists of scalars in flow style (`[8, 4]`, as the shipped tasks write
tunables), lists of mappings as `- ` items, a long single-line command as a folded scalar broken at its spaces, and a
comment after any key. Output parses back to the same values (yaml.safe_load). Does not decide anything.
"""

from __future__ import annotations

import textwrap

import yaml


def render(task: dict, comments: dict[tuple, str], header: list[str]) -> str:
    lines = [f"# {line}" for line in header]
    _emit(task, (), 0, comments, lines)
    return "\n".join(lines) + "\n"


def _scalar(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 20).strip().removesuffix("...").strip()


def _emit(value: dict, path: tuple, indent: int, comments: dict, lines: list[str]) -> None:
    pad = " " * indent
    for key, item in value.items():
        here, note = (*path, key), comments.get((*path, key))
        suffix = f"   # {note}" if note else ""
        if isinstance(item, dict) and item:
            lines.append(f"{pad}{key}:{suffix}")
            _emit(item, here, indent + 2, comments, lines)
        elif isinstance(item, list) and item and all(isinstance(entry, dict) for entry in item):
            lines.append(f"{pad}{key}:{suffix}")
            for entry in item:
                inner: list[str] = []
                _emit(entry, here, indent + 4, comments, inner)
                lines.append(f"{pad}  - {inner[0].lstrip()}")
                lines.extend(inner[1:])
        elif isinstance(item, str) and (len(item) > 100 or "\n" in item.strip()) and _foldable(item):
            lines.append(f"{pad}{key}: >-{suffix}")
            lines.extend(_folded(" ".join(item.split()), pad + "  "))
        else:
            lines.append(f"{pad}{key}: {_scalar(item)}{suffix}")


def _folded(text: str, pad: str, width: int = 110) -> list[str]:
    """A long command as a folded scalar: broken at single spaces (folding joins them back with one space)."""
    return [pad + line for line in textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)]


def _foldable(text: str) -> bool:
    """Prose or a command whose runs of whitespace are single spaces once folded (folding joins lines with one)."""
    body = text.strip()
    return not body.startswith(("'", '"', "#", "-", "*", "&", "!", "|", ">", "%", "@")) and "  " not in body
