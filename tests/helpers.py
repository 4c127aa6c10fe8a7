"""Small helpers shared by the test modules (conftest.py holds the shared fixtures)."""

from __future__ import annotations

import os
import socket


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def free_port() -> int:
    """A port nothing listens on right now, on 127.0.0.1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
