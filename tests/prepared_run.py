"""A run directory as porter leaves one, built in seconds for the report, plot, HTML and PR tests.

A real git tree shaped like an image's (upstream history, then the image's own uncommitted change, which porter
commits before the run), tracked by porter's TrackedRepo, with the run's commits made as accept makes them: a
tuned table kept for a throughput gain, and a ROCm guard kept as a crash fix (whose deeper draft was then
reverted for no gain). The records are porter's own types (RunState, Attempt, Sample, Configuration); the
server logs, the transcript's tool results and the measurements are what a run writes. Only the measurements'
numbers are made up.
"""

from __future__ import annotations

import json
from pathlib import Path

import git
import yaml

from porter.engines.known import engine_named
from porter.ledger.noise import Comparison
from porter.ledger.records import Attempt, Configuration, Sample
from porter.ledger.state import RunState
from porter.ledger.transcript import Transcript, write_state
from porter.sandbox.trees.tracked import TrackedRepo, commit_message
from porter.task import Task

UPSTREAM = git.Actor("upstream", "dev@example.org")
KERNEL = "csrc/metadata.cpp"
TABLE = "configs/tuned_fmoe.csv"
KEY_LINE = f"/sgl-workspace/engine/{KERNEL}:1:10: fatal error: cuda_runtime.h: No such file or directory"
WARNING = "[aiter] [fused_moe] using 2stage default for (256, 1, 6144, 2048, 256, 8)"
DRAFT_3 = {
    "speculative-algorithm": "EAGLE",
    "speculative-num-steps": 3,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 4,
}
DRAFT_5 = {**DRAFT_3, "speculative-num-steps": 5, "speculative-num-draft-tokens": 6}
BASE_FLAGS = {"tp-size": 8, "kv-cache-dtype": "auto", **dict.fromkeys(DRAFT_3)}


def task_data(engine: str = "sglang", **outputs) -> dict:
    launch = engine_named(engine).launch
    return {
        "name": "demo",
        "model": {"id": "org/Model-MXFP4", "path": "/m", "overlay": False},
        "hardware": {"gpu": "MI355X", "count": 8},
        "sandbox": {"kind": "docker", "image": "lmsysorg/sglang-rocm:v0.5.20-rocm720-mi35x", "devices": ["/dev/kfd"]},
        "repos": [{"name": "engine", "path": "/sgl-workspace/engine", "upstream": "https://example.org/engine.git"}],
        "serve": {"command": launch, "engine": engine, "flags": BASE_FLAGS},
        "checks": {
            "quality": [
                {
                    "name": "gsm8k",
                    "kind": "gsm8k",
                    "dataset": "builtin:twin-gsm8k",
                    "reference": 0.96,
                    "tolerance": 0.03,
                }
            ],
            "single_stream": {"input_tokens": 10000, "output_tokens": 256, "target_output_tok_s": 720},
            "throughput": {
                "workload": {"input_tokens": 2000, "output_tokens": 64, "cache_hit_rate": 0.6, "duration_s": 3},
                "rps": [8, 12, 16],
                "slo": {"ttft_s": 0.5, "percentile": 99},
                "metric": "output_throughput",
                "target_tok_s_per_node": 780,
            },
        },
        "tune": [{"name": "moe-fp4", "command": "python3 -m engine.tune_moe --experts 256 --topk 8"}],
        "outputs": outputs,
    }


def sweep(knee: float, per_rps: float, levels: list[float], fingerprint: str) -> dict:
    rows = []
    for rate in levels:  # in measurement order: the bisection's levels come after the grid's
        ttft = 300 * rate / knee if rate <= knee else 520 + 40 * (rate - knee)
        rows.append(
            {
                "rps": rate,
                "offered": int(rate * 4),
                "passed": rate <= knee,
                "output_throughput": per_rps * min(rate, knee) * 8,
                "p99_ttft_ms": ttft,
            }
        )
    return {
        "levels": rows,
        "knee_rps": knee,
        "output_throughput_per_node": per_rps * knee * 8,
        "fingerprint": fingerprint,
    }


def quality(score: float) -> dict:
    return {
        "score": score,
        "ci_low": score - 0.03,
        "ci_high": min(score + 0.015, 1),
        "n": 200,
        "passed": True,
        "reference": 0.96,
    }


