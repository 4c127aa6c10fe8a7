"""Numbers as the model and the report read them: one formatting rule for every check kind."""

from __future__ import annotations

from typing import Any


def number(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def target_value(value: Any) -> str:
    """A target's figure as the run's closing lines and tables show it: a score to three places (0.970), a speed
    to one, with thousands separators (1,117.4)."""
    return number(value, 3 if isinstance(value, float) and value < 10 else 1)
