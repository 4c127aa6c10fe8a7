"""Quality check: GSM8K and GPQA-style multiple choice against an OpenAI-compatible server, asked as lm-eval asks.

Covers reading the datasets (GSM8K JSONL `question`/`answer ... #### N`; GPQA CSV or JSONL with
"Question", "Correct Answer", "Incorrect Answer 1..3"; `builtin:NAME` resolves to
porter/checks/data/NAME.jsonl), choosing the questions and the few-shot examples, the requests (each one POST
/v1/completions, greedy) and the result with its Wilson interval and verdict. The requests are lm-eval 0.4.13's
local-completions payloads key for key: gsm8k as lm-eval's `gsm8k` (the first `samples` test questions, each with
its own shots drawn in turn by lm-eval's seeded sampler from `few_shot_dataset`, its train split, or else from the
set itself less the question), multiple choice as `gpqa_diamond_cot_zeroshot` (its prompt, its choice order, its
answer extraction in scoring.py).
A dataset that is not UTF-8, has fields of the wrong type or
too few rows for its few-shot examples is a CheckError naming the file and row; each question has a
deadline that grows with `max_tokens` and a byte cap, a malformed answer is that question's error, and a
server failing more than a tenth of the questions stops the check (a hung server costs one deadline, not one
per question).
Extraction and statistics live in scoring.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

import aiohttp
from pydantic import Field, model_validator

from porter.checks import quality_data, request_failures, scoring
from porter.checks.kind import OnProgress, Tally
from porter.checks.loadgen import CheckError, Deadlines, make_session, read_capped, resolve_model
from porter.ledger.records import Record
from porter.schema import Spec

CONCURRENCY = 32
ATTEMPTS = 3
# One non-streamed answer of max_tokens: it all arrives at the end, so first byte = total; a hang is not retried.
QUALITY_DEADLINES = Deadlines(first_byte_s=180.0, total_s=180.0, max_bytes=4 << 20)
# A long answer takes its length in decode time: the deadline allows this rate per request on top of a fixed
# allowance for queueing and prefill (a reasoning model at GPQA's 16k tokens needs ~15 min; GSM8K's 1k keeps 180 s).
SLOWEST_HEALTHY_DECODE_TOK_S = 20.0
QUALITY_ALLOWANCE_S = 60.0
# The check stops once more than this share of its questions failed (and at least MIN_FAILURES did).
MAX_FAILURE_SHARE = 0.1
MIN_FAILURES = 5
STOP = ["Question:", "</s>", "<|im_end|>"]
# lm-eval 0.4.13: evaluator.py seeds each task's few-shot sampler with DEFAULT_OTHER_SEED (defaults.py), and
# api_models.py TemplateAPI sends seed=1234 in every request; its max_gen_toks default (256) is the tasks' max_tokens.
LM_EVAL_SEED = 1234
# tasks/gpqa/cot_zeroshot: doc_to_text, generation_kwargs.until, and the choice order of utils.process_docs (one
# random.shuffle per document in turn, after evaluator.py's random.seed(DEFAULT_RANDOM_SEED = 0)).
MC_PROMPT = "What is the correct answer to this question:{question}\nChoices:\n{choices}\nLet's think step by step: "
MC_STOP = ["</s>"]
MC_SHUFFLE_SEED = 0
# A reference measured by the run itself: the score of its first healthy accepted configuration (ledger/state.py keeps
# it; until there is one, a result is judged against its own score, which makes it the candidate reference).
FIRST_HEALTHY = "first_healthy"
MC_FIELDS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
LETTERS = "ABCD"


class QualityCheckSpec(Spec):
    name: str = Field(min_length=1, description="Name in reports, e.g. gsm8k.")
    kind: Literal["gsm8k", "multiple_choice"] = Field(description="gsm8k (#### N answers) or GPQA-style choices.")
    dataset: str = Field(min_length=1, description="Dataset path, or `builtin:NAME` for a set shipped with porter.")
    samples: int = Field(200, ge=1, description="Questions to ask (the first N after a seeded shuffle).")
    few_shot: int = Field(5, ge=0, description="Few-shot examples in the prompt (gsm8k).")
    few_shot_dataset: str | None = Field(
        None,
        description="File the few-shot examples come from (gsm8k; lm-eval takes them from the train split). "
        "Unset: they are drawn from `dataset` itself, never the question asked (lm-eval's rule for one split).",
    )
    metric: Literal["strict_match", "flexible_match", "accuracy"] = Field("flexible_match")
    max_tokens: int = Field(256, ge=1, description="Generation budget per question (lm-eval's max_gen_toks: 256).")
    reference: float | Literal["first_healthy"] | None = Field(
        None,
        description="Reference score (e.g. of the FP8 model), or first_healthy: the score of the run's first healthy "
        "accepted configuration (a relative target, for day 0 when no reference is known).",
    )
    tolerance: float | None = Field(None, ge=0, le=1, description="Allowed drop below `reference`.")
    minimum: float | None = Field(None, ge=0, le=1, description="Absolute floor, instead of a reference.")

    @model_validator(mode="after")
    def _has_a_bar(self) -> QualityCheckSpec:
        if self.minimum is None and (self.reference is None or self.tolerance is None):
            raise ValueError("a quality check needs `reference` and `tolerance`, or a `minimum`")
        if isinstance(self.reference, float) and not 0 <= self.reference <= 1:
            raise ValueError(f"reference must be a score between 0 and 1 (or {FIRST_HEALTHY}), got {self.reference}")
        return self

    @property
    def relative(self) -> bool:
        return self.reference == FIRST_HEALTHY


@dataclass
class QualityResult(Record):
    """Score of one quality check, its 95% interval, and whether it clears the task's bar; read back from its
    document by the kind (quality_kind.py), whatever part of it a check that failed part-way left."""

    name: str = ""
    kind: str = ""
    metric: str = ""
    score: float | None = None
    strict_match: float | None = None
    flexible_match: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0
    errors: int = 0
    dataset: str = ""
    dataset_sha256: str = ""
    model: str = ""
    reference: float | None = None
    tolerance: float | None = None
    minimum: float | None = None
    sets_reference: bool = False  # a relative check with no reference yet: judged against its own score
    question_ids: list[int] = field(default_factory=list, repr=False)
    failures: list[dict] = field(default_factory=list)  # each distinct failed question with the server's answer
    passed: bool | None = None  # None: judged against the bar as the result is made

    def __post_init__(self) -> None:
        if self.passed is not None:  # a document read back keeps its own verdict
            return
        if self.score is None or (self.minimum is not None and self.score < self.minimum):
            self.passed = False
        elif self.reference is not None and self.tolerance is not None:
            self.passed = self.score >= self.reference - self.tolerance
        else:
            self.passed = self.minimum is not None

    @property
    def verdict(self) -> str:
        bar = "passes" if self.passed else "fails"
        if self.reference is None:
            return f"{self.name} {self.score:.3f} {bar} the minimum {self.minimum}"
        source = " (this run's first healthy configuration)" if self.sets_reference else ""
        text = f"{self.name} {self.score:.3f} {bar} (reference {self.reference:.3f}{source} - tolerance "
        text += f"{self.tolerance}); "
        text += scoring.compare_to_reference(self.score, (self.ci_low, self.ci_high), self.n, self.reference)
        half_width = (self.ci_high - self.ci_low) / 2
        if self.tolerance is not None and half_width > self.tolerance:
            text += f"; the interval (+-{half_width:.3f}) is wider than the tolerance: more samples would resolve it"
        return text

    def to_dict(self) -> dict:
        """The fields a report shows (the per-question lists are repr=False), whether it passed and the verdict."""
        shown = {item.name: getattr(self, item.name) for item in fields(self) if item.repr}
        return {**shown, "verdict": self.verdict}


def quality_deadlines(max_tokens: int) -> Deadlines:
    """Each answer's deadline: never under QUALITY_DEADLINES, longer as the generation budget grows."""
    total = max(QUALITY_DEADLINES.total_s, QUALITY_ALLOWANCE_S + max_tokens / SLOWEST_HEALTHY_DECODE_TOK_S)
    return Deadlines(first_byte_s=total, total_s=total, max_bytes=QUALITY_DEADLINES.max_bytes)


