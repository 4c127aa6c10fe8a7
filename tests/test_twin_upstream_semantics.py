"""The twin follows upstream's semantics where porter once assumed them (issue 30): aiter's tuned fused-MoE lookup by
padded M and the tuner that writes one row per size, sglang's DSA backend flags and the top-k v2 switch. Runs the
engine of the --local layout against a device served from the host; no Docker. (The Quark exclude matcher against
sglang's own code: tests/conformance/test_conformance_twin_exclude.py.)

Pinned from upstream, read once (cited, not fetched here): aiter `aiter/fused_moe.py` at c16d44b9 (get_padded_M:
the next power of two below 32768, then the tiers 32768 and 131072; the key leads with gfx); sglang 0.5.20
`arg_groups/fields/exec_.py` (the DSA backend choices), `arg_groups/overrides.py` (triton by default on ROCm, the
"Set DSA backends for ..." line) and `environ.py` (SGLANG_OPT_USE_TOPK_V2, an EnvBool).
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "sandboxes" / "twin"
sys.path.insert(0, str(TWIN / "engine"))
sys.path.insert(0, str(TWIN / "device"))

from twin import moe  # noqa: E402
from twin_device.host import running_device  # noqa: E402

pytestmark = pytest.mark.usefixtures("needs_gxx")
SHAPE = "--model-dim 6144 --experts 256 --topk 8"
CLOCK = 0.01  # these launches check start-up decisions only, never a duration


@pytest.fixture(scope="module")
def layout(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("twin-semantics")
    subprocess.run([str(TWIN / "build.sh"), "--local", str(root)], check=True, capture_output=True)
    with running_device(root / "run" / "twin-device"):
        yield root


def run(layout: Path, command: list[str], **environment: str) -> subprocess.CompletedProcess:
    """A command in the engine's tree, with the clock quick and the device of the layout."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(layout), "TWIN_TIME_SCALE": str(CLOCK), **environment}
    return subprocess.run(
        [sys.executable, *command],
        cwd=layout / "sgl-workspace/twin",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def launch_until_ready_or_exit(layout: Path, *flags: str, **environment: str) -> str:
    """The start-up log of a launch: it exits on a crash; a healthy one is stopped once it is ready."""
    model = str(layout / "models/glm-5.2-mxfp4")
    code = (
        "import sys, twin.engine as e, twin.launch_server as s\n"
        "async def ready(engine, front_args):\n"  # start-up only: no HTTP server
        "    print('READY', engine.server_info(front_args)['moe_tuned'])\n"
        "e.serve = ready\n"
        "sys.exit(s.main(sys.argv[1:]))"
    )
    result = run(layout, ["-c", code, "--model-path", model, "--tp", "8", *flags], **environment)
    return result.stdout + result.stderr


@pytest.mark.parametrize(
    ("m", "padded"),
    [(1, 1), (3, 4), (1000, 1024), (1500, 2048), (16384, 16384), (20000, 32768), (40000, 32768), (200000, 131072)],
)
def test_padded_m_is_aiters(m: int, padded: int) -> None:
    assert moe.padded_m(m) == padded


def test_a_row_tuned_for_one_size_serves_only_that_size(layout: Path, tmp_path: Path) -> None:
    """aiter keys a config by the padded M: a row tuned at token=1 leaves M=2 and every prefill on the default
    kernels, and the log names the key it missed, gfx first."""
    table = tmp_path / "tuned.csv"
    tuned = run(
        layout, ["-m", "twin.tune_moe", *SHAPE.split(), "--inter-dim", "256", "--tokens", "1", "--output", str(table)]
    )
    assert tuned.returncode == 0, tuned.stderr
    probe = (
        "import sys; from pathlib import Path; from twin import moe\n"
        "selector = moe.Selector(moe.MoeShape(6144, 256, 256, 8), Path(sys.argv[1]))\n"
        "print([selector.kernel(m) != '' for m in (1, 2, 1500)])"
    )
    result = run(layout, ["-c", probe, str(table)])
    assert result.stdout.splitlines()[-1] == "[True, False, False]", result.stdout + result.stderr
    missed = "[fused_moe] using 2stage default for ('gfx950', 256, 2048, 6144, 256, 256, 8, 'ActivationType.Silu'"
    assert missed in result.stdout


def test_the_tuner_writes_one_row_per_size_and_width_it_is_given(layout: Path, tmp_path: Path) -> None:
    table = tmp_path / "tuned.csv"
    table.write_text((layout / "sgl-workspace/twin/twin/configs/tuned_fmoe.csv").read_text())
    before = len(list(csv.DictReader(table.open())))
    command = ["-m", "twin.tune_moe", *SHAPE.split(), "--inter-dim", "256,512", "--tokens", "1,4,2048"]
    assert run(layout, [*command, "--output", str(table)]).returncode == 0
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == before + 6 and list(rows[0])[:3] == ["gfx", "cu_num", "token"]
    written = {(row["token"], row["inter_dim"]) for row in rows if row["model_dim"] == "6144"}
    assert written == {(token, inter) for token in ("1", "4", "2048") for inter in ("256", "512")}
    again = run(layout, [*command, "--output", str(table)])  # a size tuned again replaces its row
    assert again.returncode == 0 and len(list(csv.DictReader(table.open()))) == before + 6
    refused = run(layout, ["-m", "twin.tune_moe", *SHAPE.split(), "--inter-dim", "256", "--tokens", "0"])
    assert refused.returncode == 2 and "positive integers" in refused.stderr


def test_dsa_backends_default_to_triton_and_take_the_recipe_flags(layout: Path) -> None:
    default = launch_until_ready_or_exit(layout)
    assert "Set DSA backends for auto KV Cache: prefill=triton, decode=triton." in default and "READY" in default
    recipe = launch_until_ready_or_exit(layout, "--dsa-prefill-backend", "tilelang", "--dsa-decode-backend", "tilelang")
    assert "prefill=tilelang, decode=tilelang." in recipe and "READY" in recipe
    cuda_only = launch_until_ready_or_exit(layout, "--dsa-decode-backend", "flashmla_kv")
    assert "--dsa-decode-backend flashmla_kv is not supported on ROCm/HIP" in cuda_only
    unknown = launch_until_ready_or_exit(layout, "--dsa-decode-backend", "tilelang2")
    assert "invalid choice: 'tilelang2'" in unknown


def test_the_top_k_v2_kernel_is_off_on_rocm_unless_asked_for_and_does_not_build_there(layout: Path) -> None:
    """Its JIT source is CUDA-only: asked for (SGLANG_OPT_USE_TOPK_V2=true), start-up fails building it on gfx950."""
    assert "start build [topk_v2]" not in launch_until_ready_or_exit(layout)
    built = launch_until_ready_or_exit(layout, SGLANG_OPT_USE_TOPK_V2="true")
    assert "fatal error: cooperative_groups.h: No such file or directory" in built
    assert "Error building extension 'topk_v2'" in built and "READY" not in built
    assert '"maybe" is not a valid boolean value' in launch_until_ready_or_exit(layout, SGLANG_OPT_USE_TOPK_V2="maybe")


def test_start_up_looks_the_captured_decode_sizes_up(layout: Path) -> None:
    """CUDA-graph capture runs the MoE once per captured batch size (1 .. 256), each looked up padded and logged
    once; prefill sizes are looked up when a prefill runs."""
    log = launch_until_ready_or_exit(layout)
    assert "READY False" in log
    keys = [line for line in log.splitlines() if "[fused_moe] using 2stage default for" in line]
    tokens = [int(line.split("for (")[1].split(", ")[2]) for line in keys]
    assert tokens == [1, 2, 4, 8, 16, 32, 64, 128, 256]
