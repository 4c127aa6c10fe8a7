"""Benchmark a twin scenario's family on either front: knee and single-stream speed per parallel layout.

Lays the scenario out with `sandboxes/twin/build.sh --local` (its family's checkpoint, on sglang's front or vLLM's),
applies the named fixes (sandboxes/twin/fixes) and, with --tuned, runs the scenario's tuning command, then serves
each configuration and measures it the way benchmarks/twin_perf.py measures the flagship (the same sweep: the
flagship task's workload, rates, TTFT limit and bisection at this process's clock; single stream over a 10k-token
context; start-up on a fresh node and again). Prints one line per configuration and, last, one JSON object.
Twin numbers, not MI355X figures.
Usage: TWIN_TIME_SCALE=0.25 python3 benchmarks/twin_family_perf.py --scenario corvid3-day0 --front vllm
    --fixes d-rocm-guard-fp8-quant --tuned --configs tp8ep,tp4dp2ep
"""

import argparse
import asyncio
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
TWIN = ROOT / "sandboxes" / "twin"
sys.path.insert(0, str(BENCHMARKS))
sys.path.insert(0, str(TWIN))
import layout  # noqa: E402
import twin_perf  # noqa: E402
from twin_device.host import running_device  # noqa: E402

MTP3 = {
    "sglang": "--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 4",
    "vllm": """--speculative-config '{"method": "mtp", "num_speculative_tokens": 3}'""",
}
LAYOUTS = {  # name -> flags per front (sglang's --ep-size keeps experts whole, as vLLM's --enable-expert-parallel)
    "tp8ep": {"sglang": "--tp 8 --ep-size 8", "vllm": "-tp 8 -ep"},
    "tp4dp2": {"sglang": "--tp 4 --dp 2", "vllm": "-tp 4 -dp 2"},
    "tp4dp2ep": {"sglang": "--tp 4 --dp 2 --ep-size 4", "vllm": "-tp 4 -dp 2 -ep"},
    "tp2dp4ep": {"sglang": "--tp 2 --dp 4 --ep-size 2", "vllm": "-tp 2 -dp 4 -ep"},
}


def config_flags(name: str, front: str) -> list[str]:
    """`LAYOUT[-mtp3][-fp8kv]` as the front's flags."""
    layout_name, *extras = name.split("-")
    flags = LAYOUTS[layout_name][front]
    if "mtp3" in extras:
        flags += " " + MTP3[front]
    if "fp8kv" in extras:
        flags += " --kv-cache-dtype fp8_e4m3"
    return shlex.split(flags)


def prepare(root: Path, args: argparse.Namespace) -> Path:
    """The laid-out tree with the fixes applied and, with --tuned, the scenario's tuning command run."""
    command = [str(TWIN / "build.sh"), "--local", str(root), "--scenario", args.scenario, "--front", args.front]
    subprocess.run(command, check=True, capture_output=True)
    tree = root / layout.repo_dir(args.front).lstrip("/")
    for fix in filter(None, args.fixes.split(",")):
        subprocess.run(["git", "apply", str(TWIN / "fixes" / f"{fix}.patch")], cwd=tree, check=True)
    if args.tuned:
        spec = json.loads((TWIN / "scenarios" / args.scenario / "scenario.json").read_text())
        environment = {**os.environ, "TWIN_DEVICE_SOCKET": str(root / "run" / "twin-device" / "device.sock")}
        subprocess.run(shlex.split(spec["fix"]["command"]), cwd=tree, env=environment, check=True, capture_output=True)
    return tree


def server_command(args: argparse.Namespace, root: Path, flags: list[str], port: int) -> list[str]:
    model = str(root / layout.model_dir(args.scenario).lstrip("/"))
    if args.front == "vllm":
        return [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model, "--port", str(port), *flags]
    return [sys.executable, "-m", "twin.launch_server", "--model-path", model, "--port", str(port), *flags]


async def measure(name: str, args: argparse.Namespace, port: int) -> dict:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        with running_device(root / "run" / "twin-device", args.scenario):
            tree = prepare(root, args)
            flags = config_flags(name, args.front)
            environment = {**os.environ, "TWIN_JIT_CACHE": str(root / "jit"), "PYTHONPATH": str(tree.parent)}

            def start(root: Path, tree: Path, flags: list[str], port: int, log: Path) -> subprocess.Popen:
                with log.open("ab") as out:
                    command = server_command(args, root, flags, port)
                    return subprocess.Popen(command, cwd=tree, env=environment, stdout=out, stderr=subprocess.STDOUT)

            return await twin_perf._measure_on(name, args, port, root, tree, flags, start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="corvid3-day0")
    parser.add_argument("--front", default="sglang", choices=layout.FRONTS)
    parser.add_argument("--fixes", default="d-rocm-guard-fp8-quant", help="comma-separated names from fixes/")
    parser.add_argument("--tuned", action="store_true", help="run the scenario's tuning command first")
    parser.add_argument("--configs", default="tp8ep,tp4dp2ep,tp2dp4ep,tp4dp2ep-mtp3-fp8kv")
    parser.add_argument("--level-seconds", type=float, help="each level's length (default: the flagship's)")
    parser.add_argument("--rps", help="comma-separated levels at this clock (default: the flagship's, converted)")
    args = parser.parse_args()
    args.workload = twin_perf.flagship_sweep()
    if args.level_seconds:
        args.workload["level_seconds"] = args.level_seconds
    if args.rps:  # a faster family's knee can lie above the flagship's levels
        args.workload["levels"] = [float(rate) for rate in args.rps.split(",")]
    names = args.configs.split(",")
    results = [asyncio.run(measure(name, args, 31600 + index)) for index, name in enumerate(names)]
    summary = {"benchmark": "twin_family_perf", "scenario": args.scenario, "front": args.front, "tuned": args.tuned}
    print(json.dumps(summary | {"results": results}))


if __name__ == "__main__":
    main()
