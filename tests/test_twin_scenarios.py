"""Every scenario variant of the twin (sandboxes/twin/scenarios/): its defect reproduces with its key log
line when served with the scenario's flags, and its known fix (a patch, a flag change or a tuning command,
kept in scenario.json) makes it start clean, on sglang's front and, for the scenarios that say how (their "vllm"
entry), on vLLM's. Uses the --local layout (no Docker) and the scenario's device served from the host, to keep the
suite short; the flagship's defects are tested in the image by test_twin_docker.py."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import free_port
from twin_tasks import QUICK_SCALE, TWIN_TAG

from porter.checks.quality import QualityCheckSpec, run_quality
from porter.task import load_task

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "sandboxes" / "twin"
sys.path.insert(0, str(TWIN / "device"))
sys.path.insert(0, str(TWIN))
import layout  # noqa: E402
from twin_device.host import running_device  # noqa: E402

SCENARIOS = sorted(path.name for path in (TWIN / "scenarios").iterdir() if (path / "scenario.json").exists())


pytestmark = pytest.mark.usefixtures("needs_gxx")


# How each front crashes at start-up (sglang's scheduler processes, vLLM's API server after its engine core)
CRASH_BANNERS = {"sglang": "Received sigquit from a child process", "vllm": "Engine core initialization failed"}


class LocalTwin:
    def __init__(self, root: Path, scenario: str, front: str = "sglang"):
        self.root = root
        self.front = front
        self.tree = root / layout.repo_dir(front).lstrip("/")
        self.model = root / layout.model_dir(scenario).lstrip("/")
        self.environment = {"PATH": "/usr/bin:/bin", "HOME": str(root), "ROCM_PATH": str(root / "opt/rocm")}
        self.environment["TWIN_TIME_SCALE"] = str(QUICK_SCALE)
        if front == "vllm":
            self.environment["PYTHONPATH"] = str(self.tree.parent)

    def command(self, port: int, flags: str) -> list[str]:
        if self.front == "vllm":
            front = ["-m", "vllm.entrypoints.cli.main", "serve", str(self.model), "--tensor-parallel-size", "8"]
        else:
            front = ["-m", "twin.launch_server", "--model-path", str(self.model), "--tp", "8"]
        return [sys.executable, *front, "--port", str(port), *shlex.split(flags)]

    def run_to_exit(self, flags: str) -> tuple[int, str]:
        result = subprocess.run(
            self.command(free_port(), flags),
            cwd=self.tree,
            env=self.environment,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return result.returncode, result.stdout + result.stderr

    def start(self, flags: str, log: Path) -> tuple[subprocess.Popen, str]:
        port = free_port()
        with open(log, "w") as handle:
            process = subprocess.Popen(
                self.command(port, flags), cwd=self.tree, env=self.environment, stdout=handle, stderr=subprocess.STDOUT
            )
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    return process, url
            except OSError:
                time.sleep(0.2)
        process.kill()
        raise AssertionError(f"server did not start with {flags!r}:\n{log.read_text()[-3000:]}")

    def sh(self, command: str) -> str:
        result = subprocess.run(
            command, shell=True, cwd=self.tree, env=self.environment, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout


@pytest.fixture
def scenario_twin(request, tmp_path: Path):
    """(scenario name, front): the scenario laid out for that front, its device running; its spec as that front
    reproduces and fixes it."""
    name, front = request.param if isinstance(request.param, tuple) else (request.param, "sglang")
    root = tmp_path / "root"
    command = [str(TWIN / "build.sh"), "--local", str(root), "--scenario", name, "--front", front]
    subprocess.run(command, check=True, capture_output=True)
    with running_device(root / "run" / "twin-device", name):
        yield LocalTwin(root, name, front), front_spec(name, front)


def front_spec(name: str, front: str) -> dict:
    """The scenario's spec on a front: its "vllm" entry replaces the flags and fix it gives for sglang's."""
    spec = _spec(name)
    return spec | (spec.get("vllm", {}) if front == "vllm" else {}) | {"name": name}


def apply_fix(twin: LocalTwin, spec: dict) -> str:
    """The flags to serve with after the scenario's known fix is applied (its environment, if any, set)."""
    fix = spec["fix"]
    twin.environment.update(fix.get("env") or {})
    if "patch" in fix:
        patch = (TWIN / "scenarios" / spec["name"] / fix["patch"]).resolve()
        checkpoint = "a/config.json" in patch.read_text()
        twin.sh(f"{'cd ' + str(twin.model) + ' && ' if checkpoint else ''}git apply {patch}")
    if "command" in fix:
        twin.sh(fix["command"])
    return fix.get("flags", spec["reproduce_flags"] if "flags" not in fix else "")


