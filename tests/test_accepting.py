"""The accept rules on real git trees in a local sandbox, fed samples as the checks would record them.

Each case sets the evidence of the accepted and the pending configuration (what serve and run_check store:
start-up records and samples tagged with the configuration's fingerprint) and checks what porter keeps:
improvements beyond the measured noise with quality held, judged on same-configuration medians; crashes
left behind only when start-up gets further; nothing kept while the sandbox has changes outside the repos.
The crash cases serve a real engine script (local sandbox, real HTTP health check, real triage)."""

from __future__ import annotations

import os
import sys
import textwrap
import time

import git
import pytest
from helpers import free_port, sweep

from porter.checks import registry
from porter.errors import ToolError
from porter.ledger import evidence
from porter.ledger.records import Sample, Side, StartUp
from porter.ledger.state import RunState, target_report
from porter.ledger.transcript import Transcript
from porter.loop import accepting, observations
from porter.loop.run_context import RunContext
from porter.loop.tools import run_status
from porter.redaction import redact
from porter.sandbox import make_sandbox
from porter.sandbox.trees.tracked import TrackedRepo
from porter.task import Task

# An engine that logs its start-up stages, then fails the way the story's engine does until fixed.
ENGINE = textwrap.dedent(
    """\
    import http.server, json, os, sys
    port = int(sys.argv[sys.argv.index("--port") + 1])
    print("Init torch distributed ends. elapsed=0.10 s, mem usage=0.89 GB", flush=True)
    config = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "config.json")))
    print("Building the model graph", flush=True)
    print("Loading checkpoint shards", flush=True)
    if "model.decoder.*" not in config["exclude"]:
        raise ValueError("shape mismatch: model.decoder.shared_experts.w [6144, 2048] vs checkpoint [6144, 1024]")
    print("Load weight end. elapsed=1.00 s, type=GlmForCausalLM", flush=True)
    here = os.path.dirname(os.path.abspath(__file__))
    if "--tp" in sys.argv and sys.argv[sys.argv.index("--tp") + 1] == "4":
        print("Compiling the fused metadata kernel", flush=True)
        if not os.path.exists(os.path.join(here, "guard.h")):
            raise RuntimeError("metadata.cpp:3:10: fatal error: cuda_runtime.h: No such file or directory")
    print("KV Cache is allocated. #tokens: 100000, KV size: 20.00 GB", flush=True)
    if "--big-kv" in sys.argv:
        raise RuntimeError("HIP out of memory. Tried to allocate 20.00 GiB")
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": [{"id": "m"}]}).encode() if self.path == "/v1/models" else b"ok"
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass
    print("The server is fired up and ready to roll!", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
    """
)


