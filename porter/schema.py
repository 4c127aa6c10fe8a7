"""The building blocks of a task file every package may use: the strict base model, flag values, sandbox paths.

A leaf module: the check kinds (porter.checks) build their specs on `Spec` here, and porter.task's models
compose them into a `Task`. Covers nothing that reads a file.
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

FlagValue = str | int | float | bool | None
PositiveFloat = Annotated[float, Field(gt=0)]
Size = Annotated[str, Field(pattern=r"^[0-9]+[kmgKMG]?$")]  # docker's spelling of a size: bytes, or k, m, g
# The model overlay is one of the run's repos under this name (its branch, patches/ and prs/ folders).
OVERLAY_REPO = "model"


class Spec(BaseModel):
    """Base for everything a person writes by hand: unknown keys are errors, not silently dropped; a number is
    finite (YAML's .nan and .inf, or 1e400, would pass a bound like gt=0 or ge=0 and hang or break what uses it)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


def absolute_sandbox_path(value: str) -> str:
    """`value` without its trailing slashes if it is an absolute path inside the sandbox; else ValueError."""
    if not value.startswith("/"):
        raise ValueError(f"must be an absolute path inside the sandbox, got {value!r}")
    return value.rstrip("/") or "/"


def normal_sandbox_path(value: str) -> str:
    """`value` if it is a folder inside the sandbox in normal form (absolute; no `..`, `.`, `//`, NUL; not / itself);
    else ValueError saying why."""
    trimmed = absolute_sandbox_path(value)
    if "\0" in value or posixpath.normpath(trimmed) != trimmed or trimmed.startswith("//"):
        raise ValueError(f"must be a normal absolute path (no `..`, `.`, `//`), got {value!r}")
    if trimmed == "/":
        raise ValueError("must be a folder inside the sandbox, not / itself")
    return trimmed


def reject_duplicates(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"duplicate {what} {name!r}; each must be unique")
        seen.add(name)


def render_flags(flags: dict[str, FlagValue]) -> list[str]:
    """Flags as argv words: `--name value`; true -> `--name`; false/None -> left out. `$NAME` entries are the serve
    process's environment (serve_env), not argv words."""
    words: list[str] = []
    for name, value in flags.items():
        if value is None or value is False or is_env(name):
            continue
        words.append(f"--{name}")
        if value is not True:
            words.append(str(value))
    return words


ENV_NAME = re.compile(r"^\$[A-Za-z_][A-Za-z0-9_]*$")  # a serve setting that is an environment variable: $NAME


def is_env(name: str) -> bool:
    return name.startswith("$")


def serve_env(flags: dict[str, FlagValue]) -> dict[str, str]:
    """The `$NAME` entries of a flag set as the serve process's environment (null: unset; booleans as true/false)."""
    return {
        name[1:]: (str(value).lower() if isinstance(value, bool) else str(value))
        for name, value in flags.items()
        if is_env(name) and value is not None
    }