def _spec(name: str) -> dict:
    return json.loads((TWIN / "scenarios" / name / "scenario.json").read_text())


CRASHES = [s for s in SCENARIOS if _spec(s)["key_line"]]
CRASHES_ON_FRONTS = [(s, "sglang") for s in CRASHES] + [(s, "vllm") for s in CRASHES if "vllm" in _spec(s)]
QUALITY_TRAPS = [s for s in SCENARIOS if _spec(s)["category"] == "quality_regression"]
PERF_TRAPS = [s for s in SCENARIOS if _spec(s)["category"] == "perf_trap"]


@pytest.mark.parametrize("scenario_twin", CRASHES_ON_FRONTS, indirect=True, ids="-".join)
def test_scenario_defect_reproduces_and_its_fix_starts_clean(scenario_twin, tmp_path: Path) -> None:
    twin, spec = scenario_twin
    if spec["category"] == "slow_fallback_perf":
        process, _ = twin.start(spec["reproduce_flags"], tmp_path / "before.log")
        process.terminate()
        assert spec["key_line"] in (tmp_path / "before.log").read_text()
    else:
        code, log = twin.run_to_exit(spec["reproduce_flags"])
        assert code == 1, log[-2000:]
        assert spec["key_line"] in log
        assert CRASH_BANNERS[twin.front] in log
    flags = apply_fix(twin, spec)
    process, _ = twin.start(flags, tmp_path / "after.log")
    process.terminate()
    after = (tmp_path / "after.log").read_text()
    assert spec["key_line"] not in after
    assert "using 2stage default" not in after


@pytest.mark.parametrize("scenario_twin", QUALITY_TRAPS, indirect=True)
def test_quality_trap_scores_below_the_gate_while_the_legitimate_flag_passes(scenario_twin, tmp_path: Path) -> None:
    twin, spec = scenario_twin
    gsm8k = QualityCheckSpec(
        name="gsm8k",
        kind="gsm8k",
        dataset="builtin:twin-gsm8k",
        samples=120,
        few_shot=5,
        max_tokens=128,
        reference=0.96,
        tolerance=0.03,
    )
    trap, trap_url = twin.start(spec["reproduce_flags"], tmp_path / "trap.log")
    try:
        trapped = run_quality(trap_url, gsm8k)
    finally:
        trap.terminate()
    good, good_url = twin.start(apply_fix(twin, spec), tmp_path / "good.log")  # a flag, or a patch (silent defects)
    try:
        legitimate = run_quality(good_url, gsm8k)
    finally:
        good.terminate()
    assert not trapped.passed and legitimate.passed
    assert legitimate.score - trapped.score > 0.08


@pytest.mark.parametrize("task_file", sorted((ROOT / "tasks").glob("twin_*.yaml")), ids=lambda path: path.stem)
def test_twin_task_files_validate_and_name_their_image(task_file: Path) -> None:
    task = load_task(task_file)
    assert task.sandbox.image.startswith(f"{TWIN_TAG}:")
    name = task.sandbox.image.rsplit(":", 1)[1]
    scenario = name.removesuffix("-vllm")  # a --front vllm image of the scenario
    assert scenario == "glm52-day0" or scenario in SCENARIOS
    assert task.sandbox.network == "none" and not task.sandbox.devices
    front = "vllm" if name.endswith("-vllm") else "sglang"
    assert task.serve.engine == front
    assert task.repos[0].path == "/" + layout.repo_dir(front).lstrip("/")  # where the twin lays the front out
