"""How long does serve's reduced start-up take to judge a fix, against a full start-up? Twin figures, not hardware.

Runs a scripted bring-up of GLM-5.2 day 0 on the twin (a real Docker sandbox) at the twin's clock given: the MTP
depth whose draft load crashes on the checkpoint's tensor (reduced: cannot judge), the Quark exclude fix, the full
start-up whose metadata kernel fails to build, serve reduced on that configuration (the crash reproduces), the ROCm
guard, serve reduced (the verdict: patch to verdict), then the full start-up of the fixed configuration. Prints each
start-up, then one JSON object: the full start-up's seconds, the patch-to-verdict seconds and their ratio.
Usage: PORTER_TWIN_TAG=... python3 benchmarks/reduced_start.py [--time-scale 1.0]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from twin_tasks import SPEC_516, build_twin, call, facts, fast_twin_task, fix, run_scripted, tool_results  # noqa: E402

SCRIPT = [
    call("set_flags", flags=SPEC_516),
    call("serve"),
    call("serve", reduced=True),
    fix("a-quark-exclude-mtp.patch"),
    call("serve"),
    call("serve", reduced=True),
    fix("b-rocm-guard-metadata.patch"),
    call("serve", reduced=True),
    call("serve"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=1.0)
    scale = parser.parse_args().time_scale
    build_twin()
    ctx = run_scripted(fast_twin_task(Path(tempfile.mkdtemp(prefix="reduced-start-")), time_scale=scale), SCRIPT)
    starts = [facts(result) for result in tool_results(ctx.run_dir) if result["name"] == "serve"]
    for start in starts:
        kind = "reduced" if start.get("reduced") else "full"
        outcome = start.get("outcome") or start.get("crash_class") or "healthy"
        print(f"{kind:8} {start['seconds']:7.1f} s  {outcome:20} {start.get('verdict', '')[:70]}")
    full, verdict = starts[-1]["seconds"], starts[-2]["seconds"]
    print(json.dumps({"time_scale": scale, "full_s": full, "patch_to_verdict_s": verdict, "ratio": verdict / full}))


if __name__ == "__main__":
    main()
