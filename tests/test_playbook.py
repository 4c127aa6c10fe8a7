"""The playbook agent on the twin (real Docker): each scenario its rules cover brought up, and a clean stop on the
ones they do not. Also its rules as pure functions. (The default scenario end to end: test_outputs.py, which
holds the session's playbook run.)"""

from __future__ import annotations

import json

import git
import pytest
import yaml
from twin_tasks import ROOT, bringup_task_data, build_twin, fast_task_data, run_with, tool_results, write_task

from porter.engines.known import ENGINES
from porter.models.playbook import Playbook
from porter.models.playbook_history import Event
from porter.models.remedies import (
    exclude_alias_edit,
    excluded_by_edit,
    flag_candidates,
    renamed_module,
    speculative_configs,
    topologies,
)
from porter.task import load_task


def bring_up_task(tmp_path, scenario_task: str, **changes):
    """A scenario task cut to its bring-up, so the run ends once the scenario's failure is fixed and quality
    holds."""
    return write_task(tmp_path, bringup_task_data(ROOT / "tasks" / scenario_task), **changes)


COVERED = {
    # scenario: (task file, flag the playbook must end on, its value: the first allowed one that starts)
    "oom-mem-fraction": ("twin_oom_mem_fraction.yaml", "mem-fraction-static", 0.9),
    "attn-backend-triton-gfx950": ("twin_attn_backend_triton_gfx950.yaml", "attention-backend", "aiter"),
}


@pytest.mark.docker
@pytest.mark.parametrize("scenario", sorted(COVERED))
def test_the_playbook_brings_up_each_scenario_its_rules_cover(docker_client, tmp_path, scenario):
    task_file, flag, value = COVERED[scenario]
    build_twin(scenario)
    ctx = run_with(bring_up_task(tmp_path, task_file))
    assert ctx.state.solved, (ctx.state.finished, [r["content"][:300] for r in tool_results(ctx.run_dir)])
    assert ctx.state.accepted_flags[flag] == value


@pytest.mark.docker
@pytest.mark.long_run
def test_the_playbook_tunes_an_untuned_shape(docker_client, tmp_path):
    build_twin("moe-fused-shared-untuned")
    data = fast_task_data(ROOT / "tasks" / "twin_moe_fused_shared_untuned.yaml")
    data["checks"]["quality"][0]["samples"] = 50
    data["checks"]["quality"][1]["samples"] = 30
    del data["checks"]["single_stream"]
    data["serve"]["tunables"] = {}  # the tuner is the only lever left: baseline, tune, measure, keep
    ctx = run_with(write_task(tmp_path, data))
    tunes = [r for r in tool_results(ctx.run_dir) if r["name"] == "tune"]
    assert len(tunes) == 1 and "moe-fp4-fused-shared" in tunes[0]["content"]
    kept = [a for a in ctx.state.attempts if a.outcome == "kept"]
    assert len(kept) == 1 and "throughput" in kept[0].evidence, ctx.state.attempts
    repo = git.Repo(ctx.repos["twin"].path)
    assert list(repo.head.commit.stats.files) == ["twin/configs/tuned_fmoe.csv"]
    assert "no candidate is left" in ctx.state.finished


@pytest.mark.docker
@pytest.mark.parametrize("scenario", ["ckpt-name-keyerror", "fp8-fnuz-gfx950", "nv-bf16-macro", "dsa-topk-v2-gfx950"])
def test_the_playbook_stops_cleanly_where_no_rule_applies(docker_client, tmp_path, scenario):
    """dsa-topk-v2-gfx950 (the fix is the serve environment, not yet a tool of porter): its first error, a CUDA-only
    <cooperative_groups.h>, reads as a compile error today and the run stops at once; read as a missing guard, the
    guard rule would fix the header, the next error has no rule, and the guard is reverted before the stop."""
    build_twin(scenario)
    ctx = run_with(bring_up_task(tmp_path, f"twin_{scenario.replace('-', '_')}.yaml"))
    assert not ctx.state.solved
    reasons = ("no playbook rule", "did not remove", "never started")
    assert ctx.state.finished and any(reason in ctx.state.finished for reason in reasons)
    assert not ctx.repos["twin"].is_dirty()
    assert ctx.state.repos["twin"].accepted == []


# ---------------------------------------------------------------- rules as functions


