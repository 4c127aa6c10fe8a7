"""From a finished scan to the answer: the primary finding, the others, the signature and the excerpt.

Covers ranking the events (most specific class first, then the earliest: later errors are usually
consequences), ignoring weak lines logged before a healthy start, one finding per class with facts
merged over its events, the implicated file/function/kernel, the dedup signature and the header of the
excerpt. Does not read logs (scanner.py) or render lines (excerpt.py).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field

from porter.triage import facts as facts_module
from porter.triage import rules
from porter.triage.excerpt import build_excerpt, estimate_tokens
from porter.triage.lines import fold_key
from porter.triage.scanner import Event, Scanner
from porter.triage.toolchain import cuda_only_in_source

KEY_LINE_LIMIT = 1_000


@dataclass
class Finding:
    category: str
    key_line: str
    key_line_no: int
    implicated: str | None
    facts: dict = field(default_factory=dict)
    confidence: float = 0.3  # how far the key line alone decides the category (mechanisms.Rule.confidence)
    rule: str = ""  # the rule that read the key line (rules.RULES, status.py, or a generic error rule)


@dataclass
class Triage:
    category: str
    key_line: str
    key_line_no: int
    implicated: str | None
    signature: str
    excerpt: str
    excerpt_tokens: int
    findings: list[Finding] = field(default_factory=list)  # the primary first, then other classes seen
    facts: dict = field(default_factory=dict)  # the primary finding's facts
    line_count: int = 0
    confidence: float = 1.0  # of the primary finding; an `other` finding is unclassified and low

    def to_dict(self) -> dict:
        return asdict(self)


def _rank(event: Event) -> tuple:
    # A kernel-dispatch trace is a hint about where the process died: the last one counts.
    order = event.line_no if event.rule == rules.DISPATCH_TRACE.name else -event.line_no
    return (event.score, order)


def candidate_events(scanner: Scanner) -> list[Event]:
    """Events that can explain the log; weak lines before a healthy start are not failures, and neither is a
    start-up stall the server got past (vLLM's shm_broadcast wait while a rank compiles, a lock that was freed)."""
    ready = scanner.ready_line_no
    kept = []
    for event in scanner.events.values():
        weak = event.rule == rules.DISPATCH_TRACE.name or event.score < rules.WEAK_SCORE
        weak = weak or event.category == "startup_timeout"
        if ready is not None and event.line_no < ready and weak and event.category != "slow_fallback_perf":
            continue
        kept.append(event)
    return first_compiler_error_wins(sorted(kept, key=_rank, reverse=True))


def first_compiler_error_wins(events: list[Event]) -> list[Event]:
    """When the compiler's own diagnostics lead, the first `error:` is the key line (later errors are often its
    consequences) and the build is a missing ROCm guard when any diagnostic names CUDA-only code."""
    if not events or events[0].rule not in rules.COMPILER_RULES:
        return events
    diagnostics = sorted((event for event in events if event.rule in rules.COMPILER_RULES), key=lambda e: e.line_no)
    quoted = ("\n".join(line for _, line in event.after) for event in diagnostics)  # the source under each
    if any(event.category == "missing_rocm_guard" for event in diagnostics) or any(map(cuda_only_in_source, quoted)):
        for event in diagnostics:
            event.category = "missing_rocm_guard"
    rest = [event for event in events if event.rule not in rules.COMPILER_RULES]
    return diagnostics + rest


def implicated_of(event: Event, facts: dict) -> str | None:
    if event.implicated:
        return event.implicated
    if facts.get("origin"):  # the project file a toolchain error in a system header (or in none) came from
        return str(facts["origin"])
    if facts.get("file"):
        return f"{facts['file']}:{facts.get('line')}"
    for key in ("library", "config_path", "kernel", "source"):
        if facts.get(key):
            return str(facts[key])
    return None


def finding_for(category: str, events: list[Event], scanner: Scanner) -> tuple[Finding, Event]:
    best = events[0]
    merged: dict = {}
    for event in events:
        context = [line for _, line in event.before]
        if event.traceback is not None:
            context += [frame.source or "" for frame in event.traceback.frames[-4:]]
        found = facts_module.facts_for(category, event.text, context, scanner.module_names, scanner.arch)
        for key, value in found.items():
            if merged.get(key) in (None, [], {}, ""):
                merged[key] = value
    if category == "slow_fallback_perf":
        texts = [text for event in events for text in (event.text, *event.variants)]
        shapes = [facts_module.shape_fields(text) for text in texts]
        merged["shapes"] = [shape for index, shape in enumerate(shapes) if shape and shape not in shapes[:index]][:16]
    merged["occurrences"] = sum(event.count for event in events)
    if scanner.arch and not merged.get("arch"):
        merged["arch"] = scanner.arch
    key_line = best.body[:KEY_LINE_LIMIT]
    finding = Finding(category, key_line, best.line_no, implicated_of(best, merged), merged, best.confidence, best.rule)
    return finding, best


def signature_of(category: str, key_line: str, implicated: str | None) -> str:
    """Same failure, same signature: numbers, addresses, ranks and temp paths do not count."""
    stable = fold_key(key_line) + "|" + re.sub(r"\d+", "N", implicated or "")
    return f"{category}:{hashlib.sha1(stable.encode()).hexdigest()[:12]}"


def build_triage(scanner: Scanner, token_budget: int) -> Triage:
    kept = candidate_events(scanner)
    remarks = [event for event in kept if event.rule == rules.STATED_COMPARISON.name]  # shown, never a finding
    events = [event for event in kept if event.rule != rules.STATED_COMPARISON.name]
    by_category: dict[str, list[Event]] = {}
    for event in events:
        by_category.setdefault(event.category, []).append(event)
    findings: list[tuple[Finding, Event]] = []
    for category, category_events in by_category.items():
        if category != "other" or not findings:
            findings.append(finding_for(category, category_events, scanner))
    if not findings:
        header = [f"== triage: ok (no error in {scanner.line_count} lines) =="]
        excerpt = build_excerpt(header, None, remarks, scanner, token_budget)
        return Triage("ok", "", 0, None, "ok", excerpt, estimate_tokens(excerpt), [], {}, scanner.line_count)
    primary, key_event = findings[0]
    header = [f"== triage: {primary.category} at line {primary.key_line_no} of {scanner.line_count} =="]
    if primary.category == "other":
        header.append("unclassified: no rule names this failure; the key line is the strongest evidence found")
    else:
        header.append(f"confidence: {primary.confidence:.1f} ({key_event.rule})")
    if primary.implicated:
        header.append(f"implicated: {primary.implicated}")
    for finding, event in findings[1:]:
        header.append(
            f"also {finding.category} at line {finding.key_line_no} (x{event.count}): {finding.key_line[:160]}"
        )
    others = [event for event in events if event is not key_event][:40] + remarks[:8]
    excerpt = build_excerpt(header, key_event, others, scanner, token_budget)
    return Triage(
        category=primary.category,
        key_line=primary.key_line,
        key_line_no=primary.key_line_no,
        implicated=primary.implicated,
        signature=signature_of(primary.category, primary.key_line, primary.implicated),
        excerpt=excerpt,
        excerpt_tokens=estimate_tokens(excerpt),
        findings=[finding for finding, _ in findings],
        facts=primary.facts,
        line_count=scanner.line_count,
        confidence=primary.confidence,
    )
