"""Triage on the labelled real crash logs in ../shared/crashlogs (read in place, never copied here)."""

import pytest
from triage_cases import (
    crashlogs_dir,
    in_text,
    leave_one_source_out,
    load_cases,
    owed_to_declarations,
    same_line,
)
from triage_noise import bury

from porter.triage import rules, triage_text

CRASHLOGS = crashlogs_dir()
CASES = load_cases(CRASHLOGS) if CRASHLOGS.is_dir() else []
needs_corpus = pytest.mark.skipif(not CASES, reason=f"no labelled crash logs at {CRASHLOGS}")


@needs_corpus
def test_category_accuracy_on_the_corpus_is_at_least_90_percent():
    results = [(case["file"], case["category"], triage_text(case["log"]).category) for case in CASES]
    wrong = [result for result in results if result[1] != result[2]]
    assert len(wrong) <= 0.1 * len(results), f"wrong: {wrong}"


@needs_corpus
def test_our_key_line_is_the_labelled_one_for_at_least_90_percent():
    wrong = [case["file"] for case in CASES if not same_line(case["key_line"], triage_text(case["log"]).key_line)]
    assert len(wrong) <= 0.1 * len(CASES), f"wrong: {wrong}"


@needs_corpus
def test_leave_one_source_out_accuracy_is_at_least_90_percent():
    figure = leave_one_source_out(CASES, frozenset(rules.RUNTIME_LAYER_RULES))
    assert figure["accuracy"] >= 0.9, figure


def labelled(source: str, log: str, category: str, file: str) -> dict:
    return {"source_repo": source, "log": log, "category": category, "file": file}


def test_a_fork_is_the_engine_it_forks_not_a_second_source():
    line = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`.\n"
    cases = [
        labelled("vllm-project/vllm", line, "out_of_memory", "a"),
        labelled("ROCm/vllm", line, "out_of_memory", "b"),
    ]
    assert leave_one_source_out(cases, frozenset(), by_tracker=True)["accuracy"] == 1.0  # the first definition
    figure = leave_one_source_out(cases, frozenset())
    assert figure["accuracy"] == 0.0
    assert figure["rules_switched_off"] == {"vllm-project/vllm": ["memory_budget_exhausted"]}


def test_a_source_specific_rule_outranked_in_the_full_run_is_switched_off_too():
    log = "[aiter] Fmoe tuning not support for (256, 8, 'Silu')\nRuntimeError: This GEMM is not supported!\n"
    cases = [labelled("ROCm/aiter", log, "unsupported_arch_or_kernel", "a")]
    assert leave_one_source_out(cases, frozenset(), by_tracker=True)["accuracy"] == 1.0  # the outranked rule stood in
    figure = leave_one_source_out(cases, frozenset())
    switched_off = ["ck_rejects_problem", "kernel_rejects_problem", "kernel_tuning_unsupported"]
    assert figure["rules_switched_off"]["ROCm/aiter"] == switched_off
    assert figure["accuracy"] == 0.0 and not rules.DISABLED


def test_what_the_figure_owes_a_declaration_is_gone_once_another_source_gives_evidence():
    line = "RuntimeError: This GEMM is not supported!\n"
    declared = rules.GRAMMAR_RULES | {"ck_rejects_problem"}
    aiter_only = [labelled("ROCm/aiter", line, "unsupported_arch_or_kernel", "a")]
    assert owed_to_declarations(aiter_only, declared, rules.GRAMMAR_RULES) == {"ck_rejects_problem": ["a"]}
    with_vllm = [
        *aiter_only,
        labelled("vllm-project/vllm", f"ERROR [core.py:1] {line}", "unsupported_arch_or_kernel", "b"),
    ]
    assert owed_to_declarations(with_vllm, declared, rules.GRAMMAR_RULES) == {}


def test_each_held_out_figure_is_counted_where_it_applies_while_the_source_rules_are_off():
    line = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`.\n"
    cases = [
        labelled("vllm-project/vllm", line, "out_of_memory", "a"),
        labelled("sgl-project/sglang", line, "out_of_memory", "b") | {"key_line": "not in the log"},
    ]

    def judge(case):  # read while the held-out source's own rules are off
        result = triage_text(case["log"])
        quoted = case.get("key_line") != "not in the log"
        return {"category": result.category == case["category"], "quoted": quoted or None}

    figure = leave_one_source_out(cases, frozenset(), judge=judge)
    assert figure["figures"] == {"category": 1.0, "quoted": 1.0}  # evidence from the other source keeps the rule
    assert figure["figure_misses"] == {} and not rules.DISABLED
    alone = leave_one_source_out(cases[:1], frozenset(), judge=judge)
    assert alone["figures"]["category"] == 0.0 and alone["figure_misses"] == {"category": ["a"]}


@needs_corpus
@pytest.mark.parametrize("case", CASES, ids=[case["file"] for case in CASES])
def test_the_labelled_key_line_is_in_the_excerpt_plain_and_buried(case):
    plain = triage_text(case["log"])
    assert plain.key_line and plain.key_line in plain.excerpt
    buried = triage_text(bury(case["log"], count=10_000, seed=len(case["log"]))[0])
    assert (buried.category, buried.key_line) == (plain.category, plain.key_line)
    assert buried.key_line in buried.excerpt
    if in_text(case["key_line"], case["log"]):  # a few labels quote a line the posted excerpt cut off
        assert in_text(case["key_line"], plain.excerpt)
        assert in_text(case["key_line"], buried.excerpt)


@pytest.mark.parametrize(
    ("expected", "line", "matches"),
    [
        ("RuntimeError: ck_moe_stage2 ... device_gemm does not support this GEMM problem",
         "RuntimeError: ck_moe_stage2 (a8w8) device_gemm does not support this GEMM problem", True),
        ("WARNING [fused_moe.py:886] Using default MoE config. Performance might be sub-optimal!",
         "Using default MoE config. Performance might be sub-optimal!", True),
        ("KeyError: 'model.layers.3.mlp.experts.w2_weight_scale'", "  123> KeyError: 'model.layers.3'", False),
    ],
)  # fmt: skip
def test_the_key_line_comparison_forgives_prefixes_and_elisions_only(expected, line, matches):
    assert in_text(expected, line) is matches
