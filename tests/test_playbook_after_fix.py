"""The playbook after a kept fix: a model whose first launch crashed has never had its checks measured, so the
configuration the fix made serve is measured before any candidate (without it every later accept failed: the
accepted configuration had no figures to compare with, seen on the second family's day 0). A fix kept on a run
already measured goes straight on to the next candidate, as before. And after a crash fix: it is checked on the
engine's reduced start-up before a full one. Pure: conversations as the loop keeps them."""

from __future__ import annotations

from pathlib import Path

from porter.ledger.state import target_report
from porter.models.base import Message, ToolCall
from porter.models.playbook import Playbook
from porter.models.playbook_history import Event, parse_history
from porter.task import load_task

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "tests" / "data" / "twin_corvid3.yaml"


def conversation(accepted_checks: list[str], kept: bool, met: tuple[str, ...] = ()) -> list[Message]:
    """serve (crash), edit, serve (healthy), accept: the tool results with the facts and status the loop gives; the
    status's target rows are the task's own (target_report), those named in `met` met."""
    targets = [dict(row.to_dict(), met=row.key in met) for row in target_report(load_task(TASK), None)]
    status = {"server": "healthy", "phase": "optimisation", "accepted_checks": accepted_checks, "targets": targets}
    steps = [
        ("serve", {}, {"ok": True, "healthy": False, "crash_class": "missing_rocm_guard"}),
        ("edit_file", {"path": "/x.cpp", "old": "a", "new": "b"}, {"ok": True}),
        ("serve", {}, {"ok": True, "healthy": True}),
        ("accept", {"summary": "Guard"}, {"ok": True, "kept": kept, "status": status}),
    ]
    messages = [Message("user", "task")]
    for index, (name, arguments, facts) in enumerate(steps):
        call = ToolCall(f"c{index}", name, arguments)
        messages += [
            Message("assistant", "", [call]),
            Message("tool", name, tool_call_id=call.id, name=name, facts=facts),
        ]
    return messages


def decide(messages: list[Message]):
    task = load_task(TASK)
    return Playbook(task, parse_history(messages)).decide()


def test_a_kept_fix_on_a_run_never_measured_is_measured_first() -> None:
    action = decide(conversation(["quality:gsm8k", "quality:gpqa"], kept=True))
    assert (action.tool, action.arguments) == ("run_check", {"kind": "single_stream"})


def test_a_kept_fix_on_a_measured_run_goes_on_to_the_next_candidate() -> None:
    """Quality met, both speed targets short: the first move of the search is the deepest draft the task's
    tunables allow (single stream's candidates come first: a single-stream check is cheap; the deepest first, so
    one bring-up meets every crash a draft uncovers and a shallower one is a flags-only step back)."""
    measured = ["quality:gsm8k", "quality:gpqa", "single_stream", "throughput"]
    action = decide(conversation(measured, kept=True, met=("quality:gsm8k", "quality:gpqa")))
    draft = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 3, "speculative-eagle-topk": 1}
    assert (action.tool, action.arguments, action.tag) == (
        "set_flags",
        {"flags": {**draft, "speculative-num-draft-tokens": 4}},
        ("search", "single_stream"),
    )


def test_a_kept_fix_with_every_target_met_finishes() -> None:
    measured = ["quality:gsm8k", "quality:gpqa", "single_stream", "throughput"]
    action = decide(conversation(measured, kept=True, met=tuple(measured)))
    assert (action.tool, action.arguments) == ("finish", {"reason": "every target is met"})


def test_a_fix_kept_alone_while_its_flags_are_reverted_has_its_configuration_measured_first() -> None:
    """A deeper draft crashed, a guard fixed it and was kept as its own commit, the draft itself brought no gain:
    the accepted configuration is a new one with no figures, so it is served and measured before the next move
    (the next move was judged against nothing, refused, reverted, and its launch lost)."""
    messages = conversation([], kept=False)
    messages[-1].facts["status"] = {**messages[-1].facts["status"], "server": "stopped", "targets": TARGETS}
    assert decide(messages).tool == "serve"
    messages[-1].facts["status"]["accepted_checks"] = ["quality:gsm8k", "quality:gpqa", "single_stream", "throughput"]
    assert decide(messages).tool == "set_flags"


