"""The task: what model to port, where, how to serve it and what "done" means (spec.py), read from YAML (loader.py).

The names most callers need, in one place.
"""

from porter.schema import OVERLAY_REPO, FlagValue, render_flags
from porter.task.loader import MAX_PROBLEMS, TaskError, load_task
from porter.task.spec import (
    AgentSpec,
    Mount,
    OutputsSpec,
    PriceSpec,
    RepoSpec,
    SandboxSpec,
    ServeSpec,
    ServiceSpec,
    Task,
    TuneSpec,
)

__all__ = [
    "MAX_PROBLEMS",
    "OVERLAY_REPO",
    "AgentSpec",
    "FlagValue",
    "Mount",
    "OutputsSpec",
    "PriceSpec",
    "RepoSpec",
    "SandboxSpec",
    "ServeSpec",
    "ServiceSpec",
    "Task",
    "TaskError",
    "TuneSpec",
    "load_task",
    "render_flags",
]
