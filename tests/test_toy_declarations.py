"""An engine and a check kind are each one declaration: a toy third engine and a toy check kind, each added as one
module and one registry line, reach `porter init`, `porter validate`, `porter preflight` and the PR draft.

The test copies the porter package, writes engines/toy.py (an `Engine` with flag names, start-up lines, PR style and
benchmark client of its own, none of sglang's or vLLM's) and checks/toy_kind.py (tests/test_check_kinds.py's toy kind,
with a PR evidence line), and adds each name to its registry's line, nothing else. The toy engine's launcher is a
small argparse program written here (imitating how an engine's `python3 -m MODULE` parses its serve flags, with
`--port`), run by preflight on the local sandbox through porter's own parser probe. The checkpoint is a tiny
DeepSeek-V3-shaped config.json written here (the shape of test_init.py's). The PR draft is drawn from
tests/prepared_run.py's run, with the task's engine the toy one and a toy result on the kept configuration.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml
from test_check_kinds import TOY_KIND

ROOT = Path(__file__).resolve().parent.parent

TOY_ENGINE = '''
"""A toy engine, declared once: `python3 -m toyserve`, with flag names, start-up lines and PR style of its own."""

from porter.engines.engine import BenchLoad, Engine, PrStyle, json_draft

draft_flags, read_draft = json_draft("draft")


def bench_client(port: int, model: str, load: BenchLoad) -> list[str]:
    return [f"toybench --port {port} --in {load.input_tokens} --out {load.output_tokens} {load.pacing}"]


ENGINE = Engine(
    name="toy",
    launch="python3 -m toyserve --weights {model_path} --host {host} --port {port} {flags}",
    launched_by=r"-m toyserve\\b",
    default_port=7070,
    tensor_parallel=("shards",),
    data_parallel=("replicas",),
    pipeline_parallel=("stages",),
    expert_parallel=("expert-shards",),
    dp_attention=None,
    kv_cache_dtype="cache-dtype",
    memory_fraction="memory-share",
    served_name="name",
    model_flags=("weights",),
    speculative_flags=("draft",),
    draft_flags=draft_flags,
    read_draft=read_draft,
    stages=(("loaded", r"toyserve: loaded"), ("serving", r"toyserve: serving")),
    one_batch="python3 -m toyserve.one_batch",
    expert_parallel_switch=False,
    moe_over_data_parallel=False,
    memory_share=0.8,
    max_batched_tokens="step-tokens",
    config_override="overrides",
    eager=(("eager", True),),
    remote_code="own-code",
    mtp_method="mtp",
    kv_cache_fp8="fp8",
    rocm_environment=(("TOY_ROCM", "1"),),
    pr_style=PrStyle("[toy] ", (("Why", ("problem", "cause", "fix")), ("Numbers", ("speed", "accuracy", "tested")),
                                ("Again", ("environment", "reproduce")))),
    bench_client=bench_client,
)
'''

TOY_LAUNCHER = """
import argparse

parser = argparse.ArgumentParser(prog="toyserve")
parser.add_argument("--weights", required=True)
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, default=7070)
parser.add_argument("--name")
for size in ("--shards", "--replicas", "--stages", "--expert-shards", "--step-tokens"):
    parser.add_argument(size, type=int, default=1)
parser.add_argument("--cache-dtype", choices=["auto", "fp8"], default="auto")
parser.add_argument("--memory-share", type=float, default=0.8)
parser.add_argument("--attention", choices=["flash", "plain"])
parser.add_argument("--draft")
parser.add_argument("--own-code", action="store_true")
parser.parse_args()
raise SystemExit("toyserve serves nothing")
"""

CONFIG = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 1024,
          "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "kv_lora_rank": 128,
          "qk_rope_head_dim": 32, "qk_nope_head_dim": 64, "v_head_dim": 64, "q_lora_rank": 256,
          "moe_intermediate_size": 512, "n_routed_experts": 16, "num_experts_per_tok": 2, "n_shared_experts": 1,
          "first_k_dense_replace": 1, "intermediate_size": 2048, "vocab_size": 1000,
          "num_nextn_predict_layers": 1, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}  # fmt: skip

# The toy kind's line among a PR's evidence (test_check_kinds' toy kind declares none).
TOY_EVIDENCE = """
import dataclasses

KIND = dataclasses.replace(KIND, accuracy=lambda key, result, spec: f"toy listing: {result['median_ms']} ms median")
"""

PR_DRAFT = """
import json, sys
sys.path.append(sys.argv[2])
import prepared_run
from porter.report.pr_draft import write_prs

