"""porter's GSM8K check against lm-eval 0.4.13's own task file (`lm_eval/tasks/gsm8k/gsm8k.yaml`, pinned wheel):
the shots come from the train split, five of them, every test question is asked, greedy, the same stop strings and
prompt shape, and the real tasks read their shots from a train file."""

from __future__ import annotations

from pathlib import Path

import upstream_wheels
import yaml

from porter.checks import quality
from porter.task import load_task

ROOT = Path(__file__).resolve().parents[2]


def test_porter_asks_gsm8k_as_lm_eval_does(wheels):
    task = yaml.safe_load(upstream_wheels.read_source(wheels["lm-eval"], "lm_eval/tasks/gsm8k/gsm8k.yaml"))
    assert (task["fewshot_split"], task["test_split"], task["num_fewshot"]) == ("train", "test", 5)
    assert task["generation_kwargs"]["until"] == quality.STOP
    assert task["generation_kwargs"]["temperature"] == 0.0
    assert task["doc_to_text"] == "Question: {{question}}\nAnswer:"
    assert quality.gsm8k_prompt([{"question": "q", "answer": "a"}], [], 0).endswith("Question: q\nAnswer:")
    for name in ("glm52_mi355x.yaml", "glm52_mi355x_vllm.yaml"):
        gsm8k = next(c for c in load_task(ROOT / "tasks" / name, environ={}).checks.quality if c.kind == "gsm8k")
        assert gsm8k.few_shot == task["num_fewshot"] and gsm8k.samples == 1319
        assert gsm8k.few_shot_dataset and gsm8k.few_shot_dataset.endswith("gsm8k/train.jsonl"), name
        asked, _ = quality.choose(1319, gsm8k.samples, gsm8k.few_shot, shot_pool=7473)
        assert len(asked) == 1319
