"""The playbook agent on the twin (real Docker): each scenario its rules cover brought up, and a clean stop on the
ones they do not. Also its rules as pure functions. (The default scenario end to end: test_outputs.py, which
holds the session's playbook run.)"""

from __future__ import annotations

import git
import pytest
import yaml
from twin_tasks import ROOT, bringup_task_data, build_twin, fast_task_data, run_with, tool_results, write_task

from porter.models.remedies import exclude_alias_lines, renamed_module, speculative_configs, topologies
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
@pytest.mark.parametrize("scenario", ["ckpt-name-keyerror", "fp8-fnuz-gfx950", "nv-bf16-macro"])
def test_the_playbook_stops_cleanly_where_no_rule_applies(docker_client, tmp_path, scenario):
    build_twin(scenario)
    ctx = run_with(bring_up_task(tmp_path, f"twin_{scenario.replace('-', '_')}.yaml"))
    assert not ctx.state.solved
    assert ctx.state.finished and ("no playbook rule" in ctx.state.finished or "did not remove" in ctx.state.finished)
    assert not ctx.repos["twin"].is_dirty()
    assert ctx.state.repos["twin"].accepted == []


# ---------------------------------------------------------------- rules as functions


def test_renamed_module_finds_both_prefixes():
    facts = {
        "parameter": "model.decoder.mlp.shared_experts.gate_proj.weight",
        "module_prefixes": [
            "model.decoder.mlp.shared_experts.gate_proj.weight",
            "model.layers.78.mlp.shared_experts.gate_proj.weight",
        ],
    }
    assert renamed_module(facts) == (
        "model.decoder.mlp.shared_experts.gate_proj.weight",
        "model.layers.78.mlp.shared_experts.gate_proj.weight",
        "model.decoder",
        "model.layers.78",
    )
    assert renamed_module({"parameter": "a.b", "module_prefixes": ["x.y"]}) is None


def test_exclude_edit_keeps_the_json_valid():
    line = '    "model.layers.78.mlp.shared_experts.*"'
    added = exclude_alias_lines(
        line, "model.layers.78", "model.decoder", "model.layers.78.mlp.shared_experts.gate_proj.weight"
    )
    document = '{"exclude": [\n    "*.mlp.gate",\n' + added + "\n]}"
    assert yaml.safe_load(document)["exclude"] == [
        "*.mlp.gate",
        "model.decoder.mlp.shared_experts.*",
        "model.layers.78.mlp.shared_experts.*",
    ]


def test_flag_searches_follow_the_tunables():
    task = load_task(ROOT / "tasks" / "glm52_mi355x.yaml", environ={})
    assert speculative_configs(task.serve.tunables)[-1] == {
        "speculative-algorithm": "EAGLE",
        "speculative-num-steps": 5,
        "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 6,
    }
    assert topologies(task.serve.tunables, 8) == [
        {"tp-size": 8, "dp-size": None},
        {"tp-size": 4, "dp-size": 2},
        {"tp-size": 2, "dp-size": 4},
    ]
