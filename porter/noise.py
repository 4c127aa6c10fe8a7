"""Is a measured gain real? Medians of repeated samples against a bar derived from their measured spread.

Covers one comparison of a headline figure between the accepted and the pending configuration: both
medians, the relative change, the pooled relative standard deviation of the samples, and the bar a
gain must clear: the larger of the task's minimum and a one-sided 95% Student-t bound on the
difference of the means (so with two samples a side and no real change, fewer than one decision in
twenty is a keep, whatever the noise). Does not fetch samples (state.py) or act on the answer
(accepting.py).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

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

    @property
    def better(self) -> bool:
        return self.change > self.threshold

    @property
    def worse(self) -> bool:
        return self.change < -self.threshold

    def describe(self) -> str:
        verdict = "above" if self.better else ("below -" if self.worse else "within +/-")
        return (
            f"{self.key} {self.metric}: median {self.accepted_median:.4g} (n={len(self.accepted)}) on the accepted "
            f"configuration -> {self.pending_median:.4g} (n={len(self.pending)}) pending, {self.change:+.1%}, "
            f"{verdict} the {self.threshold:.1%} bar (measured spread {self.spread:.1%}; minimum {self.minimum:.0%})"
        )

    def to_dict(self) -> dict:
        return {**asdict(self), "better": self.better, "worse": self.worse}


def pooled_relative_sd(accepted: list[float], pending: list[float]) -> float:
    """Sample standard deviation pooled over both sides, relative to the accepted median."""
    center = statistics.median(accepted)
    squares = sum((v - statistics.fmean(side)) ** 2 for side in (accepted, pending) for v in side)
    df = len(accepted) + len(pending) - 2
    if df <= 0 or center == 0:
        return 0.0
    return math.sqrt(squares / df) / abs(center)


def compare(key: str, metric: str, accepted: list[float], pending: list[float], minimum: float) -> Comparison:
    """Medians and the noise bar; both sides need at least one sample (two for a measured spread)."""
    spread = pooled_relative_sd(accepted, pending)
    df = len(accepted) + len(pending) - 2
    bound = t95(df) * spread * math.sqrt(1 / len(accepted) + 1 / len(pending)) if df > 0 else 0.0
    before, after = statistics.median(accepted), statistics.median(pending)
    change = after / before - 1 if before else math.inf
    return Comparison(key, metric, accepted, pending, before, after, change, spread, max(minimum, bound), minimum)