class PreparedRun:
    """Builds the run step by step, as a run would have written it; `advance` adds a later step."""

    def __init__(self, tmp_path: Path, engine: str = "sglang", **outputs):
        self.tree, self.run_dir = tmp_path / "tree", tmp_path / "runs" / "demo-run"
        self.run_dir.mkdir(parents=True)
        (self.run_dir / "logs").mkdir()
        self.upstream = self._image_tree()
        self.tracked = TrackedRepo("engine", self.tree, "demo-run")
        self.repo_state = self.tracked.begin()
        task = Task.model_validate(task_data(engine, **outputs))
        (self.run_dir / "task.yaml").write_text(yaml.safe_dump(task.model_dump(mode="json"), sort_keys=False))
        self.state = RunState("demo-run", "task.yaml", dict(BASE_FLAGS), dict(BASE_FLAGS), {"engine": self.repo_state})
        self.transcript = Transcript(self.run_dir / "transcript.jsonl", lambda text: text)
        self.metrics = (self.run_dir / "metrics.jsonl").open("a", encoding="utf-8")
        image = {"image": "lmsysorg/sglang-rocm:v0.5.20-rocm720-mi35x", "image_id": "sha256:" + "ab" * 32}
        stack = {"rocm": "7.2.0-43", "aiter_commit": "c16d44b93a528b2a4bfd6d8d3409116d465872a9"}
        (self.run_dir / "environment.json").write_text(json.dumps({"sandbox": image, "stack": stack}))

    def _image_tree(self) -> str:
        self.tree.mkdir()
        repo = git.Repo.init(self.tree)
        (self.tree / "csrc").mkdir()
        (self.tree / "configs").mkdir()
        (self.tree / KERNEL).write_text("#include <cuda_runtime.h>\nint main() { return 0; }\n")
        (self.tree / TABLE).write_text("model_dim,inter_dim,expert,topk,kernel\n")
        repo.index.add([KERNEL, TABLE])
        repo.index.commit("upstream: the kernel", author=UPSTREAM, committer=UPSTREAM)
        (self.tree / "build.cfg").write_text("arch = gfx950\n")  # the image's own, uncommitted change
        return repo.head.commit.hexsha

    def config(self, flags: dict) -> str:
        tree = git.Repo(self.tree).head.commit.tree.hexsha
        return self.state.remember(Configuration({"engine": tree}, dict(flags), "sha256:" + "ab" * 32))

    def measure(self, step: int, fingerprint: str, key: str, value: float, result: dict, pending: bool) -> None:
        self.state.samples.append(Sample(key, fingerprint, "h", step, value, result))
        record = {
            "step": step,
            "check": key,
            "pending": pending,
            "config": fingerprint,
            "cached": False,
            "flags": self.state.configs[fingerprint].flags,
            "result": result,
        }
        self.metrics.write(json.dumps(record) + "\n")
        self.metrics.flush()

    def serve(self, step: int, fingerprint: str, log: str, lines: list[str], crash: str | None = None) -> None:
        (self.run_dir / log).write_text("\n".join(lines) + "\n")
        key_line = KEY_LINE if crash else (WARNING if any(WARNING in line for line in lines) else "")
        finding = {
            "category": crash or "slow_fallback_perf",
            "key_line": key_line,
            "implicated": f"/sgl-workspace/engine/{KERNEL}:1" if crash else "fused_moe",
        }
        facts = {
            "tool": "serve",
            "healthy": crash is None,
            "seconds": 40.0,
            "log": log,
            "fingerprint": fingerprint,
            "crash_class": crash,
            "key_line": key_line,
            "stage": 2 if crash else None,
            "findings": [finding] if key_line else [],
        }
        self.transcript.record("tool_result", step=step, id=f"s{step}", name="serve", ok=True, content="", facts=facts)

    def say(self, step: int, text: str, tool: str, **arguments) -> None:
        call = {"id": f"c{step}", "name": tool, "arguments": arguments}
        self.transcript.record("model_reply", step=step, reply={"text": text, "tool_calls": [call]})
        self.transcript.record("tool_call", step=step, id=f"c{step}", name=tool, arguments=arguments)

    def commit(self, path: str, text: str, summary: str) -> str:
        (self.tree / path).write_text(text)
        message = commit_message(summary, "failed", "why", path, "evidence")
        return self.tracked.accept(self.repo_state, message)

    def build(self) -> PreparedRun:
        """Steps 1-12: baseline, a tuned table kept for throughput, the guard kept as a crash fix, depth 5 reverted."""
        base = self.config(BASE_FLAGS)
        self.state.accepted_config = base
        self.serve(
            1, base, "logs/serve-001.log", ["Load weight end", WARNING, "The server is fired up and ready to roll!"]
        )
        self.measure(2, base, "quality:gsm8k", 0.975, quality(0.975), False)
        for step, value in ((3, 254.0), (3, 253.6)):
            self.measure(step, base, "single_stream", value, {"output_tok_s": value}, False)
        for value, knee, levels in ((415.0, 10.5, [8, 12, 10, 11, 10.5]), (405.0, 11.0, [8, 12, 10, 11, 11.5])):
            self.measure(4, base, "throughput", value, sweep(knee, value / knee / 8, levels, base), False)
        self.say(
            5,
            "the engine has no tuned config for the fp4 MoE shape and falls back to a slow path: run moe-fp4",
            "tune",
            name="moe-fp4",
        )
        self.transcript.record(
            "tool_result",
            step=5,
            id="c5",
            name="tune",
            ok=True,
            content="",
            facts={"tool": "tune", "name": "moe-fp4", "changed": {"engine": [TABLE]}},
        )
        tuned = self.commit(TABLE, "model_dim,inter_dim,expert,topk,kernel\n6144,2048,256,8,ck2stages\n", "Add tuned")
        after = self.config(BASE_FLAGS)
        for value in (484.0, 484.3):
            result = sweep(14.5, value / 14.5 / 8, [8, 12, 16, 14, 15, 14.5], after)
            self.measure(7, after, "throughput", value, result, True)
        gain = Comparison(
            "throughput", "output_throughput_per_node", [415.0, 405.0], [484.0, 484.3], 410.0, 484.15,
            change=0.1809, spread=0.045, threshold=0.136, minimum=0.03,
        )  # fmt: skip
        self.state.attempts.append(
            Attempt(
                8,
                "Add the tuned config written by moe-fp4",
                "kept",
                "gain",
                "gain",
                after,
                {"engine": tuned},
                comparisons=[gain],
                moves=[f"engine: {TABLE}"],
            )
        )
        self.say(8, "keep it", "accept", summary="Add the tuned config written by moe-fp4", why="moe-fp4 is faster")
        self.state.accepted_config = after
        self.say(9, "[playbook:search] try {'speculative-num-steps': 5} for single_stream", "set_flags", flags=DRAFT_5)
        crashed = self.config({**BASE_FLAGS, **DRAFT_5})
        lines = [
            "Load weight end",
            "[aiter] start build [metadata]",
            "/opt/rocm/bin/hipcc -DUSE_ROCM=1 metadata.cpp",
            KEY_LINE,
            "    1 | #include <cuda_runtime.h>",
            "compilation terminated.",
        ]
        self.serve(10, crashed, "logs/serve-002.log", lines, crash="missing_rocm_guard")
        self.say(
            11,
            "[playbook:guard] guard <cuda_runtime.h> with USE_ROCM",
            "edit_file",
            path=f"/sgl-workspace/engine/{KERNEL}",
        )
        guard = "#ifdef USE_ROCM\n#include <hip/hip_runtime.h>\n#else\n#include <cuda_runtime.h>\n#endif\n"
        guarded = self.commit(KERNEL, guard + "int main() { return 0; }\n", "Fix missing_rocm_guard: guard the include")
        fixed = self.config({**BASE_FLAGS, **DRAFT_5})
        self.serve(12, fixed, "logs/serve-003.log", ["The server is fired up and ready to roll!"])
        for value in (651.0, 647.0):
            self.measure(12, fixed, "single_stream", value, {"output_tok_s": value}, True)
        self.say(12, "measured", "accept", summary="deeper draft", why="try {'speculative-num-steps': 5}")
        self.state.attempts.append(
            Attempt(
                12,
                "fix missing_rocm_guard",
                "kept",
                "crash fix",
                "crash_fix",
                fixed,
                {"engine": guarded},
                crash_class="missing_rocm_guard",
            )
        )
        flat = Comparison(
            "single_stream", "output_tok_s", [649.0, 650.0], [651.0, 647.0], 649.5, 649.0,
            change=-0.0008, spread=0.027, threshold=0.082, minimum=0.03,
        )  # fmt: skip
        self.state.attempts.append(
            Attempt(
                12,
                "reverted: no gain",
                "reverted",
                "no improvement beyond noise",
                "no_gain",
                flags={"speculative-num-steps": 5, "speculative-num-draft-tokens": 6},
                comparisons=[flat],
            )
        )
        self.state.step = 12
        self.save()
        return self

    def advance(self) -> None:
        """Step 13: the fp8 KV cache measured on single stream (a later step of the same run)."""
        flags = {**BASE_FLAGS, "kv-cache-dtype": "fp8_e4m3"}
        self.state.flags = flags
        self.say(
            13,
            "try {'kv-cache-dtype': 'fp8_e4m3'} for single_stream",
            "set_flags",
            flags={"kv-cache-dtype": "fp8_e4m3"},
        )
        self.measure(13, self.config(flags), "single_stream", 861.0, {"output_tok_s": 861.0}, True)
        self.state.step = 13
        self.save()

    def finish(self) -> None:
        self.state.finished = "every target is met by the accepted configuration"
        self.save()

    def save(self) -> None:
        write_state(self.run_dir, self.state.to_dict(), lambda text: text)