def read_dataset(spec: QualityCheckSpec) -> tuple[Path, list[dict]]:
    """The check's dataset file and its rows, checked: fields present as text, enough rows to ask anything."""
    path = quality_data.resolve_dataset(spec.dataset)
    rows = quality_data.read_rows(path)
    gsm8k = spec.kind == "gsm8k"
    quality_data.check_fields(rows, ("question", "answer") if gsm8k else MC_FIELDS, path)
    quality_data.check_size(len(rows), spec.few_shot if gsm8k and not spec.few_shot_dataset else 0, path)
    return path, rows


def read_shot_rows(spec: QualityCheckSpec) -> list[dict] | None:
    """The separate few-shot file's rows (gsm8k with `few_shot_dataset`), checked; None without one; none at all for
    multiple choice (zero-shot: its questions are asked in order, as lm-eval's gpqa)."""
    if spec.kind != "gsm8k":
        return []
    if not spec.few_shot_dataset or not spec.few_shot:
        return None
    path = quality_data.resolve_dataset(spec.few_shot_dataset)
    rows = quality_data.read_rows(path)
    quality_data.check_fields(rows, ("question", "answer"), path)
    if len(rows) < spec.few_shot:
        raise CheckError(f"{path} has {len(rows)} rows, fewer than the check's {spec.few_shot} few-shot examples")
    return rows


