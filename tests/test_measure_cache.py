"""The measurement cache and the node's measurement lock, on real runs and a real `porter bench`.

The cache test runs the real loop twice (local sandbox, a scripted agent) on a task whose engine is the
SSE test server: the second run on the identical configuration reuses the first run's baseline samples
without sending a request, and its report says so; a `--fresh` run measures anew. The lock test holds
the lock while `porter bench` starts, and checks that bench waits, says so, and runs once it is free.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import git
import pytest
import yaml
from helpers import free_port
from sse_server import SseServer
from twin_tasks import call, run_with

from porter.ledger.measure_cache import LockTimeout, cache_key, cached_samples, measurement_lock, store_sample
from porter.models import ScriptedModel

SSE_SERVER = Path(__file__).resolve().parent / "sse_server.py"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PORTER_STATE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def engine_task(tmp_path: Path, port: int) -> Path:
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "README").write_text("the engine under test is the SSE test server\n")
    repo = git.Repo.init(engine)
    repo.index.add(["README"])
    repo.index.commit("upstream")
    task = {
        "name": "cache-test",
        "model": {"id": "sse-test", "path": "/m", "in_image": True, "overlay": False},
        "hardware": {"gpu": "MI355X", "count": 1},
        "sandbox": {"kind": "local"},
        "repos": [{"name": "engine", "path": str(engine)}],
        "serve": {"command": f"{sys.executable} {SSE_SERVER} --port {{port}}", "port": port, "flags": {}},
        "checks": {
            "single_stream": {"input_tokens": 32, "output_tokens": 6, "num_requests": 2, "target_output_tok_s": 1}
        },
        "outputs": {"runs_dir": str(tmp_path / "runs")},
    }
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    return path


def baseline_run(task_path: Path, fresh: bool):
    script = [call("serve"), call("run_check", kind="single_stream")]
    return run_with(task_path, ScriptedModel(script), fresh=fresh)


def test_a_cached_baseline_is_reused_and_reported(tmp_path, cache):
    task_path = engine_task(tmp_path, free_port())
    first = baseline_run(task_path, fresh=False)
    second = baseline_run(task_path, fresh=False)
    fresh = baseline_run(task_path, fresh=True)
    assert first.state.accepted_config == second.state.accepted_config == fresh.state.accepted_config
    documents = [json.loads((ctx.run_dir / "report.json").read_text()) for ctx in (first, second, fresh)]
    rows = [document["targets"][0] for document in documents]
    assert [row["cached_samples"] for row in rows] == [0, 2, 0]
    assert rows[1]["samples"] == rows[0]["samples"] and rows[2]["samples"] != rows[0]["samples"]
    assert all(
        row["measured_on"] == document["accepted_config"]["fingerprint"]
        for row, document in zip(rows, documents, strict=True)
    )
    assert "reused from the measurement cache" in (second.run_dir / "report.md").read_text()
    cached = [s.cached for s in second.state.samples]
    assert cached == [True, True]


def test_cache_keys_follow_the_configuration_and_the_check(cache):
    config = {"repos": {"engine": "a1"}, "flags": {"tp": 8}, "image": "sha256:1"}
    key = cache_key(config, "throughput", {"rps": [1]})
    assert key == cache_key(dict(config), "throughput", {"rps": [1]})
    assert key != cache_key({**config, "flags": {"tp": 4}}, "throughput", {"rps": [1]})
    assert key != cache_key(config, "throughput", {"rps": [1, 2]})
    store_sample(key, {"output_tok_s": 10.0})
    (cache / "samples" / f"{key}.jsonl").open("a").write('{"torn')  # a writer killed mid-line
    assert cached_samples(key) == [{"output_tok_s": 10.0}]


def test_records_that_are_not_porters_are_skipped_and_counted(cache, capsys):
    key, other = cache_key({"a": 1}, "single_stream", {}), cache_key({"a": 2}, "single_stream", {})
    store_sample(key, {"output_tok_s": 253.6})
    forged = [
        {"output_tok_s": 1.0},  # a bare sample, as a sandbox would guess the format
        {"key": other, "sample": {"output_tok_s": 1.0}},  # another configuration's record copied over
        {"key": key, "sample": [1.0]},
        {"key": key, "sample": {"output_tok_s": 1.0}, "extra": True},
    ]
    lines = [json.dumps(record) for record in forged]
    prefix = json.dumps({"key": key})[:-1]  # JSON that json.dumps would never write: non-finite numbers
    lines += [prefix + ', "sample": {"output_tok_s": Infinity}}', prefix + ', "sample": {"x": 1e999}}']
    lines += ["[" * 100_000, json.dumps({"key": key, "sample": {"pad": "x" * (1 << 20)}})]
    with (cache / "samples" / f"{key}.jsonl").open("a") as records:
        records.write("\n".join(lines) + "\n")
    assert cached_samples(key) == [{"output_tok_s": 253.6}]
    assert f"{len(lines)} records of" in capsys.readouterr().err


def test_the_lock_wait_is_bounded_and_names_the_holder(cache):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom porter.ledger.measure_cache import measurement_lock\n"
         "with measurement_lock('a run \\x1b]0;pwned\\x07 holding it'):\n    print('held', flush=True)\n"
         "    time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        told: list[str] = []  # what the progress log hears while the measurement waits
        with (
            pytest.raises(LockTimeout) as refused,
            measurement_lock("a second measurement", poll_s=0.05, wait_s=0.2, on_wait=told.append),
        ):
            pytest.fail("the lock was taken while another process held it")
        message = str(refused.value)
        assert f"pid {holder.pid} (a run" in message and "holding it" in message and "\x1b" not in message
        assert len(told) == 1 and told[0].startswith(f"pid {holder.pid} (a run") and "\x1b" not in told[0]
    finally:
        holder.kill()
        holder.wait()
    with measurement_lock("once it is free", wait_s=0):
        pass


def test_a_second_measurement_waits_for_the_lock_and_says_so(cache):
    server = SseServer()
    try:
        server.reset(ttft_ms=5, itl_ms=1)
        command = [sys.executable, "-m", "porter", "bench", server.url, "--single-stream"]
        with measurement_lock("a test holding the node"):
            bench = subprocess.Popen(
                command + ["--input-len", "16", "--output-len", "4"], stderr=subprocess.PIPE, text=True
            )
            said = bench.stderr.readline()
            assert "waiting for the measurement lock" in said and "a test holding the node" in said
            time.sleep(0.5)
            assert bench.poll() is None  # still waiting while the lock is held
            assert server.arrivals() == []
        assert bench.wait(timeout=120) == 0
        assert len(server.arrivals()) == 3
    finally:
        server.stop()
