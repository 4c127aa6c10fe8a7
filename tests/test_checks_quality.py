"""Quality check: lm-eval extraction, Wilson/Newcombe/McNemar math, verdicts, datasets, and real runs."""

from __future__ import annotations

import csv
import json

import pytest
from sse_server import SseServer

from porter.checks import quality, quality_data, quality_kind, scoring
from porter.checks.loadgen import CheckError
from porter.checks.quality import QualityCheckSpec


@pytest.fixture(scope="module")
def server():
    running = SseServer()
    yield running
    running.stop()


@pytest.mark.parametrize(
    "reply, answer, strict, flexible",
    [
        (" 3 + 4 = 7.\n#### 7", "#### 7", True, True),
        (" The total is 1,234.\n#### 1,234", "... #### 1234", True, True),
        (" It costs $18.", "#### 18", False, True),
        (" So the answer is 18.", "#### 18", False, True),
        (" The change is -5 degrees.", "#### -5", False, True),
        ("#### -12\nThen 7 more", "#### -12", True, False),
        (" I do not know.", "#### 3", False, False),
        ("", "#### 3", False, False),
        (" 2.50 each\n#### 2.5", "#### 2.5", True, True),
        (" First 10, then 20.\n#### 30.", "#### 30", True, True),
        (" #### 5 #### 6", "#### 5", True, False),
    ],
)
def test_gsm8k_extraction_like_lm_eval(reply, answer, strict, flexible):
    assert scoring.gsm8k_matches(reply, answer) == (strict, flexible)


@pytest.mark.parametrize(
    "text, extracted",
    [("#### 1,000.", "1,000."), ("no marker 42", scoring.INVALID), ("#### -3.5 and #### 4", "-3.5")],
)
def test_strict_takes_the_first_marked_number(text, extracted):
    assert scoring.extract_strict(text) == extracted


@pytest.mark.parametrize(
    "reply, picked",
    [
        ("The answer is (B).", "(B)"),
        ("(A) looks right, but (C) is.", "(C)"),
        ("It must be 4.2 J, the second one", "(B)"),  # a choice quoted, case and punctuation aside
        ("Between 4.2 j and 12 kJ: 12 KJ!", "(C)"),  # the last quoted
        ("Answer: D", "(D)"),
        ("Answer:A", "(A)"),
        ("answer: b", "[invalid]"),
        ("", "[invalid]"),
    ],
)
def test_choice_extraction_is_lm_evals_flexible_extract(reply, picked):
    assert scoring.extract_choice(reply, ["1 J", "4.2 J", "12 kJ", "0.5 J"]) == picked


@pytest.mark.parametrize(
    "successes, n, low, high",
    [(81, 100, 0.7222, 0.8749), (0, 10, 0.0, 0.2775), (10, 10, 0.7225, 1.0), (190, 200, 0.9104, 0.9726)],
)
def test_wilson_interval_known_values(successes, n, low, high):
    assert scoring.wilson(successes, n) == pytest.approx((low, high), abs=1e-4)


@pytest.mark.parametrize(
    "successes, n, reference, significant, word",
    [
        (180, 200, 0.951, True, "real drop"),
        (187, 200, 0.951, False, "within sampling noise"),
        (1300, 1319, 0.951, True, "real gain"),
        (18, 20, 0.951, False, "within sampling noise"),
    ],
)
def test_difference_to_a_reference_is_real_only_outside_the_interval(successes, n, reference, significant, word):
    verdict = scoring.compare_to_reference(successes / n, scoring.wilson(successes, n), n, reference)
    assert verdict.startswith("a real ") is significant
    assert word in verdict


def result(correct: list[bool], **bar) -> quality.QualityResult:
    n, successes = len(correct), sum(correct)
    low, high = scoring.wilson(successes, n)
    return quality.QualityResult(
        name="gsm8k",
        kind="gsm8k",
        metric="flexible_match",
        score=successes / n,
        strict_match=None,
        flexible_match=successes / n,
        ci_low=low,
        ci_high=high,
        n=n,
        errors=0,
        dataset="d",
        dataset_sha256="s",
        model="m",
        question_ids=list(range(n)),
        **bar,
    )


def test_pass_and_verdict_against_reference_and_tolerance():
    good = result([True] * 188 + [False] * 12, reference=0.951, tolerance=0.015)
    bad = result([True] * 180 + [False] * 20, reference=0.951, tolerance=0.015)
    assert good.passed and not bad.passed
    assert "within sampling noise" in good.verdict and "more samples would resolve it" in good.verdict
    assert "real drop" in bad.verdict
    assert result([True] * 5 + [False] * 5, minimum=0.4).passed
    assert not result([True] * 3 + [False] * 7, minimum=0.4).passed


