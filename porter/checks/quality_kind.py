"""The quality check kind, declared once: accuracy on a GSM8K-style or multiple-choice set against its bar.

Its spec is quality.QualityCheckSpec (a list of named sets under `checks.quality`); one run asks the set's
questions and scores them with a 95% interval (quality.py); the headline is the score, the target passes
or fails (a gate, not a figure to improve: one sample decides). It reads as one line, and a line per
distinct failed question with the server's answer. A relative bar (reference first_healthy) is anchored at the
score of the run's first healthy accepted configuration (ledger/state.py keeps it).
"""

from __future__ import annotations

from porter.checks import request_failures
from porter.checks.kind import CheckKind, goal_text
from porter.checks.quality import QualityCheckSpec, QualityResult, run_quality
from porter.checks.render import number


def goal(spec: QualityCheckSpec) -> float | str:
    """The score to reach, as a number: the reference less its tolerance, or the minimum (the higher when both). A
    relative bar the run has not anchored yet (reference first_healthy) says what it will be."""
    if spec.relative:
        return f"the first healthy configuration's score - {spec.tolerance}"
    floors = [spec.minimum] if spec.minimum is not None else []
    if spec.reference is not None and spec.tolerance is not None:
        floors.append(round(spec.reference - spec.tolerance, 6))  # 0.96 - 0.03 is 0.9299999999999999 in binary
    return max(floors)


def render(key: str, result: dict) -> str:
    quality = QualityResult.from_dict(result)
    interval = f"95% CI {number(quality.ci_low, 3)}-{number(quality.ci_high, 3)}"
    failed = f"; {quality.errors} questions failed (counted wrong)" if quality.errors else ""
    verdict = "passed" if quality.passed else "FAILED"
    head = f"{key}: {number(quality.score, 3)} ({interval}, n={quality.n}{failed}): {verdict}"
    return "\n".join([head, *(f"  {line}" for line in request_failures.lines(quality.failures))])


def brief(result: dict) -> str:
    quality = QualityResult.from_dict(result)
    verdict = "passed" if quality.passed else "FAILED"
    return f"{quality.name} {number(quality.score, 3)} of {quality.n} questions, {verdict}"


def workload(spec: QualityCheckSpec) -> str:
    return f"quality {spec.name}: {spec.samples} questions ({spec.kind}, {spec.few_shot}-shot)"


def cost(spec: QualityCheckSpec, task) -> str:
    return f"run_check quality ({spec.name}): {spec.samples} questions; accept runs it when the change needs it"


def score_text(result: dict) -> str:
    """A quality score with its 95% interval: 0.975 (95% CI 0.943-0.989, n=200)."""
    quality = QualityResult.from_dict(result)
    if not isinstance(quality.score, int | float):
        return "-"
    bounded = isinstance(quality.ci_low, int | float) and isinstance(quality.ci_high, int | float)
    interval = f"95% CI {quality.ci_low:.3f}-{quality.ci_high:.3f}, " if bounded else ""
    return f"{quality.score:.3f} ({interval}n={quality.n})"


def accuracy(key: str, result: dict, spec: QualityCheckSpec) -> str:
    """A PR's accuracy line: the score with its interval, whether it passes its bar, and the reference."""
    quality = QualityResult.from_dict(result)
    verdict = "passes" if quality.passed else "FAILS"
    bar = goal_text(goal(spec))
    return f"{spec.name}: {score_text(result)}, {verdict} the bar {bar} (reference {quality.reference})"


KIND = CheckKind(
    name="quality",
    description="accuracy on a GSM8K-style or multiple-choice set, with a 95% interval, against its bar",
    spec=QualityCheckSpec,
    many=True,
    direction="higher",
    min_samples=1,
    run=lambda base_url, spec, task, progress=None: run_quality(base_url, spec, on_progress=progress).to_dict(),
    headline=lambda spec: "score",
    goal=goal,
    met=lambda result, spec: bool(QualityResult.from_dict(result).passed),
    label=lambda spec: f"quality {spec.name}",
    render=render,
    brief=brief,
    workload=workload,
    cost=cost,
    relative=lambda spec: spec.relative,
    anchored=lambda spec, reference: spec.model_copy(update={"reference": reference}),
    accuracy=accuracy,
)