@pytest.fixture
def ctx(tmp_path):
    source = tmp_path / "engine"
    source.mkdir()
    (source / "config.json").write_text('{"exclude": []}\n')
    (source / "server.py").write_text(ENGINE)
    repo = git.Repo.init(source)
    repo.index.add(["config.json", "server.py"])
    repo.index.commit("upstream")
    command = f"{sys.executable} $PORTER_SANDBOX_ROOT{source}/server.py --port {{port}} {{flags}}"
    task = Task.model_validate(
        {
            "name": "accept-rules",
            "model": {"id": "m", "path": "/m", "in_image": True, "overlay": False},
            "hardware": {"gpu": "MI355X", "count": 8},
            "sandbox": {"kind": "local"},
            "repos": [{"name": "engine", "path": str(source)}],
            "serve": {
                "command": command,
                "port": free_port(),
                "startup_timeout_s": 30,
                "flags": {"tp": 8, "big-kv": None},
                "tunables": {"tp": [8, 4], "big-kv": [None, True]},
            },
            "checks": {
                "quality": [{"name": "gsm8k", "kind": "gsm8k", "dataset": "builtin:twin-gsm8k", "minimum": 0.9}],
                "throughput": {
                    "workload": {"input_tokens": 10, "output_tokens": 5, "num_prompts": 1},
                    "rps": [1],
                    "slo": {"ttft_s": 1},
                    "metric": "output_throughput",
                    "target_tok_s_per_node": 1000,
                },
                "single_stream": {"input_tokens": 10, "output_tokens": 5, "target_output_tok_s": 100},
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
    context.mark_accepted()  # as porter's run set-up does
    yield context
    context.stop_server()
    sandbox.stop()
    context.transcript.close()


def served(ctx: RunContext, healthy=True, crash=None, signature=None, stage=None) -> StartUp:
    return StartUp(
        healthy=healthy,
        seconds=1.0,
        log="logs/serve-001.log",
        fingerprint=ctx.fingerprint(),
        crash_class=crash,
        signature=signature or crash,
        key_line="boom",
        stage=stage,
    )


def measured(ctx: RunContext, key: str, values: list[float], accepted: bool = False) -> None:
    """Samples of one check on the current (or the accepted) configuration, as porter's measuring records them."""
    config = ctx.mark_accepted() if accepted else ctx.fingerprint()
    item = registry.by_key(ctx.task, key)
    for value in values:
        result = {item.kind.headline(item.spec): value, "passed": value >= 0.9, "fingerprint": config}
        ctx.state.samples.append(Sample(key, config, evidence.harness(item), ctx.state.step, value, result))


def baseline(ctx: RunContext, throughput=(100.0, 101.0), single=None) -> None:
    ctx.state.accepted = Side(serve=served(ctx))
    measured(ctx, "throughput", list(throughput), accepted=True)
    measured(ctx, "quality:gsm8k", [0.95], accepted=True)
    if single:
        measured(ctx, "single_stream", list(single), accepted=True)


def pending(ctx: RunContext, throughput=None, single=None, quality=0.95) -> None:
    ctx.state.pending = Side(serve=served(ctx))
    measured(ctx, "quality:gsm8k", [quality])
    if throughput:
        measured(ctx, "throughput", list(throughput))
    if single:
        measured(ctx, "single_stream", list(single))


def change_config(ctx: RunContext, exclude='["model.decoder.*"]') -> None:
    (ctx.repos["engine"].path / "config.json").write_text(f'{{"exclude": {exclude}}}\n')


def test_an_improvement_beyond_noise_with_quality_held_is_committed(ctx):
    baseline(ctx)
    change_config(ctx)
    pending(ctx, throughput=[120.0, 121.0])
    outcome = accepting.accept(ctx, "Exclude the decoder", "the engine renamed it")
    assert outcome["kept"], outcome
    assert "median 100.5 (n=2) on the accepted configuration -> 120.5 (n=2) pending, +19.9%" in outcome["evidence"]
    [comparison] = outcome["comparisons"]
    assert comparison["accepted"] == [100.0, 101.0] and comparison["pending"] == [120.0, 121.0]
    assert comparison["threshold"] >= 0.03
    assert "Quality on this configuration, measured before keeping it: quality:gsm8k: 0.950" in outcome["message"]
    assert "passed" in outcome["message"].split("measured before keeping it:")[1]
    head = ctx.repos["engine"].repo.head.commit
    assert head.summary == "Exclude the decoder" and "Evidence:" in head.message and "n=2" in head.message
    # committing does not change the configuration's fingerprint: its samples are the accepted ones now
    rows = {row.key: row for row in target_report(ctx.task, ctx.state)}
    assert rows["throughput"].value == 120.5 and not rows["throughput"].stale
    assert rows["throughput"].metric == "output_throughput_per_node"


@pytest.mark.parametrize("after", [[101.0, 102.0], [90.0, 91.0]])
def test_noise_or_a_regression_is_reverted(ctx, after):
    baseline(ctx)
    change_config(ctx)
    pending(ctx, throughput=after)
    outcome = accepting.accept(ctx, "Exclude the decoder", "")
    assert not outcome["kept"] and "no improvement beyond noise" in outcome["reason"]
    assert not ctx.repos["engine"].is_dirty() and ctx.state.repos["engine"].accepted == []
    # the dropped edit is not lost: its diff is in the run, named in the message, and applies again
    (kept,) = outcome["reverted_diffs"].values()
    assert kept in outcome["message"] and ctx.state.attempts[-1].reverted_diffs == {"engine": kept}
    ctx.repos["engine"].repo.git.apply(str(ctx.run_dir / kept))
    assert ctx.repos["engine"].changed_files() == ["config.json"]


@pytest.mark.parametrize("single_after, kept", [([108.0, 109.0], True), ([95.0, 96.0], False)])
def test_a_figure_that_gets_worse_is_a_trade_only_while_it_meets_its_target(ctx, single_after, kept):
    """A topology that lifts throughput costs single-stream speed: kept while each single-stream sample still
    meets its target (100), reverted, naming the figure, once it would miss it."""
    baseline(ctx, single=(120.0, 121.0))
    ctx.state.flags["tp"] = 4
    pending(ctx, throughput=[140.0, 141.0], single=single_after)
    outcome = accepting.accept(ctx, "Serve TP4", "")
    assert outcome["kept"] is kept
    if kept:
        assert "Kept as a trade: single_stream got worse (-10.0%) but each of its 2 samples" in outcome["evidence"]
    else:
        assert outcome["reason"].startswith("single_stream (-20.7%) got worse beyond noise and would miss its target")


def test_a_reverted_edit_too_large_to_keep_is_dropped_whole(ctx):
    """A tree the sandbox filled with output is reverted as any other, but its diff is not copied into the run."""
    baseline(ctx)
    change_config(ctx)
    (ctx.repos["engine"].path / "dump.bin").write_bytes(b"x" * (accepting.REVERTED_DIFF_LIMIT + 1))
    pending(ctx, throughput=[101.0, 102.0])
    outcome = accepting.accept(ctx, "Exclude the decoder", "")
    assert not outcome["kept"] and outcome["reverted_diffs"] == {}
    assert not ctx.repos["engine"].is_dirty() and not (ctx.run_dir / "reverted").exists()


def test_best_of_n_reruns_do_not_flip_the_decision(ctx):
    """Re-running the pending configuration until one run clears 3% adds samples; the median does not move."""
    baseline(ctx, throughput=(100.0, 100.4))
    change_config(ctx)
    pending(ctx, throughput=[100.2, 99.8, 100.6, 99.9, 104.5])  # the fifth run is the lucky one
    outcome = accepting.accept(ctx, "Exclude the decoder", "")
    assert not outcome["kept"]
    [comparison] = outcome["comparisons"]
    assert comparison["pending_median"] == 100.2 and len(comparison["pending"]) == 5


def test_the_bar_rises_with_the_measured_spread(ctx):
    """+9% between medians is noise when the samples themselves spread by +/-5%."""
    baseline(ctx, throughput=(95.0, 105.0))
    change_config(ctx)
    pending(ctx, throughput=[108.0, 110.0])
    outcome = accepting.accept(ctx, "Exclude the decoder", "")
    assert not outcome["kept"]
    [comparison] = outcome["comparisons"]
    assert comparison["change"] == pytest.approx(0.09) and comparison["threshold"] > 0.09


def swept(ctx: RunContext, true_knees: list[float], accepted: bool = False) -> None:
    """Throughput samples whose results are sweeps as porter records them (levels, knee, per-node figures)."""
    config = ctx.mark_accepted() if accepted else ctx.fingerprint()
    item = registry.by_key(ctx.task, "throughput")
    for knee in true_knees:
        result = {**sweep(knee), "fingerprint": config}
        value = registry.headline_value(item, result)
        ctx.state.samples.append(Sample("throughput", config, evidence.harness(item), ctx.state.step, value, result))


@pytest.mark.parametrize("pending_knees, kept", [([4.13, 4.2], False), ([4.6, 4.55], True)])
def test_a_knee_one_bisection_step_higher_is_not_a_gain(ctx, pending_knees, kept):
    """Knees 4.0 -> 4.125 RPS (+3.1%, no spread within a side) stay below 1.5 brackets; 4.0 -> 4.5 is kept."""
    ctx.state.accepted = Side(serve=served(ctx))
    swept(ctx, [4.05, 4.1], accepted=True)
    measured(ctx, "quality:gsm8k", [0.95], accepted=True)
    change_config(ctx)
    pending(ctx)
    swept(ctx, pending_knees)
    outcome = accepting.accept(ctx, "Exclude the decoder", "")
    assert outcome["kept"] is kept, outcome
    [comparison] = outcome["comparisons"]
    assert comparison["resolution"] == pytest.approx(0.125 / 4) and comparison["threshold"] == pytest.approx(0.046875)
    assert "plus 1.5 x the knee resolution 3.1%" in (outcome["evidence"] if kept else outcome["reason"])


def test_a_stale_figure_is_never_the_comparison(ctx):
    """The TP4xDP2 story: speculative decoding kept on single stream leaves the old throughput stale; the
    throughput move that follows is judged against throughput measured with spec on, not before it."""
    baseline(ctx, throughput=(100.0, 101.0), single=(50.0, 51.0))
    change_config(ctx)  # stands for "speculative decoding on"
    pending(ctx, single=[150.0, 152.0])
    assert accepting.accept(ctx, "Speculative decoding", "")["kept"]
    rows = {row.key: row for row in target_report(ctx.task, ctx.state)}
    assert rows["throughput"].stale and rows["throughput"].value == 100.5 and not rows["throughput"].met
    with_spec = ctx.state.accepted_config
    ctx.state.flags["tp"] = 4
    pending(ctx, throughput=[112.0, 113.0])  # +12% over the stale figure
    with pytest.raises(ToolError, match="fewer than two .*throughput.* samples"):
        accepting.accept(ctx, "Serve TP4 x DP2", "")
    ctx.state.flags["tp"] = 8
    measured(ctx, "throughput", [111.0, 112.0], accepted=True)  # what porter re-measures after the accept
    assert ctx.state.samples[-1].config == with_spec
    ctx.state.flags["tp"] = 4
    outcome = accepting.accept(ctx, "Serve TP4 x DP2", "")
    assert not outcome["kept"] and "111.5 (n=2) on the accepted configuration -> 112.5" in outcome["reason"]


def test_a_faster_change_that_breaks_quality_is_reverted(ctx):
    baseline(ctx)
    ctx.state.flags["tp"] = 4
    pending(ctx, throughput=[150.0, 151.0], quality=0.5)
    outcome = accepting.accept(ctx, "Serve TP4", "")
    assert not outcome["kept"] and "quality below the bar: quality:gsm8k" in outcome["reason"]
    assert ctx.state.flags == {"tp": 8}


def test_two_moves_are_judged_as_a_stack_and_the_message_says_so(ctx):
    baseline(ctx)
    ctx.state.flags["tp"] = 4
    change_config(ctx)
    pending(ctx, throughput=[130.0, 131.0])
    outcome = accepting.accept(ctx, "TP4 with the decoder excluded", "")
    assert outcome["kept"] and outcome["stack"]
    assert outcome["moves"] == ["--tp 4", "engine: config.json"]
    assert "Judged as a stack of 2 moves" in outcome["evidence"]


def test_a_package_installed_outside_the_repos_blocks_accept(ctx):
    baseline(ctx)
    marker = ctx.run_dir / "environment.json"  # written when the run's set-up is done: later files are the run's
    marker.write_text("{}")
    os.utime(marker, (time.time() - 2, time.time() - 2))
    site = ctx.sandbox.host_path("/usr/local/lib/python3.11/dist-packages/fastkernels")
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    ctx.sandbox.host_path("/tmp").mkdir(exist_ok=True)
    (ctx.sandbox.host_path("/tmp") / "scratch.txt").write_text("ignored")
    change_config(ctx)
    pending(ctx, throughput=[130.0, 131.0])
    with pytest.raises(ToolError, match="accept refused") as refused:
        accepting.accept(ctx, "Exclude the decoder", "")
    assert "/usr/local/lib/python3.11/dist-packages/fastkernels/__init__.py" in str(refused.value)
    assert "/tmp" not in str(refused.value) and ctx.repos["engine"].is_dirty()


# ---------------------------------------------------------------- crashes, served for real


def serve(ctx: RunContext) -> StartUp:
    return accepting.record_serve(ctx, ctx.relaunch())


def test_a_syntax_error_is_not_progress(ctx):
    first = serve(ctx)
    assert first.crash_class and first.stage == 1 and first.stages == ["process group"]  # then the shape mismatch
    (ctx.repos["engine"].path / "server.py").write_text("import json\nconfig = {\n" + ENGINE)
    second = serve(ctx)
    assert second.signature != first.signature and second.stage == 0
    outcome = accepting.accept(ctx, "Rewrite the loader", "")
    assert not outcome["kept"] and "did not get further (stage 1 -> 0: process group -> none)" in outcome["reason"]
    assert outcome["rule"] == "no_progress" and "reverted by rule no_progress" in outcome["message"]
    assert not ctx.repos["engine"].is_dirty()


def fixed_and_kept(ctx: RunContext) -> None:
    change_config(ctx)
    assert serve(ctx).healthy
    ctx.repos["engine"].accept(ctx.state.repos["engine"], "decoder excluded")
    ctx.mark_accepted()


def test_a_change_that_crashes_where_the_accepted_configuration_starts_is_never_kept(ctx):
    """Crash A, then crash B after edits: with the accepted configuration healthy that is no progress porter can
    keep (its own first crash is no evidence: the agent chose the flags and the edits). Refused, left pending."""
    fixed_and_kept(ctx)
    ctx.state.flags["tp"] = 4
    assert serve(ctx).crash_class
    (ctx.repos["engine"].path / "notes.txt").write_text("a change that fixes nothing\n")
    with pytest.raises(ToolError, match="has not been served as it is now"):
        accepting.accept(ctx, "Add notes", "")
    (ctx.repos["engine"].path / "guard.h").write_text("#ifdef USE_ROCM\n#endif\n")
    ctx.state.flags["big-kv"] = True
    oom = serve(ctx)
    assert oom.stage > ctx.state.pending.first_crash.stage and oom.signature != ctx.state.pending.first_crash.signature
    with pytest.raises(ToolError, match="kept past a crash only when the accepted configuration crashed too"):
        accepting.accept(ctx, "Guard the CUDA header", "")
    assert ctx.repos["engine"].is_dirty() and ctx.state.flags["tp"] == 4 and ctx.state.attempts == []


def crashing_baseline(ctx: RunContext) -> StartUp:
    """The accepted configuration itself crashes (the checkpoint's exclude list misses the decoder)."""
    crash = serve(ctx)
    assert crash.crash_class and ctx.state.accepted.serve is crash
    return crash


def test_past_a_crash_of_the_accepted_configuration_a_later_stage_is_progress(ctx):
    """The exclude fix with TP4: the shape mismatch is gone, start-up now reaches the weights and stops compiling;
    served again with the accepted flags the fix alone starts, so it is committed and TP4 stays pending."""
    ctx.task.checks.quality = []  # this engine serves no completions (the twin story runs quality here too)
    crashing_baseline(ctx)
    change_config(ctx)
    ctx.state.flags["tp"] = 4
    compile_crash = serve(ctx)
    assert compile_crash.stages == ["process group", "weights loaded"]
    outcome = accepting.accept(ctx, "Exclude the decoder", "")
    assert outcome["kept"] and outcome["rule"] == "crash_progress", outcome
    assert "stage 1 -> 2: process group -> process group, weights loaded" in outcome["evidence"]
    assert "served again with the accepted flags: healthy" in outcome["evidence"]
    assert ctx.state.accepted_flags["tp"] == 8 and ctx.state.flags["tp"] == 4
    assert ctx.state.accepted.serve.healthy and ctx.server_fingerprint == ctx.state.accepted_config
    assert ctx.repos["engine"].repo.head.commit.summary == "Exclude the decoder"


def test_stage_lines_the_change_prints_itself_are_no_progress(ctx):
    """The forged-progress attack: the change prints the engine's stage lines, then crashes another way."""
    crashing_baseline(ctx)
    forged = ENGINE.replace(
        'print("Building the model graph", flush=True)',
        'print("Load weight end. elapsed=0.1 s", flush=True)\nprint("KV Cache is allocated. #tokens: 1", flush=True)\n'
        + 'raise KeyError("forged")',
    )
    (ctx.repos["engine"].path / "server.py").write_text(forged)
    (ctx.repos["engine"].path / "blob.bin").write_bytes(b"\0" * 4096)
    crash = serve(ctx)
    assert crash.stage == 3 and crash.signature != ctx.state.accepted.serve.signature
    outcome = accepting.accept(ctx, "Speed up the loader", "")
    assert not outcome["kept"] and "prints the engine's stage lines (weights loaded, memory pool)" in outcome["reason"]
    assert ctx.state.repos["engine"].accepted == [] and not ctx.repos["engine"].is_dirty()


def test_a_crash_fix_that_breaks_quality_is_no_fix(ctx):
    """The careless patch that makes the shapes fit starts the server, and answers wrongly: nothing is committed."""
    fixed_and_kept(ctx)
    ctx.state.accepted = Side(serve=served(ctx))
    measured(ctx, "quality:gsm8k", [0.95], accepted=True)
    head = ctx.repos["engine"].repo.head.commit.hexsha
    ctx.state.flags["tp"] = 4
    assert serve(ctx).crash_class
    (ctx.repos["engine"].path / "guard.h").write_text("#ifdef USE_ROCM\n#endif\n")
    assert serve(ctx).healthy
    measured(ctx, "quality:gsm8k", [0.4])
    outcome = accepting.accept(ctx, "Guard the CUDA header", "")
    assert not outcome["kept"] and outcome["rule"] == "quality_failed" and "crash fix" not in outcome["reason"]
    assert ctx.repos["engine"].repo.head.commit.hexsha == head and [a.rule for a in ctx.state.attempts] == [
        "quality_failed"
    ]


def test_a_crash_fix_is_its_own_commit_when_the_flags_it_unblocked_bring_no_gain(ctx):
    """TP4 crashes on the accepted tree (cuda_runtime.h); the guard makes it start. The guard is committed with
    the crash and the healthy start as its evidence, then TP4 is judged on speed and reverted: the fix stays."""
    fixed_and_kept(ctx)
    ctx.state.accepted = Side(serve=served(ctx))
    measured(ctx, "throughput", [100.0, 101.0], accepted=True)
    measured(ctx, "quality:gsm8k", [0.95], accepted=True)
    ctx.state.flags["tp"] = 4
    crash = serve(ctx)
    assert crash.crash_class and ctx.state.pending.first_crash is crash
    (ctx.repos["engine"].path / "guard.h").write_text("#ifdef USE_ROCM\n#endif\n")
    assert serve(ctx).healthy
    measured(ctx, "quality:gsm8k", [0.95])
    measured(ctx, "throughput", [100.5, 101.5])
    outcome = accepting.accept(ctx, "Guard the CUDA header", "")
    assert not outcome["kept"] and outcome["rule"] == "no_gain" and "crash fix stays kept" in outcome["reason"]
    head = ctx.repos["engine"].repo.head.commit
    assert head.summary == "Guard the CUDA header" and "guard.h" in head.stats.files
    assert "with these flags the accepted tree crashed" in head.message and ctx.state.flags["tp"] == 8
    assert [a.rule for a in ctx.state.attempts] == ["crash_fix", "no_gain"]


def quality_sample(ctx: RunContext, score: float, low: float, high: float, accepted: bool = False) -> None:
    config = ctx.mark_accepted() if accepted else ctx.fingerprint()
    item = registry.by_key(ctx.task, "quality:gsm8k")
    result = {"score": score, "ci_low": low, "ci_high": high, "n": 200, "passed": score >= 0.9, "fingerprint": config}
    ctx.state.samples.append(Sample("quality:gsm8k", config, evidence.harness(item), ctx.state.step, score, result))


@pytest.mark.parametrize("throughput, kept", [(None, True), ([99.5, 100.5], True), ([60.0, 61.0], False)])
def test_a_change_that_restores_quality_is_kept_without_a_speed_figure(ctx, throughput, kept):
    """The silent numeric defect: GSM8K 0.755 on the accepted configuration, 0.975 with the fix. Kept on that
    alone (no speed figure demanded), unless a target the accepted configuration met is lost beyond noise."""
    ctx.state.accepted = Side(serve=served(ctx))
    measured(ctx, "throughput", [100.0, 101.0], accepted=True)
    quality_sample(ctx, 0.755, 0.69, 0.81, accepted=True)
    change_config(ctx)
    ctx.state.pending = Side(serve=served(ctx))
    quality_sample(ctx, 0.975, 0.94, 0.99)
    if throughput:
        measured(ctx, "throughput", throughput)
    outcome = accepting.accept(ctx, "Read the KV scale from the checkpoint", "")
    assert outcome["kept"] is kept, outcome
    if kept:
        assert outcome["rule"] == "quality_restored" and "quality restored: quality:gsm8k 0.755" in outcome["message"]
        assert "beyond both intervals" in outcome["evidence"]
    else:
        assert outcome["rule"] == "loss" and "would miss its target" in outcome["reason"]


def test_the_status_shows_the_pending_changes_own_figure_beside_the_accepted_one(ctx):
    """After a fix is measured, the model reads the accepted configuration's failing figure and, beside it, the
    pending change's passing one (what accept would weigh), not the failing figure alone."""
    ctx.state.accepted = Side(serve=served(ctx))
    quality_sample(ctx, 0.755, 0.69, 0.81, accepted=True)
    change_config(ctx)
    assert "the pending change" not in observations.status(run_status(ctx, True), {})  # no figure of its own yet
    quality_sample(ctx, 0.975, 0.94, 0.99)
    assert "pending_value" not in run_status(ctx)["targets"][0].to_dict()  # after a command that measures nothing
    rows = {row.key: row.to_dict() for row in run_status(ctx, True)["targets"]}  # as the model's JSON has them
    assert rows["quality:gsm8k"]["value"] == 0.755 and not rows["quality:gsm8k"]["met"]
    assert rows["quality:gsm8k"]["pending_value"] == 0.975 and rows["quality:gsm8k"]["pending_met"]
    assert rows["throughput"]["pending_value"] is None
    text = observations.status(run_status(ctx, True), {})
    assert "0.755 (goal 0.9): not met; the pending change: 0.975, would meet the goal" in text
