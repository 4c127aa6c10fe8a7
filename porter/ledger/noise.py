"""Is a measured gain real? Medians of repeated samples against a bar derived from their measured spread.

Covers one comparison of a headline figure between the accepted and the pending configuration: both
medians, the relative change, the pooled relative standard deviation of the samples, and the bar a
gain must clear: the larger of the task's minimum and a one-sided 95% Student-t bound on the
difference of the means (so with two samples a side and no real change, fewer than one decision in
twenty is a keep, whatever the noise) -- plus, for a figure read at a sweep's knee, 1.5 times the
sweep's resolution there.

Why the resolution term: a knee is quantised. The sweep brackets it between the last passing and the
first failing rate (after bisection), and the level next to the true knee passes or fails by chance, so
two samples of one configuration can read one bracket apart. When the samples of each side agree, the
measured spread is zero and the t bound vanishes, and a one-step difference between the sides (about
one bracket width in the headline, e.g. 0.125 RPS at a 4 RPS knee: 3.1%) cleared the 3% minimum; when
they do not agree, the figure's own noise at a fixed rate comes on top of that step. The two errors
have separate causes, so their bounds add: the t bound for the measured spread, plus 1.5 brackets for
the quantisation, taken from the levels each sample actually ran (the widest bracket, relative to its
knee, among the compared samples). With no spread one step never clears it and two steps do, the half
step between absorbing the headline's own noise at a fixed rate. A figure with no bracket (single
stream, or a sweep whose every level passed) has no resolution term. Does not fetch samples
(ledger/evidence.py) or act on the answer (ledger/decision.py decides, loop/accepting.py applies).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

RESOLUTION_STEPS = 1.5  # the quantisation term of the bar, in knee brackets: above one step, below two

# One-sided 95% quantiles of Student's t by degrees of freedom (beyond the table: the normal's 1.645).
T95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860, 9: 1.833, 10: 1.812}
T95_LARGE = [(15, 1.753), (20, 1.725), (30, 1.697), (60, 1.671)]


def t95(df: int) -> float:
    if df in T95:
        return T95[df]
    for limit, value in T95_LARGE:
        if df <= limit:
            return value
    return 1.645


@dataclass
class Comparison:
    key: str
    metric: str
    accepted: list[float]
    pending: list[float]
    accepted_median: float
    pending_median: float
    change: float  # relative change of the medians, pending over accepted
    spread: float  # pooled relative standard deviation of one sample
    threshold: float  # the bar a gain had to clear
    minimum: float  # the task's minimum, the bar's floor
    resolution: float = 0.0  # the widest knee bracket among the samples, relative to its knee (0: not a knee)

    @property
    def better(self) -> bool:
        return self.change > self.threshold

    @property
    def worse(self) -> bool:
        return self.change < -self.threshold

    def describe(self) -> str:
        digits = 1  # as many as it takes for a change at the bar not to print as the bar itself
        while digits < 3 and f"{abs(self.change):.{digits}%}" == f"{self.threshold:.{digits}%}":
            digits += 1
        bar = f"{self.threshold:.{digits}%}"
        verdict = (
            f"a gain beyond the {bar} bar"
            if self.better
            else (f"a loss beyond the {bar} bar" if self.worse else f"within the +/-{bar} bar")
        )
        return (
            f"{self.key} {self.metric}: median {self.accepted_median:.4g} (n={len(self.accepted)}) on the accepted "
            f"configuration -> {self.pending_median:.4g} (n={len(self.pending)}) pending, {self.change:+.{digits}%}, "
            f"{verdict} (measured spread {self.spread:.1%}; minimum {self.minimum:.0%}"
            + (f"; plus {RESOLUTION_STEPS:g} x the knee resolution {self.resolution:.1%}" if self.resolution else "")
            + ")"
        )

    def to_dict(self) -> dict:
        """Its fields, and `better` and `worse` for a reader of state.json (derived: reading it back leaves them)."""
        return {**asdict(self), "better": self.better, "worse": self.worse}


def pooled_relative_sd(accepted: list[float], pending: list[float]) -> float:
    """Sample standard deviation pooled over both sides, relative to the accepted median."""
    center = statistics.median(accepted)
    squares = sum((v - statistics.fmean(side)) ** 2 for side in (accepted, pending) for v in side)
    df = len(accepted) + len(pending) - 2
    if df <= 0 or center == 0:
        return 0.0
    return math.sqrt(squares / df) / abs(center)


def knee_resolution(results: list[dict]) -> float:
    """The widest knee bracket among sweep results, relative to its knee: (first failing rate above the
    knee - knee) / knee, from the levels each sweep ran. 0 when no result has a bracket (not a sweep, no
    knee, or every level passed)."""
    widest = 0.0
    for result in results:
        knee = result.get("knee_rps")
        if not knee:
            continue
        above = [level["rps"] for level in result.get("levels") or () if not level["passed"] and level["rps"] > knee]
        if above:
            widest = max(widest, (min(above) - knee) / knee)
    return widest


def compare(
    key: str, metric: str, accepted: list[float], pending: list[float], minimum: float, resolution: float = 0.0
) -> Comparison:
    """Medians and the noise bar; both sides need at least one sample (two for a measured spread).

    `resolution` is the knee_resolution of the compared sweeps (0 for a figure that is not read at a knee).
    """
    spread = pooled_relative_sd(accepted, pending)
    df = len(accepted) + len(pending) - 2
    bound = t95(df) * spread * math.sqrt(1 / len(accepted) + 1 / len(pending)) if df > 0 else 0.0
    before, after = statistics.median(accepted), statistics.median(pending)
    # from nothing (no knee: a sweep whose lowest level failed) any figure is a gain, and nothing to nothing is none
    change = after / before - 1 if before else (math.inf if after > 0 else 0.0)
    bar = max(minimum, bound + RESOLUTION_STEPS * resolution)
    return Comparison(key, metric, accepted, pending, before, after, change, spread, bar, minimum, resolution)
