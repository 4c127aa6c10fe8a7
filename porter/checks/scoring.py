"""Scoring of quality checks: answer extraction as lm-eval does it, confidence intervals and verdicts.

Covers GSM8K strict match (`#### N`, first match) and flexible extraction (last number-like token)
with lm-eval's normalisation (commas, `$`, everything up to `#### `, a trailing `.`, case), the
multiple-choice pick of lm-eval's gpqa flexible-extract (`(X)`, a quoted choice, `: X`), the Wilson 95%
interval of a share, and the verdict that says whether a score's difference from its reference is real at the
sample size. Does not talk to servers or read datasets (quality.py).
"""

from __future__ import annotations

import functools
import math
import re
import sys
import unicodedata

Z_95 = 1.959963984540054
INVALID = "[invalid]"

STRICT_PATTERN = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE_PATTERN = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
# lm-eval 0.4.13 gpqa cot_zeroshot's flexible-extract (filters/extraction.py MultiChoiceRegexFilter, group_select -1,
# ignore_case, ignore_punctuation: Unicode category P)
CHOICE_PATTERN = re.compile(r"(\([A-Z]\))")
IGNORED = [re.compile(pattern) for pattern in (r",", r"\$", r"(?s).*#### ", r"\.$")]


def normalize(text: str) -> str:
    """lm-eval's exact_match preparation for gsm8k: drop the ignored patterns, lower-case, strip."""
    for pattern in IGNORED:
        text = pattern.sub("", text)
    return text.lower().strip()


def _regex_filter(pattern: re.Pattern, text: str, select: int) -> str:
    """lm-eval's RegexFilter: findall, pick by index, first non-empty group of a tuple, else [invalid]."""
    matches = pattern.findall(text)
    if not matches:
        return INVALID
    match = matches[select]
    if isinstance(match, tuple):
        groups = [group for group in match if group]
        if not groups:
            return INVALID
        match = groups[0]
    return match.strip()


def extract_strict(text: str) -> str:
    return _regex_filter(STRICT_PATTERN, text, 0)


def extract_flexible(text: str) -> str:
    return _regex_filter(FLEXIBLE_PATTERN, text, -1)


def gsm8k_matches(reply: str, answer: str) -> tuple[bool, bool]:
    """(strict, flexible) exact match of a reply against a GSM8K answer (its reference number: `... #### 1,234`)."""
    gold = normalize(answer)
    return normalize(extract_strict(reply)) == gold, normalize(extract_flexible(reply)) == gold


def extract_choice(reply: str, choices: list[str]) -> str:
    """lm-eval's pick of a multiple-choice answer: the last `(X)` in the reply; else the last choice it quotes (case
    and punctuation aside), as that choice's `(X)`; else the last `: X`; else [invalid]."""
    letters = [chr(ord("A") + slot) for slot in range(len(choices))]
    quoted = {_plain(choice.strip()): f"({letter})" for choice, letter in zip(choices, letters, strict=True)}
    texts = re.compile("|".join(sorted((re.escape(text) for text in quoted), key=len, reverse=True)))
    bare = re.compile(rf":[\s]*({'|'.join(letters)})")
    for pattern, text, named in ((CHOICE_PATTERN, reply, {}), (texts, _plain(reply), quoted), (bare, reply, None)):
        found = pattern.findall(text)
        match = found[-1].strip() if found else ""
        if match:
            return f"({match})" if named is None else named.get(match, match)
    return INVALID


def _plain(text: str) -> str:
    return text.lower().translate(_punctuation())


@functools.cache
def _punctuation() -> dict[int, None]:
    """Every character of Unicode category P (a second to build: on first use, not at import)."""
    return dict.fromkeys(code for code in range(sys.maxunicode) if unicodedata.category(chr(code)).startswith("P"))


def wilson(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of successes/n; (0, 1) when there is no sample."""
    if n == 0:
        return 0.0, 1.0
    share = successes / n
    denominator = 1 + z * z / n
    center = (share + z * z / (2 * n)) / denominator
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, center - half), min(1.0, center + half)


def compare_to_reference(score: float, ci: tuple[float, float], n: int, reference: float) -> str:
    """A measured share against a fixed reference, in words: a real difference when the reference is outside the
    Wilson interval, else within sampling noise."""
    low, high = ci
    difference = score - reference
    if high < reference:
        return f"a real drop of {-difference:.3f} below the reference {reference:.3f} at n={n}"
    if low > reference:
        return f"a real gain of {difference:.3f} above the reference {reference:.3f} at n={n}"
    return (
        f"{difference:+.3f} vs the reference {reference:.3f} is within sampling noise at n={n} "
        f"(95% CI {low:.3f}-{high:.3f})"
    )
