"""Facts with no package of their own (image layouts, aiter's tuned-config lookup), pinned in porter/upstream_facts.py,
and porter's use of them: the real tasks patch the trees where the images install the engines, and the MoE tune
command writes rows under the keys aiter looks up.

What a PyPI package can confirm is checked against it: the vLLM 0.25.1 wheel installs one top-level `vllm` package
(so the image's copy is `<dist-packages>/vllm`) and is built for any CPython >= 3.8 (abi3), so the 3.12 of the image
can import it. The layout itself and aiter (not on PyPI) are the pins' word, with the upstream file and commit.
"""

from __future__ import annotations

import csv
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
import upstream_wheels

from porter import upstream_facts
from porter.task import load_task

ROOT = Path(__file__).resolve().parents[2]
REAL_TASKS = [ROOT / "tasks" / "glm52_mi355x.yaml", ROOT / "tasks" / "glm52_mi355x_vllm.yaml"]


def test_the_vllm_wheel_is_one_top_level_package_for_any_cpython3(wheels):
    wheel = wheels["vllm"]
    tops = {member.split("/")[0] for member in upstream_wheels.wheel_members(wheel) if "/" in member}
    assert tops == {"vllm", f"vllm-{upstream_wheels.pinned()['vllm'][0]}.dist-info"}
    assert "-cp38-abi3-" in wheel.name
    pinned = upstream_facts.layout_for("vllm/vllm-openai-rocm:v0.25.1", "vllm")
    assert re.fullmatch(r"/usr/local/lib/python3\.\d+/dist-packages/vllm", pinned.path)


@pytest.mark.parametrize("path", REAL_TASKS, ids=lambda p: p.stem)
def test_the_real_tasks_patch_where_their_image_installs_the_engine(path):
    task = load_task(path, environ={})
    for repo in task.repos:
        pinned = upstream_facts.layout_for(task.sandbox.image, repo.name)
        assert pinned is not None, f"{path.name}: no pinned layout for {repo.name} in {task.sandbox.image}"
        assert repo.path == pinned.path, f"{path.name}: {repo.name} at {repo.path}; the image has it at {pinned.path}"


def test_validate_names_the_installed_vllm_package():
    result = subprocess.run(
        [sys.executable, "-m", "porter", "validate", str(REAL_TASKS[1])],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "# repo vllm: /usr/local/lib/python3.12/dist-packages/vllm is where" in result.stdout + result.stderr


def test_aiter_pads_m_to_a_power_of_two_then_to_its_tiers():
    # aiter/fused_moe.py @ AITER_COMMIT: nextPow2 below 32768, then the largest tier not above M
    expected = {1: 1, 2: 2, 3: 4, 1000: 1024, 1024: 1024, 20000: 32768, 32768: 32768, 40000: 32768, 200000: 131072}
    assert {m: upstream_facts.aiter_padded_m(m) for m in expected} == expected


def tune_rows(command: str, folder: Path) -> list[dict]:
    """The untuned CSV the task's tune command writes before it runs the tuner: its shell part, run by bash with the
    file redirected into `folder`."""
    writes = re.match(r"(?s)(.*)>\s*(\S+\.csv)\s*&&", command)
    assert writes, command
    untuned = folder / "untuned.csv"
    subprocess.run(["bash", "-c", f"{writes[1]} > {untuned}"], check=True, timeout=30)
    return list(csv.DictReader(io.StringIO(untuned.read_text())))


def moe_tune(task_path: Path):
    task = load_task(task_path, environ={})
    return task, next(spec for spec in task.tune if "gemm_moe_tune.py" in spec.command)


def test_the_tune_command_writes_aiters_untuned_columns_at_looked_up_keys(tmp_path: Path):
    _, spec = moe_tune(REAL_TASKS[0])
    rows = tune_rows(spec.command, tmp_path)
    assert rows and list(rows[0]) == upstream_facts.AITER_FMOE_UNTUNED_COLUMNS
    for row in rows:
        token = int(row["token"])
        assert upstream_facts.aiter_padded_m(token) == token, f"aiter never looks up token={token}"


def test_the_tune_command_covers_every_padded_m_the_engine_asks_for(tmp_path: Path):
    """Issue #30 item 2: prefill and batched decode are looked up under their own padded M, so the command tunes
    every padded M up to the largest batch a step runs."""
    task, spec = moe_tune(REAL_TASKS[0])
    largest_batch = int(task.serve.flags["chunked-prefill-size"])  # a prefill chunk is the largest M per step
    wanted = {upstream_facts.aiter_padded_m(m) for m in range(1, largest_batch + 1)}
    written = {int(row["token"]) for row in tune_rows(spec.command, tmp_path)}
    assert wanted <= written, f"no tuned row for padded M {sorted(wanted - written)}"