def test_builtin_datasets_resolve_and_a_missing_one_lists_them():
    assert quality_data.resolve_dataset("builtin:twin-gsm8k").name == "twin-gsm8k.jsonl"
    with pytest.raises(CheckError, match="no built-in dataset 'nope'; available: .*twin-gpqa.*twin-gsm8k"):
        quality_data.resolve_dataset("builtin:nope")


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "empty"),
        ('{"question": "q"}\n', r"row 1 lacks \['answer'\]"),
        ("[1]\n", "expected a JSON object"),
        ("{bad\n", ":1: not a JSON object"),
    ],
)
def test_bad_datasets_are_named(tmp_path, content, message):
    path = tmp_path / "set.jsonl"
    path.write_text(content)
    with pytest.raises(CheckError, match=message):
        quality_data.check_fields(quality_data.read_rows(path), ("question", "answer"), path)


@pytest.mark.parametrize("count, samples, few_shot, asked", [(300, 200, 5, 200), (20, 200, 5, 20), (10, 3, 0, 3)])
def test_a_question_is_never_its_own_shot(count, samples, few_shot, asked):
    """Shots from the asked set itself, as lm-eval draws them when its few-shot split is the test split."""
    chosen, shots = quality.choose(count, samples, few_shot)
    assert chosen == list(range(asked)) and all(len(set(each)) == few_shot for each in shots)
    assert all(index not in each for index, each in zip(chosen, shots, strict=True))
    assert quality.choose(count, samples, few_shot) == (chosen, shots)


