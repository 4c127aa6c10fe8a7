"""porter's GSM8K check against lm-eval 0.4.13's own task file (`lm_eval/tasks/gsm8k/gsm8k.yaml`, pinned wheel):
the shots come from the train split, five of them, every test question is asked, greedy, the same stop strings and
prompt shape, and the real tasks read their shots from a train file."""

from __future__ import annotations

import ast
import copy
import dataclasses
import inspect
import json
import re
from pathlib import Path
from types import SimpleNamespace

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


def _class_defaults(source: str, class_name: str) -> dict:
    """The literal defaults of a class's annotated fields (lm-eval's TaskConfig, its dataclass pulls datasets)."""
    found = next(node for node in ast.parse(source).body if isinstance(node, ast.ClassDef) and node.name == class_name)
    fields = [node for node in found.body if isinstance(node, ast.AnnAssign) and node.value is not None]
    return {node.target.id: ast.literal_eval(node.value) for node in fields if isinstance(node.value, ast.Constant)}


def lm_eval_parts(wheels) -> SimpleNamespace:
    """lm-eval 0.4.13's own request-building code out of the wheel: `source` (a file's text), `apply` (its jinja
    template rendering), `turns` (ConfigurableTask.build_qa_turn), `payload` (LocalCompletionsAPI._create_payload on a
    client with TemplateAPI's defaults: `defaults`), TaskConfig's delimiters (`config`) and the seeds (`seeds`)."""

    def source(member: str) -> str:
        return upstream_wheels.read_source(wheels["lm-eval"], member)

    upstream_wheels.import_from_wheel(wheels["markupsafe"], "markupsafe")
    jinja2 = upstream_wheels.import_from_wheel(wheels["jinja2"], "jinja2")
    names = {"re": re, "Environment": jinja2.Environment, "BaseLoader": jinja2.BaseLoader}
    names["StrictUndefined"] = jinja2.StrictUndefined
    upstream_wheels.lift(source("lm_eval/utils.py"), ["regex_replace", "env", "apply_template"], names, "utils.py")
    names["dataclass"] = dataclasses.dataclass
    upstream_wheels.lift(source("lm_eval/api/utils.py"), ["Message", "maybe_delimit", "requires_delimiter"], names, "u")
    turns = upstream_wheels.class_stand_in(
        source("lm_eval/api/task.py"), "ConfigurableTask", ["build_qa_turn"], names, "t"
    )
    models = upstream_wheels.lift(source("lm_eval/models/utils.py"), ["handle_stop_sequences"], {}, "models/utils.py")
    api = upstream_wheels.class_stand_in(
        source("lm_eval/models/openai_completions.py"), "LocalCompletionsAPI", ["_create_payload"], models, "oc.py"
    )
    template_api = upstream_wheels.class_stand_in(
        source("lm_eval/models/api_models.py"), "TemplateAPI", ["__init__"], {}, "a"
    )
    defaults = {name: p.default for name, p in inspect.signature(template_api.__init__).parameters.items()}
    client = api()
    client._max_gen_toks = defaults["max_gen_toks"]
    seeds = upstream_wheels.lift(source("lm_eval/defaults.py"), ["DEFAULT_OTHER_SEED", "DEFAULT_RANDOM_SEED"], {}, "d")
    return SimpleNamespace(
        source=source,
        apply=names["apply_template"],
        turns=turns().build_qa_turn,
        payload=client._create_payload,
        client=client,
        defaults=defaults,
        config=_class_defaults(source("lm_eval/config/task.py"), "TaskConfig"),
        seeds=seeds,
    )


def lm_eval_gsm8k_requests(wheels, test_rows: list[dict], train_rows: list[dict], model: str) -> list[dict]:
    """The body lm-eval 0.4.13 posts for each test document, built by its own code from the wheel: the gsm8k yaml,
    the few-shot sampler seeded as evaluator.py seeds it, the templates through its jinja environment, the turns of
    ConfigurableTask.build_qa_turn and LocalCompletionsAPI._create_payload with TemplateAPI's defaults."""
    lm = lm_eval_parts(wheels)
    lm.client.model = model
    task = yaml.safe_load(lm.source("lm_eval/tasks/gsm8k/gsm8k.yaml"))
    samplers = {"__name__": "lm_eval.api.samplers"}
    exec(compile(lm.source("lm_eval/api/samplers.py"), "lm_eval/api/samplers.py", "exec"), samplers)
    sampler = samplers["ContextSampler"](train_rows, rnd=None).set_rnd(lm.seeds["DEFAULT_OTHER_SEED"])
    delimiters = {"tgt_delim": lm.config["target_delimiter"], "few_delim": lm.config["fewshot_delimiter"]}
    bodies = []
    for doc in test_rows:  # build_all_requests asks for each document's context in order
        messages = []
        for shot in sampler.sample(n=task["num_fewshot"], eval_doc=None):  # fewshot_split != test_split
            messages += lm.turns(
                q=lm.apply(task["doc_to_text"], shot), a=lm.apply(task["doc_to_target"], shot), **delimiters
            )
        messages += lm.turns(q=lm.apply(task["doc_to_text"], doc), tgt_delim=lm.config["target_delimiter"])
        context = "".join(message.to_text() for message in messages)
        kwargs = copy.deepcopy(task["generation_kwargs"])
        bodies.append(lm.payload(context, generate=True, gen_kwargs=kwargs, seed=lm.defaults["seed"]))
    return bodies


def gsm8k_like(count: int, prefix: str) -> list[dict]:
    """Rows shaped like openai/gsm8k's (a word problem; worked answer, `<<a*b=c>>` calculator notes, `#### N`),
    with the characters a template or JSON could mangle: quotes, braces, a dollar sign, non-ASCII, trailing space."""
    rows = []
    for n in range(count):
        question = f'{prefix} {n}: Ana has ${n} and {{{{ {n % 7} }}}} "caf\u00e9" bills.\nHow many now? '
        answer = f"She has {n}*2 = <<{n}*2={2 * n}>>{2 * n} dollars.\n#### {2 * n:,}"
        rows.append({"question": question, "answer": answer})
    return rows


def test_porter_gsm8k_requests_are_lm_evals_byte_for_byte(wheels):
    """50 test documents against a train split of GSM8K's size (7473): every body porter posts, serialized, equals
    lm-eval's: its shots (a fresh draw per question), text, stop strings, max tokens, temperature and seed."""
    test_rows, train_rows = gsm8k_like(50, "Test"), gsm8k_like(7473, "Train")
    expected = lm_eval_gsm8k_requests(wheels, test_rows, train_rows, "served-model")
    gsm8k = next(
        c for c in load_task(ROOT / "tasks" / "glm52_mi355x.yaml", environ={}).checks.quality if c.kind == "gsm8k"
    )
    asked, shots = quality.choose(len(test_rows), 50, gsm8k.few_shot, shot_pool=len(train_rows))
    rows = test_rows + train_rows
    ours = [
        quality.request(
            gsm8k, "served-model", quality.gsm8k_prompt(rows, [len(test_rows) + s for s in shots[i]], index)
        )
        for i, index in enumerate(asked)
    ]
    assert [json.dumps(body) for body in ours] == [json.dumps(body) for body in expected]
    assert len({tuple(each) for each in shots}) == 50
