"""The accept rules on real git trees in a local sandbox, fed evidence as the checks would record it.

Each case sets the evidence of the accepted and the pending configuration (what serve and run_check store)
and checks what porter keeps: improvements beyond noise with quality held, removed crash classes, and
reverts with the reason in every other case."""

from __future__ import annotations

import git
import pytest

from porter import accepting
from porter.redaction import redact
from porter.repos import TrackedRepo
from porter.run_context import RunContext, ToolError
from porter.sandbox import make_sandbox
from porter.state import Evidence, RunState
from porter.task import Task
from porter.transcript import Transcript


@pytest.fixture
def ctx(tmp_path):
    source = tmp_path / "engine"
    source.mkdir()
    (source / "config.json").write_text('{"exclude": []}\n')
    repo = git.Repo.init(source)
    repo.index.add(["config.json"])
    repo.index.commit("upstream")
    task = Task.model_validate(
        {
            "name": "accept-rules",
            "model": {"id": "m", "path": "/m", "in_image": True, "overlay": False},
            "hardware": {"gpu": "MI355X", "count": 8},
            "sandbox": {"kind": "local"},
            "repos": [{"name": "engine", "path": str(source)}],
            "serve": {"command": "true {flags}", "flags": {"tp": 8}, "tunables": {"tp": [8, 4]}},
            "checks": {
                "quality": [{"name": "gsm8k", "kind": "gsm8k", "dataset": "builtin:twin-gsm8k", "minimum": 0.9}],
                "throughput": {
                    "workload": {"input_tokens": 10, "output_tokens": 5, "num_prompts": 1},
                    "rps": [1],
                    "slo": {"ttft_s": 1},
                    "target_total_tok_s_per_node": 1000,
                },
            },
        }
    )
    run_dir = tmp_path / "run"
    sandbox = make_sandbox(task, run_dir, "r1")
    sandbox.start()
    tracked = TrackedRepo("engine", sandbox.repo_dir("engine"), "r1")
    state = RunState("r1", "task.yaml", {"tp": 8}, {"tp": 8}, repos={"engine": tracked.begin()})
    context = RunContext(
        task, sandbox, state, run_dir, Transcript(run_dir / "transcript.jsonl", redact), {"engine": tracked}
    )
    yield context
    context.transcript.close()


def evidence(ctx: RunContext, healthy=True, crash=None, throughput=None, quality=0.95) -> Evidence:
    fingerprint = ctx.fingerprint()
    serve = {
        "healthy": healthy,
        "crash_class": crash,
        "fingerprint": fingerprint,
        "log": "logs/serve-001.log",
        "key_line": "boom",
    }
    checks = {"quality:gsm8k": {"score": quality, "passed": quality >= 0.9, "fingerprint": fingerprint}}
    if throughput is not None:
        checks["throughput"] = {"total_tok_s_per_node": throughput, "fingerprint": fingerprint}
    return Evidence(serve=serve, checks=checks)


def change_config(ctx: RunContext) -> None:
    (ctx.repos["engine"].path / "config.json").write_text('{"exclude": ["model.decoder.*"]}\n')


def test_an_improvement_beyond_noise_with_quality_held_is_committed(ctx):
    ctx.state.accepted = evidence(ctx, throughput=100.0)
    change_config(ctx)
    ctx.state.pending = evidence(ctx, throughput=120.0)
    outcome = accepting.accept(ctx, "Exclude the decoder", "the engine renamed it")
    assert outcome["kept"] and "100.0 -> 120.0 (+20.0%)" in outcome["evidence"]
    head = ctx.repos["engine"].repo.head.commit
    assert head.summary == "Exclude the decoder" and "Evidence:" in head.message
    assert ctx.state.accepted.checks["throughput"]["total_tok_s_per_node"] == 120.0


@pytest.mark.parametrize("after", [101.0, 90.0])
def test_noise_or_a_regression_is_reverted(ctx, after):
    ctx.state.accepted = evidence(ctx, throughput=100.0)
    change_config(ctx)
    ctx.state.pending = evidence(ctx, throughput=after)
    outcome = accepting.accept(ctx, "Exclude the decoder", "")
    assert not outcome["kept"] and "no improvement beyond the 3% noise margin" in outcome["reason"]
    assert not ctx.repos["engine"].is_dirty() and ctx.state.repos["engine"].accepted == []


def test_a_faster_change_that_breaks_quality_is_reverted(ctx):
    ctx.state.accepted = evidence(ctx, throughput=100.0)
    ctx.state.flags["tp"] = 4
    ctx.state.pending = evidence(ctx, throughput=150.0, quality=0.5)
    outcome = accepting.accept(ctx, "Serve TP4", "")
    assert not outcome["kept"] and "quality below the bar: quality:gsm8k" in outcome["reason"]
    assert ctx.state.flags == {"tp": 8}


def test_a_fix_that_only_moves_the_crash_keeps_the_source_but_not_the_flags(ctx):
    ctx.state.accepted = evidence(ctx, throughput=100.0)
    ctx.state.flags["tp"] = 4
    ctx.state.pending = Evidence(first_crash="shape_mismatch")
    change_config(ctx)
    pending = evidence(ctx, healthy=False, crash="missing_rocm_guard")
    ctx.state.pending.serve = pending.serve
    outcome = accepting.accept(ctx, "Exclude the decoder", "")
    assert outcome["kept"] and "shape_mismatch is gone" in outcome["evidence"]
    assert len(ctx.state.repos["engine"].accepted) == 1
    assert ctx.state.accepted_flags == {"tp": 8} and ctx.state.flags == {"tp": 4}


def test_the_same_crash_again_is_reverted_and_unserved_changes_are_refused(ctx):
    ctx.state.accepted = evidence(ctx, healthy=False, crash="shape_mismatch")
    change_config(ctx)
    with pytest.raises(ToolError, match="has not been served as it is now"):
        accepting.accept(ctx, "Exclude the decoder", "")
    ctx.state.pending = evidence(ctx, healthy=False, crash="shape_mismatch")
    outcome = accepting.accept(ctx, "Exclude the decoder", "")
    assert not outcome["kept"] and "still fails with shape_mismatch" in outcome["reason"]