def write_gsm8k(path, count: int) -> dict[str, str]:
    rows = [
        {"question": f"What is {n} plus {n}?", "answer": f"{n} + {n} = {2 * n}.\n#### {2 * n:,}"}
        for n in range(995, 995 + count)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return {row["question"]: row["answer"] for row in rows}


def test_gsm8k_run_scores_strict_and_flexible(server, tmp_path):
    answers = write_gsm8k(tmp_path / "gsm.jsonl", 40)
    questions = sorted(answers)
    replies = {q: f" Easy.\n{answers[q].split(chr(10))[-1]}" for q in questions[:20]}
    replies.update({q: f" It is {answers[q].split('#### ')[-1]}." for q in questions[20:30]})
    server.reset(answers=replies)
    spec = QualityCheckSpec(
        name="gsm8k",
        kind="gsm8k",
        dataset=str(tmp_path / "gsm.jsonl"),
        samples=35,
        few_shot=5,
        reference=0.6,
        tolerance=0.1,
    )
    outcome = quality.run_quality(server.url, spec)
    asked, _ = quality.choose(40, 35, 5)
    strict = sum(questions.index(f"What is {995 + i} plus {995 + i}?") < 20 for i in asked)
    flexible = sum(questions.index(f"What is {995 + i} plus {995 + i}?") < 30 for i in asked)
    assert (outcome.n, outcome.errors, outcome.model) == (35, 0, "sse-test")
    assert outcome.strict_match == pytest.approx(strict / 35)
    assert outcome.flexible_match == pytest.approx(flexible / 35) and outcome.score == outcome.flexible_match
    assert len(outcome.dataset_sha256) == 64
    assert json.loads(json.dumps(outcome.to_dict()))["passed"] is outcome.passed


def test_gsm8k_prompt_format(tmp_path):
    rows = [{"question": f"q{n}", "answer": f"a{n}\n#### {n}"} for n in range(3)]
    assert quality.gsm8k_prompt(rows, [2, 0], 1) == (
        "Question: q2\nAnswer: a2\n#### 2\n\nQuestion: q0\nAnswer: a0\n#### 0\n\nQuestion: q1\nAnswer:"
    )


def test_multiple_choice_run_reads_gpqa_csv_and_unshuffles_letters(server, tmp_path):
    path = tmp_path / "gpqa.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*quality.MC_FIELDS, "Subdomain"])
        writer.writeheader()
        for n in range(30):
            writer.writerow(
                {
                    "Question": f"Which is {n}?",
                    "Correct Answer": f"right {n}",
                    "Incorrect Answer 1": "w1",
                    "Incorrect Answer 2": "w2",
                    "Incorrect Answer 3": "w3",
                    "Subdomain": "x",
                }
            )
    server.reset(answers={f"Which is {n}?": f"right {n}" for n in range(24)})
    spec = QualityCheckSpec(
        name="gpqa", kind="multiple_choice", dataset=str(path), samples=30, few_shot=0, metric="accuracy", minimum=0.5
    )
    outcome = quality.run_quality(server.url, spec)
    assert (outcome.n, outcome.score, outcome.strict_match) == (30, pytest.approx(0.8), None)
    assert outcome.passed and outcome.question_ids == list(range(30))  # lm-eval asks its documents in order
    docs = quality.choice_docs(quality.read_dataset(spec)[1])
    assert {letter for _, _, letter in docs} == set("ABCD")
    assert docs[0][0].startswith("What is the correct answer to this question:Which is 0?\nChoices:\n(")


def test_failed_requests_count_as_wrong_and_are_reported(server, tmp_path):
    answers = write_gsm8k(tmp_path / "gsm.jsonl", 12)
    server.reset(answers={q: f" ok\n{a.split(chr(10))[-1]}" for q, a in answers.items()}, fail_every=4)
    spec = QualityCheckSpec(
        name="g", kind="gsm8k", dataset=str(tmp_path / "gsm.jsonl"), samples=6, few_shot=2, minimum=0.0
    )
    outcome = quality.run_quality(server.url, spec)
    assert outcome.errors == 0 and outcome.score == 1.0
    server.reset(fail_every=1)  # a server failing most questions stops the check: its score would be a lie
    with pytest.raises(CheckError, match=r"(?s)failed 6 of 6 questions.*HTTP 500: {.*injected failure"):
        quality.run_quality(server.url, spec)


def test_questions_refused_by_the_server_carry_its_status_and_answer(server, tmp_path):
    write_gsm8k(tmp_path / "gsm.jsonl", 12)
    server.reset(reject_over=20)  # every few-shot prompt is longer: refused before scheduling, never retried
    spec = QualityCheckSpec(
        name="g", kind="gsm8k", dataset=str(tmp_path / "gsm.jsonl"), samples=6, few_shot=2, minimum=0.0
    )
    with pytest.raises(CheckError) as refused:
        quality.run_quality(server.url, spec)
    assert "failed 6 of 6 questions" in str(refused.value)
    assert "6 requests failed with HTTP 400: {" in str(refused.value)
    assert "exceeds the model's maximum context length of 20 tokens" in str(refused.value)
    result = {"score": 0.5, "ci_low": 0.2, "ci_high": 0.8, "n": 6, "errors": 1, "passed": False}
    result["failures"] = [{"count": 1, "status": 400, "error": "HTTP 400", "body": '{"message": "too long"}'}]
    shown = quality_kind.render("quality:g", result)
    assert "1 questions failed (counted wrong)" in shown and '1 request failed with HTTP 400: {"message"' in shown


def test_shots_from_a_separate_file_leave_every_question_to_ask(server, tmp_path):
    """lm-eval's gsm8k takes its 5 shots from the train split and asks all 1319 test questions."""
    answers = write_gsm8k(tmp_path / "test.jsonl", 12)
    shots = [{"question": f"Train question {n}?", "answer": f"Worked.\n#### {n}"} for n in range(8)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in shots))
    server.reset(answers={q: f" {a.split(chr(10))[-1]}" for q, a in answers.items()})
    spec = QualityCheckSpec(
        name="gsm8k",
        kind="gsm8k",
        dataset=str(tmp_path / "test.jsonl"),
        few_shot_dataset=str(tmp_path / "train.jsonl"),
        samples=12,
        few_shot=5,
        minimum=0.5,
    )
    outcome = quality.run_quality(server.url, spec)
    assert (outcome.n, outcome.errors, outcome.score) == (12, 0, 1.0)
    assert outcome.question_ids == list(range(12))  # lm-eval's --limit: the first questions, in order
    asked, chosen = quality.choose(12, 12, 5, shot_pool=8)
    assert asked == list(range(12)) and all(len(set(each)) == 5 and set(each) <= set(range(8)) for each in chosen)
    assert len({tuple(each) for each in chosen}) > 1  # each question draws its own shots
    without = quality.run_quality(server.url, spec.model_copy(update={"few_shot_dataset": None}))
    assert without.n == 12  # shots from the test set itself, never the question asked


def test_a_short_few_shot_file_is_named(tmp_path):
    write_gsm8k(tmp_path / "test.jsonl", 4)
    (tmp_path / "train.jsonl").write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n")
    spec = QualityCheckSpec(
        name="g",
        kind="gsm8k",
        dataset=str(tmp_path / "test.jsonl"),
        few_shot_dataset=str(tmp_path / "train.jsonl"),
        few_shot=2,
        minimum=0,
    )
    with pytest.raises(CheckError, match="train.jsonl has 1 rows, fewer than the check's 2 few-shot"):
        quality.read_shot_rows(spec)


def test_the_answer_deadline_grows_with_the_generation_budget():
    assert quality.quality_deadlines(1024).total_s == quality.QUALITY_DEADLINES.total_s  # GSM8K keeps 180 s
    long = quality.quality_deadlines(16384)  # GPQA-Diamond at 16k tokens
    assert long.total_s == long.first_byte_s > 16384 / quality.SLOWEST_HEALTHY_DECODE_TOK_S
    assert quality.quality_deadlines(32768).total_s > long.total_s