task_data = prepared_run.task_data
prepared_run.task_data = lambda engine, **outputs: {
    **task_data(engine, **outputs),
    "checks": {**task_data(engine, **outputs)["checks"], "toy": {"requests": 2, "target_ms": 50}},
}
run = prepared_run.PreparedRun(__import__("pathlib").Path(sys.argv[1]), engine="toy").build()
kept = run.state.attempts[0].fingerprint
run.measure(3, kept, "toy", 12.5, {"median_ms": 12.5, "target_ms": 50}, False)
run.save()
print(json.dumps({path.name: path.read_text() for path in write_prs(run.run_dir)}))
"""


def add_to_registry(path: Path, line: str, name: str) -> None:
    text = path.read_text()
    assert text.count(line) == 1, f"{path.name} has no registry line {line!r}"
    path.write_text(text.replace(line, line.replace(")", f', "{name}")')))


def porter(folder: Path, *words: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "porter", *words]
    return subprocess.run(command, capture_output=True, text=True, cwd=folder, timeout=180)


def test_a_toy_engine_and_a_toy_kind_each_added_as_one_module_and_one_line(tmp_path):
    package = tmp_path / "porter"
    shutil.copytree(ROOT / "porter", package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "engines" / "toy.py").write_text(textwrap.dedent(TOY_ENGINE))
    add_to_registry(package / "engines" / "known.py", 'ENGINE_MODULES = ("sglang", "vllm")', "toy")
    (package / "checks" / "toy_kind.py").write_text(textwrap.dedent(TOY_KIND) + TOY_EVIDENCE)
    line = 'KIND_MODULES = ("quality_kind", "single_stream_kind", "throughput_kind")'
    add_to_registry(package / "checks" / "registry.py", line, "toy_kind")
    (tmp_path / "toyserve").mkdir()
    (tmp_path / "toyserve" / "__main__.py").write_text(TOY_LAUNCHER)
    checkpoint = tmp_path / "tiny"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps(CONFIG))

    drafted = porter(tmp_path, "init", str(checkpoint), "--engine", "toy", "--hardware", "MI355X:8", "--out", "t.yaml")
    assert drafted.returncode == 0, drafted.stderr
    task = yaml.safe_load((tmp_path / "t.yaml").read_text())
    assert task["serve"]["engine"] == "toy" and task["sandbox"]["env"] == {"TOY_ROCM": "1"}
    assert task["serve"]["command"] == "python3 -m toyserve --weights {model_path} --host {host} --port {port} {flags}"
    assert {"shards": 8, "memory-share": 0.8, "cache-dtype": "auto", "step-tokens": 16384}.items() <= task["serve"][
        "flags"
    ].items()
    assert task["serve"]["tunables"]["draft"][1] == '{"method": "mtp", "num_speculative_tokens": 1}'

    del task["serve"]["engine"]  # the toy declaration recognises its own launch command
    task["serve"]["tunables"]["attention"] = ["plain", "paged"]  # a value toyserve's parser refuses
    task["serve"]["flags"]["attention"] = "plain"
    task["sandbox"] = {"kind": "local", "env": {"PYTHONPATH": str(tmp_path)}}
    task["checks"] = {"toy": {"requests": 2, "target_ms": 50}}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(task))
    valid = porter(tmp_path, "validate", "t.yaml")
    assert valid.returncode == 0, valid.stderr
    assert "  engine: toy\n" in valid.stdout
    assert "# serve command: python3 -m toyserve --weights /models/tiny --host 0.0.0.0 --port 7070 " in valid.stdout
    checked = porter(tmp_path, "preflight", "t.yaml")
    refused = "tunable attention=paged: toyserve: error: argument --attention: invalid choice: 'paged'"
    assert checked.returncode == 2 and refused in checked.stdout, checked.stdout + checked.stderr

    probe = [sys.executable, "-c", PR_DRAFT, str(tmp_path / "run"), str(ROOT / "tests")]
    drawn = subprocess.run(probe, capture_output=True, text=True, cwd=tmp_path, timeout=180)
    assert drawn.returncode == 0, drawn.stderr
    table, guard = (json.loads(drawn.stdout.splitlines()[-1])[name] for name in ("engine-1.md", "engine-2.md"))
    assert table.startswith("# [toy] Add tuned_fmoe.csv entries") and guard.startswith("# [toy] Fix missing ROCm")
    headings = [line for line in table.splitlines() if line.startswith("## ")]
    assert headings == ["## Why", "## Numbers", "## Again"]
    assert "\n- toy listing: 12.5 ms median\n" in table  # the toy kind's evidence line
    # the throughput kind's load at its knee, in the toy engine's client; the serve line in its launch
    assert "\ntoybench --port 7070 --in 2000 --out 64 --request-rate 14.5 --num-prompts 58 --seed 0\n" in table
    assert "\npython3 -m toyserve --weights /models/Model-MXFP4 --host 0.0.0.0 --port 7070 --tp-size 8 " in guard
