"""Numbers as the model and the report read them: one formatting rule for every check kind."""

from __future__ import annotations

from typing import Any


def number(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)
