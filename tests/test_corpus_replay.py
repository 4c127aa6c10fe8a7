"""The replay corpus (transcripts/): every twin scenario has a recording, and each replays without divergence
from a fresh sandbox. Its own file, so that CI's workers replay it beside the playbook's session."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from twin_tasks import ROOT, build_twin

from porter.ops.replay_run import replay

pytestmark = pytest.mark.docker
CORPUS = ROOT / "transcripts"


@pytest.mark.parametrize("recording", sorted(p.name for p in CORPUS.iterdir() if (p / "transcript.jsonl").is_file()))
def test_the_corpus_replays_without_divergence(docker_client, tmp_path, recording):
    image = yaml.safe_load((CORPUS / recording / "task.yaml").read_text())["sandbox"]["image"]
    build_twin(image.rsplit(":", 1)[1])
    report = replay(CORPUS / recording, runs_dir=str(tmp_path / "replays"))
    assert report.reproduced, report.render()
    assert report.compared > 0


def test_the_corpus_covers_every_twin_scenario():
    recorded = {p.name for p in CORPUS.iterdir() if (p / "transcript.jsonl").is_file()}
    scenarios = {p.name for p in (ROOT / "sandboxes" / "twin" / "scenarios").iterdir()} | {"glm52-day0"}
    assert recorded == scenarios
    assert Path(CORPUS / "README.md").is_file()
