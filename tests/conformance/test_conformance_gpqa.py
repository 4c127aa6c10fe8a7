"""porter's multiple-choice check against lm-eval 0.4.13's `gpqa_diamond_cot_zeroshot` (pinned wheel,
lm_eval/tasks/gpqa/cot_zeroshot): every request equals the one lm-eval posts (its process_docs shuffle after
evaluator.py's seed, its prompt template, its stop string, the task's max tokens as `--gen_kwargs max_gen_toks=N`),
and porter picks the answer lm-eval's flexible-extract filter (MultiChoiceRegexFilter) picks."""

from __future__ import annotations

import copy
import inspect
import json
import random
import re
import sys
from pathlib import Path

import upstream_wheels
import yaml
from test_conformance_gsm8k import lm_eval_parts

from porter.checks import quality, scoring
from porter.task import load_task

ROOT = Path(__file__).resolve().parents[2]
TASK = "lm_eval/tasks/gpqa/cot_zeroshot/"


class ListDataset(list):
    """The one datasets.Dataset method process_docs calls: map, each row updated with what the function returns."""

    def map(self, function):
        return ListDataset({**row, **function(row)} for row in self)


def gpqa_like(count: int) -> list[dict]:
    """Rows shaped like Idavidrein/gpqa's gpqa_diamond.csv columns, with what lm-eval's preprocess rewrites (spaces
    around, a doubled space, " [title]") and a question with a newline and a trailing space, as written in the CSV."""
    return [
        {
            "Question": f"A mass of {n}.5 kg moves at 3 m/s.\nWhat is its kinetic energy? ",
            "Correct Answer": f" {n * 2.25 + 1.125:g} J",
            "Incorrect Answer 1": f"{n}  J",
            "Incorrect Answer 2": f"{n + 7} kJ [title] Energy",
            "Incorrect Answer 3": f"\t{n / 2:g} mJ ",
        }
        for n in range(count)
    ]


def lm_eval_gpqa(wheels, rows: list[dict], model: str, max_gen_toks: int) -> tuple[list[dict], list[dict], dict]:
    """(request bodies, processed documents, the yaml) as lm-eval builds them for gpqa_diamond_cot_zeroshot."""
    lm = lm_eval_parts(wheels)
    lm.client.model = model
    loader = type("Loader", (yaml.SafeLoader,), {})
    loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    task = yaml.load(lm.source(TASK + "_gpqa_cot_zeroshot_yaml"), Loader=loader)
    assert task["process_docs"] == "utils.process_docs" and task.get("num_fewshot") == 0
    utils = {"__name__": "gpqa_utils"}
    exec(compile(lm.source(TASK + "utils.py"), TASK + "utils.py", "exec"), utils)
    state = random.getstate()
    try:
        random.seed(lm.seeds["DEFAULT_RANDOM_SEED"])  # simple_evaluate, before the tasks load their documents
        docs = utils["process_docs"](ListDataset(rows))
    finally:
        random.setstate(state)
    bodies = []
    for doc in docs:
        context = "".join(m.to_text() for m in lm.turns(q=lm.apply(task["doc_to_text"], doc), tgt_delim=" "))
        kwargs = {**copy.deepcopy(task["generation_kwargs"]), "max_gen_toks": max_gen_toks}  # --gen_kwargs
        bodies.append(lm.payload(context, generate=True, gen_kwargs=kwargs, seed=lm.defaults["seed"]))
    return bodies, docs, task


def test_porter_gpqa_requests_are_lm_evals_byte_for_byte(wheels):
    spec = next(
        c for c in load_task(ROOT / "tasks" / "glm52_mi355x.yaml", environ={}).checks.quality if c.kind != "gsm8k"
    )
    rows = gpqa_like(50)
    expected, _, _ = lm_eval_gpqa(wheels, rows, "served-model", spec.max_tokens)
    asked, shots = quality.choose(len(rows), spec.samples, 0, shot_pool=0)
    docs = quality.choice_docs(rows)
    ours = [quality.request(spec, "served-model", docs[index][0]) for index in asked]
    assert asked == list(range(50)) and shots == [[]] * 50
    assert [json.dumps(body) for body in ours] == [json.dumps(body) for body in expected]


def test_porter_picks_the_answer_lm_evals_filter_picks(wheels):
    rows = gpqa_like(12)
    _, docs, task = lm_eval_gpqa(wheels, rows, "m", 16)
    source = upstream_wheels.read_source(wheels["lm-eval"], "lm_eval/filters/extraction.py")
    names = {"re": re, "sys": sys}
    flexible = next(f for f in task["filter_list"] if f["name"] == "flexible-extract")["filter"][0]
    picker = upstream_wheels.class_stand_in(source, "MultiChoiceRegexFilter", ["__init__", "apply"], names, "x.py")
    fallback = inspect.signature(picker.__init__).parameters["fallback"].default
    picker = object.__new__(picker)
    picker.regex, picker.fallback = re.compile(flexible["regex_pattern"]), fallback
    picker.group_select, picker.ignore_case = flexible["group_select"], flexible["ignore_case"]
    picker.ignore_punctuation, picker.regexes_to_ignore = flexible["ignore_punctuation"], None
    ours = quality.choice_docs(rows)
    for doc, (_, choices, letter) in zip(docs, ours, strict=True):
        replies = [
            f"So the answer is {doc['answer']}.",
            f"(A) is tempting, yet (D) holds. {doc['answer']}",
            f"It equals {doc['choice3'].upper()}!",
            f"Between {doc['choice1']} and {doc['choice2']}, {doc['choice2']}.",
            "Answer: B",
            "answer: b",
            "I cannot tell.",
        ]
        picked = picker.apply([replies], [doc])[0]
        assert [scoring.extract_choice(reply, choices) for reply in replies] == picked
        assert f"({letter})" == doc["answer"]