def choose(count: int, samples: int, few_shot: int, shot_pool: int | None = None) -> tuple[list[int], list[list[int]]]:
    """(asked, the few-shot examples of each) row indices as lm-eval's sampler draws them (lm_eval/api/samplers.py
    ContextSampler.sample, one generator seeded once, called per question in order): the first `samples` questions,
    each with `few_shot` rows of a separate file of `shot_pool` rows, or, without one, of the questions themselves
    (one more drawn, the question itself removed)."""
    draw, asked = random.Random(LM_EVAL_SEED), list(range(min(samples, count)))
    if shot_pool is not None:
        return asked, [draw.sample(range(shot_pool), min(few_shot, shot_pool)) for _ in asked]
    drawn = [draw.sample(range(count), min(few_shot + 1, count)) for _ in asked]
    return asked, [
        [shot for shot in shots if shot != index][:few_shot] for index, shots in zip(asked, drawn, strict=True)
    ]


def gsm8k_prompt(rows: list[dict], shots: list[int], index: int) -> str:
    blocks = [f"Question: {rows[shot]['question']}\nAnswer: {rows[shot]['answer']}\n\n" for shot in shots]
    return "".join(blocks) + f"Question: {rows[index]['question']}\nAnswer:"


def request(spec: QualityCheckSpec, model_id: str, prompt: str) -> dict:
    """One question's POST /v1/completions body: lm-eval's local-completions payload, key for key."""
    stop = STOP if spec.kind == "gsm8k" else MC_STOP
    body = {"prompt": prompt, "model": model_id, "max_tokens": spec.max_tokens, "temperature": 0.0, "stop": stop}
    return {**body, "seed": LM_EVAL_SEED}


