"""How large are the requests a model is sent over a 16-turn run? Median and largest, in KB.

Runs tasks/twin_glm52.yaml in the local sandbox (no Docker) at the quick clock with a scripted model whose 16
turns are what a model in the seat does on the story's first steps: serve the baseline (the load crash), read the
log, grep and read the checkpoint's config, apply the exclude fix, serve, read the log, measure quality, single
stream and throughput, accept, turn MTP on, serve, measure single stream, grep the log for the MoE lookups. Each
request is serialized as the file provider writes it (OpenAI Chat Completions messages and tools, JSON), so the
sizes are the bytes a provider would be sent. Twin numbers on a shared VM; the sizes do not depend on its speed
(the figures in the results do, by a few characters).
Usage: python3 benchmarks/request_sizes.py [--out DIR]; prints one JSON object as its last line.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from porter.evaluate import runs  # noqa: E402
from porter.loop import agent  # noqa: E402
from porter.models import ScriptedModel  # noqa: E402
from porter.models.openai import to_openai_message, to_openai_tool  # noqa: E402
from porter.redaction import redact  # noqa: E402
from porter.task import load_task  # noqa: E402

FIX = ROOT / "sandboxes" / "twin" / "fixes" / "a-quark-exclude-mtp.patch"
MTP = {"speculative-algorithm": "EAGLE", "speculative-num-steps": 3, "speculative-eagle-topk": 1,
       "speculative-num-draft-tokens": 4}  # fmt: skip


def call(tool: str, **arguments) -> dict:
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


SCRIPT = [
    call("serve"),
    call("read_log", grep="Traceback|Error", context=3),
    call("read_log"),
    call("bash", command="grep -n exclude -A3 /models/glm-5.2-mxfp4/config.json | head -40"),
    call("read_file", path="/sgl-workspace/twin/twin/models/glm5.py"),
    call("apply_patch", repo="model", patch=FIX.read_text()),
    call("serve"),
    call("read_log", tail=120),
    call("run_check", kind="quality"),
    call("run_check", kind="single_stream"),
    call("run_check", kind="throughput"),
    call("accept", summary="the MTP head's shared expert stays bf16 under the engine's name"),
    call("set_flags", flags=MTP),
    call("serve"),
    call("run_check", kind="single_stream"),
    call("read_log", grep="fused_moe"),
]


class MeasuredModel(ScriptedModel):
    """The scripted model, noting the size of each request as the file provider would write it."""

    def __init__(self, script: list[dict]):
        super().__init__(script)
        self.sizes: list[int] = []

    def step(self, messages, tools):
        request = {"messages": [to_openai_message(m) for m in messages], "tools": [to_openai_tool(t) for t in tools]}
        self.sizes.append(len(json.dumps(request, ensure_ascii=False).encode()))
        return super().step(messages, tools)


def task_file(directory: Path) -> Path:
    source = ROOT / "tasks" / "twin_glm52.yaml"
    data = yaml.safe_load(source.read_text())
    sandbox = data["sandbox"]
    sandbox["kind"] = "local"
    for command in [sandbox.get("local_setup") or [], *(s["command"] for s in sandbox.get("services", []))]:
        if command and "/" in command[0]:
            command[0] = str((source.parent / command[0]).resolve())
    scale = 0.1 / float(sandbox["env"].get("TWIN_TIME_SCALE", 1))
    sandbox["env"]["TWIN_TIME_SCALE"] = "0.1"
    data["serve"]["startup_timeout_s"] *= scale
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        data["serve"]["port"] = probe.getsockname()[1]
    checks = data["checks"]
    for check, samples in zip(checks["quality"], (50, 30), strict=False):
        check["samples"] = samples
    throughput = checks["throughput"]
    throughput["workload"].update(duration_s=throughput["workload"]["duration_s"] * scale, warmup_s=1)
    throughput["rps"] = [rate / scale for rate in throughput["rps"]]
    throughput["slo"]["ttft_s"] *= scale
    throughput["target_tok_s_per_node"] /= scale
    checks["single_stream"]["target_output_tok_s"] /= scale
    checks["single_stream"]["num_requests"] = 2
    data["agent"] = {**data.get("agent", {}), "provider": "playbook"}
    data["outputs"] = {"runs_dir": str(directory / "runs")}
    path = directory / "task.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="keep the run directory here")
    options = parser.parse_args()
    directory = options.out or Path(tempfile.mkdtemp(prefix="request-sizes-"))
    directory.mkdir(parents=True, exist_ok=True)
    path = task_file(directory)
    task = load_task(path)
    ctx = runs.open_run(task, str(path), fresh=True)
    model = MeasuredModel(SCRIPT)
    try:
        agent.run_loop(ctx, model, redact)
    finally:
        runs.finish_outputs(ctx)
        ctx.sandbox.stop(remove=True)
    kb = [round(size / 1000, 1) for size in model.sizes]
    print(f"request sizes, KB, turn by turn: {kb}", file=sys.stderr)
    print(json.dumps({"requests": len(kb), "median_kb": statistics.median(kb), "largest_kb": max(kb),
                      "run": str(ctx.run_dir)}))  # fmt: skip


if __name__ == "__main__":
    main()