TARGETS = [{"key": key, "target": key, "met": False} for key in ("single_stream", "throughput")]


def test_a_call_interrupted_by_a_kill_is_served_again_after_resume() -> None:
    """A run killed during a check and resumed (`porter resume`): the check's result says it was interrupted, the
    server is down; the playbook starts it again instead of ending the run on a failed check (it did)."""
    messages = conversation(["quality:gsm8k"], kept=True)[:-2]  # serve (crash), edit, serve (healthy)
    call = ToolCall("c9", "run_check", {"kind": "single_stream"})
    interrupted = {"ok": False, "interrupted": True}
    messages += [Message("assistant", "", [call]), Message("tool", "interrupted", tool_call_id="c9", name="run_check",
                                                          facts=interrupted)]  # fmt: skip
    action = decide(messages)
    assert action.tool == "serve"


GUARD_CRASH = {"category": "missing_rocm_guard", "facts": {"header": "cuda_runtime.h", "file": "twin/csrc/meta.cpp"}}


def launch(crash: str | None, reduced: bool = False) -> Event:
    """A start-up's tool result as serve gives it (a reduced one also says its outcome), with a change pending."""
    facts = {"healthy": crash is None, "crash_class": crash, "signature": crash}
    facts["status"] = {"pending": True}
    if crash == "missing_rocm_guard":
        facts["findings"] = [GUARD_CRASH]
    if reduced:
        facts.update(reduced=True, outcome=crash or "healthy")
    return Event("serve", {"reduced": True} if reduced else {}, None, ok=True, facts=facts)


FIXED = Event("edit_file", {"path": "/x/config.json", "old": "a", "new": "b"}, ("exclude", "done"), ok=True)
GUARDED = Event("edit_file", {"path": "/x/meta.cpp", "old": "a", "new": "b"}, ("guard", "done"), ok=True)


def next_action(*history: Event):
    return Playbook(load_task(ROOT / "tasks" / "twin_glm52.yaml"), list(history)).decide()


def test_a_crash_fix_pays_for_a_full_start_up_only_once_it_passes_reduced() -> None:
    """The README job's bring-up: the exclude fix is checked reduced, which meets the kernel crash the shape mismatch
    hid (a checkpoint crash does not reproduce reduced, the kernel build does); the guard is written from the
    reduced crash's finding and checked reduced; only then a full start-up (one, where there were two)."""
    crashed = launch("shape_mismatch")
    assert (next_action(crashed, FIXED).tool, next_action(crashed, FIXED).arguments) == ("serve", {"reduced": True})
    kernel = launch("missing_rocm_guard", reduced=True)
    guard = next_action(crashed, FIXED, kernel)
    assert (guard.tool, guard.arguments, guard.tag) == ("read_file", {"path": "/sgl-workspace/twin/twin/csrc/meta.cpp"},
                                                        ("guard", "read"))  # fmt: skip
    assert next_action(crashed, FIXED, kernel, GUARDED).arguments == {"reduced": True}
    passed = next_action(crashed, FIXED, kernel, GUARDED, launch(None, reduced=True))
    assert (passed.tool, passed.arguments) == ("serve", {})  # a keep reads a full start-up


def test_a_fix_that_fails_reduced_is_reverted_and_a_crash_no_rule_covers_goes_to_a_full_start_up() -> None:
    """The same crash again right after its fix, on the reduced start-up: the fix did not work, so it is reverted
    without a full start-up. A reduced crash no rule covers (the reduced mode's own, or one it cannot judge) is not
    held against the fix: the full start-up judges it. A flag change is served full (an out-of-memory crash or a
    backend choice needs the real weights and layers)."""
    kernel = launch("missing_rocm_guard")
    assert next_action(kernel, GUARDED, launch("missing_rocm_guard", reduced=True)).tool == "revert"
    other = next_action(launch("shape_mismatch"), FIXED, launch("other", reduced=True))
    assert (other.tool, other.arguments) == ("serve", {})
    lowered = Event("set_flags", {"flags": {"mem-fraction-static": 0.8}}, ("flag", "done"), ok=True)
    assert next_action(launch("out_of_memory"), lowered).arguments == {}