def test_renamed_module_finds_both_prefixes():
    """The engine's fused slot against the checkpoint's shard share `mlp.shared_experts`, an unfused one the rest."""
    checkpoint = "model.layers.78.mlp.shared_experts.gate_proj.weight"
    for engine in (
        "model.decoder.mlp.shared_experts.gate_up_proj.weight",
        "model.decoder.mlp.shared_experts.gate_proj.weight",
    ):
        facts = {"parameter": engine, "module_prefixes": [engine, checkpoint]}
        assert renamed_module(facts) == (engine, checkpoint, "model.decoder", "model.layers.78")
    assert renamed_module({"parameter": "a.b", "module_prefixes": ["x.y"]}) is None
    assert renamed_module({"parameter": "model.decoder.x.weight", "module_prefixes": ["model.layers.3.y.bias"]}) is None


CHECKPOINT = "model.layers.78.mlp.shared_experts.gate_proj.weight"
EXACT = [f"model.layers.78.mlp.shared_experts.{name}" for name in ("down_proj", "gate_proj", "up_proj")]
ALIASES = [f"model.decoder.mlp.shared_experts.{name}" for name in ("down_proj", "gate_proj", "up_proj")]


def edited(text: str) -> str:
    edit = exclude_alias_edit(text.splitlines(), "model.layers.78", "model.decoder", CHECKPOINT)
    assert edit is not None
    return text.replace(edit[0], edit[1], 1)


@pytest.mark.parametrize("indent", [2, None], ids=["one entry a line", "one line"])
def test_exclude_edit_aliases_every_sibling_entry_and_keeps_the_json_valid(indent):
    """Quark's export lists exact names: the shared expert's three entries each get their engine-side twin (a fused
    gate_up_proj is excluded only when both of its shards are), other entries of the layer are left alone."""
    exclude = ["lm_head", "model.layers.78.eh_proj", *EXACT, "model.layers.8.mlp.gate"]
    text = json.dumps({"exclude": exclude}, indent=indent)
    after = json.loads(edited(text))["exclude"]
    assert sorted(set(after) - set(exclude)) == ALIASES and len(after) == len(exclude) + 3


def test_exclude_edit_recognises_and_writes_re_entries():
    """A `re:` entry rooted at the checkpoint's prefix (escaped or not) is rewritten under the engine's prefix, escaped;
    one that does not cover the failing module is left alone."""
    for entry, alias in [
        ("re:model.layers.78.mlp.shared_experts.*", r"re:model\.decoder.mlp.shared_experts.*"),
        (r"re:model\.layers\.78\..*", r"re:model\.decoder\..*"),
    ]:
        text = json.dumps({"exclude": [r"re:.*\.mlp\.gate$", entry]}, indent=2)
        assert json.loads(edited(text))["exclude"] == [r"re:.*\.mlp\.gate$", alias, entry]
    only_gates = json.dumps({"exclude": [r"re:.*\.mlp\.gate$", "model.layers.78.eh_proj"]}, indent=2)
    assert exclude_alias_edit(only_gates.splitlines(), "model.layers.78", "model.decoder", CHECKPOINT) is None


def test_exclude_edit_in_a_yaml_list_and_its_commit_subject():
    text = "exclude:\n" + "".join(f"  - {entry}\n" for entry in EXACT)
    old, new = exclude_alias_edit(text.splitlines(), "model.layers.78", "model.decoder", CHECKPOINT)
    assert yaml.safe_load(text.replace(old, new, 1))["exclude"] == [*ALIASES, *EXACT]
    assert excluded_by_edit(old, new) == "3 modules under model.decoder.mlp.shared_experts"


def test_flag_searches_follow_the_tunables():
    task = load_task(ROOT / "tasks" / "glm52_mi355x.yaml", environ={})
    assert speculative_configs(task.serve.tunables, ENGINES["sglang"])[0] == {  # the deepest first
        "speculative-algorithm": "EAGLE",
        "speculative-num-steps": 5,
        "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 6,
    }
    assert topologies(task.serve.tunables, 8, ENGINES["sglang"]) == [
        {"tp-size": 8, "dp-size": None},
        {"tp-size": 4, "dp-size": 2},
    ]


