"""The session's pinned upstream wheels (tests/conformance/requirements.lock), fetched once per machine."""

from __future__ import annotations

from pathlib import Path

import pytest
import upstream_wheels


@pytest.fixture(scope="session")
def wheels() -> dict[str, Path]:
    return upstream_wheels.fetch()