def choice_docs(rows: list[dict]) -> list[tuple[str, list[str], str]]:
    """(prompt, choices, correct letter) of every row in order, as lm-eval's gpqa process_docs and doc_to_text make
    them: each choice through its preprocess, one shuffle per row drawn in turn, the question as written."""
    draw, docs = random.Random(MC_SHUFFLE_SEED), []
    for row in rows:
        correct = _preprocess(row["Correct Answer"])
        choices = [_preprocess(row[f"Incorrect Answer {number}"]) for number in (1, 2, 3)] + [correct]
        draw.shuffle(choices)
        lines = "\n".join(f"({LETTERS[slot]}) {choice}" for slot, choice in enumerate(choices))
        prompt = MC_PROMPT.format(question=row["Question"], choices=lines)
        docs.append((prompt, choices, LETTERS[choices.index(correct)]))
    return docs


def _preprocess(text: str | None) -> str:
    """lm_eval/tasks/gpqa/cot_zeroshot/utils.py preprocess."""
    if text is None:
        return " "
    return text.strip().replace(" [title]", ". ").replace("  ", " ")


async def ask(session: aiohttp.ClientSession, url: str, body: dict, deadlines: Deadlines = QUALITY_DEADLINES) -> str:
    """The reply text; retried on connection errors and 5xx, raised as CheckError after the last attempt.

    A hang, a flood or a malformed answer is not retried: the same server would do it again.
    """
    problem = ""
    for attempt in range(ATTEMPTS):
        try:
            async with asyncio.timeout(deadlines.total_s), session.post(url, json=body) as response:
                raw = await read_capped(response, deadlines.max_bytes)
                status = response.status
        except TimeoutError:
            raise CheckError(f"POST {url}: no answer within {deadlines.total_s:g} s") from None
        except (aiohttp.ClientError, OSError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        else:
            if len(raw) > deadlines.max_bytes:
                raise CheckError(f"POST {url}: the answer is larger than {deadlines.max_bytes} bytes")
            if status == 200:
                return reply_text(raw)
            problem = Refused(url, status, request_failures.answer_text(raw))
            if status < 500:
                break
        if attempt + 1 < ATTEMPTS:
            await asyncio.sleep(0.5 * (attempt + 1))
    raise problem if isinstance(problem, Refused) else CheckError(f"POST {url} failed: {problem}")


def _evidence(exc: CheckError) -> tuple[str, int | None, str]:
    """(what failed, HTTP status, the server's answer) of a failed question, for request_failures.distinct."""
    if isinstance(exc, Refused):
        return f"HTTP {exc.status}", exc.status, exc.body
    return str(exc), None, ""


class Refused(CheckError):
    """The server answered a question with an error status; its answer is the evidence."""

    def __init__(self, url: str, status: int, body: str):
        super().__init__(f"POST {url} failed: HTTP {status}: {body[:200]}")
        self.status, self.body = status, body


def reply_text(raw: bytes) -> str:
    """The text of the first choice of an OpenAI-style answer; anything else is a CheckError saying what."""
    try:
        payload = json.loads(raw)
    except ValueError:
        raise CheckError(f"the answer is not JSON: {raw[:120].decode('utf-8', 'replace')!r}") from None
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise CheckError(f"the answer has no list of choices: {raw[:120].decode('utf-8', 'replace')!r}")
    text = choices[0].get("text")
    if text is not None and not isinstance(text, str):
        raise CheckError(f"the answer's text is a {type(text).__name__}, not a string")
    return text or ""


def run_quality(
    base_url: str,
    spec: QualityCheckSpec,
    model: str | None = None,
    deadlines: Deadlines | None = None,
    on_progress: OnProgress | None = None,
) -> QualityResult:
    """Ask the check's questions and score the replies (synchronous; runs its own event loop). Each answer's
    deadline is `deadlines`, by default quality_deadlines(spec.max_tokens); `on_progress` hears every tenth."""
    deadlines = deadlines or quality_deadlines(spec.max_tokens)
    return asyncio.run(_run_quality(base_url.rstrip("/"), spec, model, deadlines, on_progress))


async def _run_quality(base_url, spec: QualityCheckSpec, model, deadlines, on_progress) -> QualityResult:
    path, rows = read_dataset(spec)
    shot_rows = read_shot_rows(spec)
    few_shot = spec.few_shot if spec.kind == "gsm8k" else 0
    asked, shots = choose(len(rows), spec.samples, few_shot, None if shot_rows is None else len(shot_rows))
    if shot_rows is not None:  # the prompt reads shots by row index: the shot file's rows follow the questions
        shots = [[len(rows) + shot for shot in each] for each in shots]
        rows = rows + shot_rows
    data = (rows, choice_docs(rows) if spec.kind == "multiple_choice" else None)
    async with make_session(CONCURRENCY, deadlines=deadlines) as session:
        model_id = await resolve_model(session, base_url, model, deadlines)
        gate = asyncio.Semaphore(CONCURRENCY)
        failures: list[str] = []
        limit = max(MIN_FAILURES, int(MAX_FAILURE_SHARE * len(asked)))
        answered = Tally(len(asked), "questions", on_progress, lambda done, right: f"{right} of {done} right")

        async def one(index: int, its_shots: list[int]) -> tuple:
            async with gate:
                if len(failures) > limit:
                    return "not asked: the check stopped", False, False, True
                try:
                    outcome = await _ask_one(session, base_url, model_id, spec, data, its_shots, index, deadlines)
                except CheckError as exc:  # a failed request counts as wrong; its evidence is kept
                    failures.append(_evidence(exc))
                    outcome = str(exc), False, False, True
            answered.add(right=outcome[1] if spec.metric == "strict_match" else outcome[2])
            return outcome

        outcomes = await asyncio.gather(*(one(index, its_shots) for index, its_shots in zip(asked, shots, strict=True)))
    evidence = request_failures.distinct(failures)
    if len(failures) > limit:
        raise CheckError(
            f"the server failed {len(failures)} of {len(asked)} questions, so the check stopped:\n  "
            + "\n  ".join(request_failures.lines(evidence))
        )
    return _result(spec, path, model_id, asked, outcomes, evidence)


async def _ask_one(session, base_url, model_id, spec, data, shots, index, deadlines) -> tuple[str, bool, bool, bool]:
    """(reply, strict, flexible, failed) for one question of `data` (rows, choice_docs or None); a failed request
    raises CheckError."""
    rows, docs = data
    prompt = gsm8k_prompt(rows, shots, index) if docs is None else docs[index][0]
    reply = await ask(session, f"{base_url}/v1/completions", request(spec, model_id, prompt), deadlines)
    if docs is None:
        return (reply, *scoring.gsm8k_matches(reply, rows[index]["answer"]), False)
    right = scoring.extract_choice(reply, docs[index][1]) == f"({docs[index][2]})"
    return reply, right, right, False


def _result(spec: QualityCheckSpec, path: Path, model_id: str, asked: list, outcomes: list, failures) -> QualityResult:
    n = len(outcomes)
    strict = sum(outcome[1] for outcome in outcomes)
    flexible = sum(outcome[2] for outcome in outcomes)
    correct = [outcome[2] if spec.metric != "strict_match" else outcome[1] for outcome in outcomes]
    successes = sum(correct)
    ci_low, ci_high = scoring.wilson(successes, n)
    gsm8k = spec.kind == "gsm8k"
    score = successes / n if n else 0.0
    sets_reference = spec.reference == FIRST_HEALTHY  # the run has no reference yet (measuring anchors the spec)
    return QualityResult(
        name=spec.name,
        kind=spec.kind,
        metric=spec.metric,
        score=score,
        strict_match=strict / n if gsm8k and n else None,
        flexible_match=flexible / n if gsm8k and n else None,
        ci_low=ci_low,
        ci_high=ci_high,
        n=n,
        errors=sum(outcome[3] for outcome in outcomes),
        dataset=spec.dataset,
        dataset_sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        model=model_id,
        reference=score if sets_reference else spec.reference,
        tolerance=spec.tolerance,
        minimum=spec.minimum,
        sets_reference=sets_reference,
        question_ids=asked,
        failures=failures,
    )
