"""The task: what model to port, where, how to serve it and what "done" means (spec.py), read from YAML (loader.py).

The names most callers need, in one place.
"""

from porter.schema import OVERLAY_REPO, FlagValue, PositiveFloat, Spec, normal_sandbox_path, render_flags
from porter.task.loader import MAX_PROBLEMS, TaskError, load_task
from porter.task.spec import (
    AgentSpec,
    HardwareSpec,
    LimitsSpec,
    ModelSpec,
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
    "HardwareSpec",
    "LimitsSpec",
    "ModelSpec",
    "Mount",
    "OutputsSpec",
    "PositiveFloat",
    "PriceSpec",
    "RepoSpec",
    "SandboxSpec",
    "ServeSpec",
    "ServiceSpec",
    "Spec",
    "Task",
    "TaskError",
    "TuneSpec",
    "load_task",
    "normal_sandbox_path",
    "render_flags",
]
