"""The errors every layer may raise and the layers above catch: a leaf module, imported from anywhere.

Covers `ToolError` (a tool call that could not be carried out; its message goes back to the model) and
`RunDirError` (a run directory's file that cannot be read; one line for the CLI). The sandbox's, the
checks' and the task's own errors stay in their packages. Imports nothing of porter.
"""

from __future__ import annotations


class ToolError(Exception):
    """A tool call that could not be carried out; the message goes back to the model."""


class RunDirError(ValueError):
    """A run directory or one of its files that cannot be used; the message names the file (and line)."""
