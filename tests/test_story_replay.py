"""The story's committed recording (tests/data/story) replays in a fresh sandbox.

The recording's replies re-drive porter on the twin, and every observation (launches, crash classes, kept or
reverted, targets met, figures within the replay tolerance) must come out as recorded: a full optimisation
replays, with every tool kind the story uses. A file of its own, so that it runs beside the live story
(tests/test_loop.py, which checks that the story still observes what this recording did) on another worker.
"""

from __future__ import annotations

import pytest
from twin_tasks import STORY_RECORDING, build_twin, tool_results

from porter.ops.replay_run import replay

pytestmark = [pytest.mark.docker, pytest.mark.long_run]


def test_the_story_recording_replays(docker_client, tmp_path):
    build_twin()
    report = replay(STORY_RECORDING, runs_dir=str(tmp_path / "replays"))
    assert report.reproduced, report.render()
    assert report.compared == len(tool_results(STORY_RECORDING))