def test_flag_searches_read_vllms_spelling():
    """The vLLM task porter init writes: the draft is one JSON flag, the split is tensor- x data-parallel-size;
    the searches find both through the engine declaration, as they find sglang's separate flags."""
    task = load_task(ROOT / "tasks" / "twin_corvid3_vllm.yaml", environ={})
    vllm = ENGINES["vllm"]
    drafts = speculative_configs(task.serve.tunables, vllm)
    assert [vllm.read_draft(config).steps for config in drafts] == [3, 1]
    assert all(set(config) == {"speculative-config"} for config in drafts)
    assert topologies(task.serve.tunables, 8, vllm) == [
        {"tensor-parallel-size": 8, "data-parallel-size": None},
        {"tensor-parallel-size": 4, "data-parallel-size": 2},
        {"tensor-parallel-size": 2, "data-parallel-size": 4},
        {"tensor-parallel-size": 1, "data-parallel-size": 8},
    ]
    candidates = flag_candidates(task, {"single", "throughput"})
    assert [goal for goal, config in candidates if config in drafts] == ["single_stream", "single_stream"]
    assert not any("tp-size" in config or "speculative-algorithm" in config for _, config in candidates)


def test_a_shallower_draft_is_judged_with_the_next_move_before_it_goes_alone():
    """The deepest draft first (its bring-up meets every crash a draft uncovers); the shallower one, a few percent
    either way on the twin, is judged with the fp8 KV cache (another flag) instead of paying a launch alone: the
    README job keeps 3/1/4 and fp8 in one launch. Alone, each comes after."""
    task = load_task(ROOT / "tasks" / "twin_glm52.yaml")
    deepest, shallower = speculative_configs(task.serve.tunables, ENGINES["sglang"])
    fp8 = {"kv-cache-dtype": "fp8_e4m3"}
    single = [config for goal, config in flag_candidates(task, {"single"}) if goal == "single_stream"]
    assert single[:4] == [deepest, {**shallower, **fp8}, shallower, fp8]
    assert deepest["speculative-num-steps"] == 5 and shallower["speculative-num-steps"] == 3


def started(inter_dim: int) -> Event:
    """A healthy start whose log warns of an untuned MoE shape (aiter's key, as triage reads it)."""
    shape = {"arch": "gfx950", "cu_num": "256", "token": "1", "model_dim": "6144", "inter_dim": str(inter_dim)}
    finding = {"category": "slow_fallback_perf", "facts": {"shape": {**shape, "expert": "256", "topk": "8"}}}
    return Event("serve", {}, None, ok=True, facts={"healthy": True, "findings": [finding]})


def test_a_reverted_tune_runs_again_only_for_a_shape_it_did_not_answer():
    """The tuned config did not pay at TP8 (reverted); TP4 reports its own expert width untuned: tune again."""
    task = load_task(ROOT / "tasks" / "twin_glm52.yaml")
    tune = Event("tune", {"name": "moe-fp4"}, ("search", "throughput"), ok=True)
    revert = Event("revert", {}, None, ok=True)
    assert Playbook(task, [started(256)])._tune_candidate().arguments == {"name": "moe-fp4"}
    assert Playbook(task, [started(256), tune, started(256), revert, started(256)])._tune_candidate() is None
    again = Playbook(task, [started(256), tune, started(256), revert, started(512)])._tune_candidate()
    assert again.arguments == {"name": "moe-fp4"} and "inter_dim=512" in again.why


def test_the_tuning_command_waits_for_the_split_the_throughput_search_keeps():
    """The baseline warns of an untuned shape; while a TP x DP split is untried the split goes first (a tuned
    config is per rank's expert width: tuned at TP8 it did not pay and ran again after the split); once the split
    has been judged, the tuning command runs."""
    task = load_task(ROOT / "tasks" / "twin_glm52.yaml")
    baseline_flags = dict(task.serve.flags)
    targets = [{"target": "throughput", "met": False, "key": "throughput"}]
    status = {"flags": baseline_flags, "targets": targets, "accepted_checks": ["throughput"]}
    measured = Event("run_check", {"kind": "throughput"}, None, ok=True, facts={"status": status})
    first = Playbook(task, [started(256), measured])._next_candidate()
    assert (first.tool, first.arguments) == ("set_flags", {"flags": {"tp": 4, "dp": 2}})
    split = Event("set_flags", first.arguments, ("search", "throughput"), ok=True)
    kept = Event("accept", {}, None, ok=True, facts={"kept": True, "status": {**status, "flags": {**baseline_flags,
                 "tp": 4, "dp": 2}}})  # fmt: skip
    then = Playbook(task, [started(256), measured, split, started(512), kept])._next_candidate()
    assert (then.tool, then.arguments) == ("tune", {"name": "moe-fp4"})
