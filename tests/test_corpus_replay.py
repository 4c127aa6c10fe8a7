"""The replay corpus (transcripts/): every twin scenario has a recording, and each replays without divergence
from a fresh sandbox. Its own file, so that CI's workers replay it beside the playbook's session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from twin_tasks import ROOT, build_twin

from porter.evaluate.replay_run import replay

pytestmark = pytest.mark.docker
CORPUS = ROOT / "transcripts"


@pytest.mark.parametrize("recording", sorted(p.name for p in CORPUS.iterdir() if (p / "transcript.jsonl").is_file()))
def test_the_corpus_replays_without_divergence(docker_client, tmp_path, recording):
    image = yaml.safe_load((CORPUS / recording / "task.yaml").read_text())["sandbox"]["image"]
    build_twin(image.rsplit(":", 1)[1])
    # the project's own recordings: their tasks are local ones (the twin's build and device service)
    report = replay(CORPUS / recording, runs_dir=str(tmp_path / "replays"), local_task=CORPUS / recording / "task.yaml")
    assert report.reproduced, report.render()
    assert report.compared > 0


def test_the_corpus_covers_every_twin_scenario():
    """The playbook's bring-up of every scenario, each in the scenario's folder; the other recordings (a model or a
    person in the seat) name their recorder and run a scenario's image."""
    recordings = [p for p in CORPUS.iterdir() if (p / "transcript.jsonl").is_file()]
    scenarios = {p.name for p in (ROOT / "sandboxes" / "twin" / "scenarios").iterdir()} | {"glm52-day0"}
    recorded_by = {p.name: _recorder(p) for p in recordings}
    assert {name for name, agent in recorded_by.items() if agent == "playbook"} == scenarios
    for recording in recordings:
        image = yaml.safe_load((recording / "task.yaml").read_text())["sandbox"]["image"]
        assert image.rsplit(":", 1)[1].removesuffix("-vllm") in scenarios, recording.name
    assert any(agent != "playbook" for agent in recorded_by.values())  # the corpus holds runs from the seat too
    assert Path(CORPUS / "README.md").is_file()


def _recorder(recording: Path) -> str:
    start = json.loads((recording / "transcript.jsonl").read_text().splitlines()[0])
    agent = start["environment"]["agent"]
    return agent.get("model") or agent["provider"]
