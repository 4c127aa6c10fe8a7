"""The twin in its Docker image: each day-0 defect reproduces with its log, each known fix (kept in
sandboxes/twin/fixes/) makes the server start, the performance directions hold over HTTP, and quality is in
band after the fixes and collapses after a careless "make the shapes fit" patch. The device runs on the host,
its socket directory bind-mounted at /run/twin-device, as a task's sandbox.services does."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest
from twin_tasks import FIXES, TWIN_TAG, running_device

from porter.checks.quality import QualityCheckSpec, run_quality

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "sandboxes" / "twin"))
from layout import model_dir  # noqa: E402

IMAGE = f"{TWIN_TAG}:glm52-day0"
PORTS = (30001, 30002, 30003, 30004)
SERVE = "python3 -m twin.launch_server --model-path /models/glm-5.2-mxfp4 --host 0.0.0.0 --tp 8"
SPEC_314 = (
    "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 4"
)
SPEC_516 = (
    "--speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 6"
)

pytestmark = pytest.mark.docker


@pytest.fixture(scope="session")
def twin_image(docker_client) -> str:
    subprocess.run([str(ROOT / "sandboxes/twin/build.sh")], check=True, capture_output=True)
    return IMAGE


class Twin:
    """One container of the twin image; servers run inside it, published on 127.0.0.1."""

    def __init__(self, docker_client, image: str, device_dir: Path):
        self.container = docker_client.containers.run(
            image,
            ["sleep", "infinity"],
            detach=True,
            remove=True,
            ports={f"{port}/tcp": ("127.0.0.1", None) for port in PORTS},
            volumes={str(device_dir): {"bind": "/run/twin-device", "mode": "rw"}},
            # the twin's clock at four times its speed: start-ups in tens of seconds, speeds still comparable
            environment={"TWIN_TIME_SCALE": "0.25"},
        )
        self.container.reload()

    def url(self, port: int) -> str:
        host_port = self.container.ports[f"{port}/tcp"][0]["HostPort"]
        return f"http://127.0.0.1:{host_port}"

    def sh(self, command: str) -> tuple[int, str]:
        result = self.container.exec_run(["sh", "-c", command], workdir="/sgl-workspace/twin")
        return result.exit_code, result.output.decode(errors="replace")

    def apply(self, fix: str) -> None:
        """Apply a known fix where it belongs: the checkpoint (config.json) or the engine tree."""
        data = (FIXES / f"{fix}.patch").read_bytes()
        workdir = "/models/glm-5.2-mxfp4" if b"a/config.json" in data else "/sgl-workspace/twin"
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            info = tarfile.TarInfo(f"{fix}.patch")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        self.container.put_archive("/tmp", archive.getvalue())
        code, output = self.sh(f"cd {workdir} && git apply /tmp/{fix}.patch")
        assert code == 0, output

    def crash(self, flags: str) -> tuple[int, str]:
        """Run a server expected to die during start-up; its exit status and whole log."""
        return self.sh(f"timeout 60 {SERVE} --port 30099 {flags} 2>&1")

    def start(self, port: int, flags: str) -> str:
        """Start a server on `port` (each port is used once per container) and wait until it is healthy."""
        self.container.exec_run(
            ["sh", "-c", f"exec {SERVE} --port {port} {flags} > /tmp/server-{port}.log 2>&1"],
            workdir="/sgl-workspace/twin",
            detach=True,
        )
        url, deadline = self.url(port), time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if response.status == 200:
                        return url
            except OSError:
                time.sleep(0.3)
        raise AssertionError(f"server on {port} did not start:\n{self.sh(f'tail -40 /tmp/server-{port}.log')[1]}")

    def log(self, port: int) -> str:
        return self.sh(f"cat /tmp/server-{port}.log")[1]


@pytest.fixture
def twin(docker_client, twin_image, tmp_path):
    with running_device(tmp_path / "device"):
        instance = Twin(docker_client, twin_image, tmp_path / "device")
        yield instance
        instance.container.kill()


def test_defects_a_and_b_reproduce_and_their_fixes_make_the_server_start(twin: Twin) -> None:
    code, log = twin.crash(SPEC_314)
    assert code == 1
    assert "AssertionError: Attempted to load weight (torch.Size([2048, 6144])) into parameter" in log
    assert "model.decoder.mlp.shared_experts.gate_up_proj.weight, shard gate_proj" in log
    assert "Received sigquit from a child process" in log

    twin.apply("a-quark-exclude-mtp")
    twin.start(PORTS[0], SPEC_314)
    code, log = twin.crash(SPEC_516)
    assert code == 1
    assert "fatal error: cuda_runtime.h: No such file or directory" in log
    assert "Error building extension 'fused_multistep_metadata'" in log

    twin.apply("b-rocm-guard-metadata")
    twin.start(PORTS[1], SPEC_516)
    assert twin.sh("git log --format=%an")[1].strip() == "twin upstream"
    code, diff = twin.sh("git diff --stat")
    assert "fused_multistep_metadata.cpp" in diff
    config = json.loads(twin.sh("cat /models/glm-5.2-mxfp4/config.json")[1])
    exclude = config["quantization_config"]["exclude"]
    assert {f"model.decoder.mlp.shared_experts.{name}" for name in ("gate_proj", "up_proj", "down_proj")} <= set(
        exclude
    )


def test_defect_c_slow_fallback_until_the_tuner_writes_the_config(twin: Twin) -> None:
    """aiter looks a config up per padded M: a row for M=1 leaves the prefills of a burst (1000+ new tokens each)
    on the default kernels; rows for every size make it faster."""
    url = twin.start(PORTS[0], "--tp 4 --dp 2")
    assert "[fused_moe] using 2stage default for ('gfx950', 256, 1, 6144, 512, 256, 8, " in twin.log(PORTS[0])
    before = asyncio.run(burst_seconds(url, requests=6, input_tokens=1000))
    tune = "python3 -m twin.tune_moe --model-dim 6144 --inter-dim 512 --experts 256 --topk 8 --tokens"
    code, output = twin.sh(f"{tune} 1")
    assert code == 0 and "wrote 1 tuned rows" in output
    url = twin.start(PORTS[1], "--tp 4 --dp 2")
    one_row = asyncio.run(burst_seconds(url, requests=6, input_tokens=1000))
    prefills = re.findall(r"using 2stage default for \('gfx950', 256, (\d+), 6144, 512, ", twin.log(PORTS[1]))
    assert any(int(m) >= 1024 for m in prefills)  # the burst's prefills (1000+ new tokens each) miss too
    code, output = twin.sh(f"{tune} {','.join(str(2**power) for power in range(16))}")
    assert code == 0 and "wrote 16 tuned rows" in output
    assert twin.sh("git status --short")[1].strip() == "M twin/configs/tuned_fmoe.csv"
    url = twin.start(PORTS[2], "--tp 4 --dp 2")
    after = asyncio.run(burst_seconds(url, requests=6, input_tokens=1000))
    assert "using 2stage default" not in twin.log(PORTS[2])
    assert after < before * 0.9 and after < one_row * 0.9


async def stream_one(
    session: aiohttp.ClientSession, url: str, prompt: str, max_tokens: int
) -> tuple[float, float, int]:
    """(TTFT, output tok/s after the first token, cached tokens) of one streamed completion."""
    payload = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started, first, usage = time.monotonic(), None, {}
    async with session.post(url + "/v1/completions", json=payload) as response:
        async for raw in response.content:
            line = raw.decode().strip()
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                first = first or (time.monotonic() if chunk["choices"] else None)
                usage = chunk.get("usage") or usage
    end = time.monotonic()
    tokens = usage["completion_tokens"]
    return first - started, (tokens - 1) / (end - first), usage["prompt_tokens_details"]["cached_tokens"]


def words(count: int, seed: int) -> str:
    vocabulary = "alpha bravo delta echo golf hotel india kilo lima mike oscar papa romeo sierra tango".split()
    return " ".join(vocabulary[(index * 7 + seed * 13 + index // 15) % len(vocabulary)] for index in range(count))


async def burst_seconds(url: str, requests: int, input_tokens: int) -> float:
    """Wall time for a burst of concurrent uncached prompts to finish (prefill-bound)."""
    async with aiohttp.ClientSession() as session:
        await session.post(url + "/flush_cache")
        started = time.monotonic()
        prompts = [f"{seed} " + words(input_tokens, seed) for seed in range(requests)]
        await asyncio.gather(*(stream_one(session, url, prompt, 4) for prompt in prompts))
        return time.monotonic() - started


async def single_stream(url: str) -> float:
    async with aiohttp.ClientSession() as session:
        speeds = [(await stream_one(session, url, f"{seed} " + words(500, seed), 96))[1] for seed in range(3)]
    return sorted(speeds)[1]


def test_performance_directions_over_http(twin: Twin) -> None:
    twin.apply("a-quark-exclude-mtp")
    twin.apply("b-rocm-guard-metadata")
    tp8 = twin.start(PORTS[0], "--tp 8")
    tp4dp2 = twin.start(PORTS[1], "--tp 4 --dp 2")
    spec = twin.start(PORTS[2], f"--tp 8 {SPEC_516}")
    assert asyncio.run(burst_seconds(tp4dp2, 6, 1000)) < asyncio.run(burst_seconds(tp8, 6, 1000))
    assert asyncio.run(single_stream(spec)) > 2.0 * asyncio.run(single_stream(tp8))  # ~2.3x at a 500-token context

    async def cached_vs_uncached() -> tuple[tuple, tuple]:
        async with aiohttp.ClientSession() as session:
            prompt = words(2000, 99)
            cold = await stream_one(session, tp8, prompt, 4)
            warm = await stream_one(session, tp8, prompt, 4)
            return cold, warm

    cold, warm = asyncio.run(cached_vs_uncached())
    assert cold[2] == 0 and warm[2] >= 1984
    assert warm[0] < cold[0]


def test_quality_in_band_after_fixes_and_collapses_after_a_wrong_load(twin: Twin) -> None:
    gsm8k = QualityCheckSpec(
        name="gsm8k",
        kind="gsm8k",
        dataset="builtin:twin-gsm8k",
        samples=60,
        few_shot=5,
        max_tokens=128,
        reference=0.96,
        tolerance=0.06,
    )
    gpqa = QualityCheckSpec(
        name="gpqa",
        kind="multiple_choice",
        dataset="builtin:twin-gpqa",
        samples=50,
        few_shot=0,
        max_tokens=128,
        reference=0.83,
        tolerance=0.15,
    )
    twin.apply("a-quark-exclude-mtp")
    good = twin.start(PORTS[0], f"--tp 8 --kv-cache-dtype fp8_e4m3 {SPEC_314}")
    assert run_quality(good, gsm8k).passed
    assert run_quality(good, gpqa).passed

    twin.sh("cd /models/glm-5.2-mxfp4 && git apply -R /tmp/a-quark-exclude-mtp.patch")
    twin.apply("wrong-load-narrow")
    broken = twin.start(PORTS[1], f"--tp 8 {SPEC_314}")
    collapsed = run_quality(broken, gsm8k)
    assert not collapsed.passed
    assert collapsed.score < 0.3


SCENARIOS = sorted(p.name for p in (ROOT / "sandboxes/twin/scenarios").iterdir() if (p / "scenario.json").exists())


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_image_is_a_clean_repo_carrying_its_defect(docker_client, scenario: str) -> None:
    subprocess.run([str(ROOT / "sandboxes/twin/build.sh"), "--scenario", scenario], check=True, capture_output=True)
    spec = json.loads((ROOT / "sandboxes/twin/scenarios" / scenario / "scenario.json").read_text())
    checkpoint = model_dir(scenario)
    script = f"git status --short | wc -l; git log --format=%an; ls {checkpoint}/config.json"
    fix = spec["fix"].get("patch")
    if fix:
        data = (ROOT / "sandboxes/twin/scenarios" / scenario / fix).read_bytes()
        where = checkpoint if b"a/config.json" in data else "/sgl-workspace/twin"
        script += f"; echo {base64.b64encode(data).decode()} | base64 -d > /tmp/fix.patch"
        script += f" && cd {where} && git apply --check /tmp/fix.patch && echo FIX-APPLIES"
    output = docker_client.containers.run(
        f"{TWIN_TAG}:{scenario}", ["sh", "-c", script], remove=True, working_dir="/sgl-workspace/twin"
    ).decode()
    assert output.splitlines()[:2] == ["0", "twin upstream"]
    assert f"{checkpoint}/config.json" in output
    assert not fix or "FIX-APPLIES" in output
