"""`porter init ORG/NAME` against a real HTTP server on 127.0.0.1 speaking the hub's file API (HF_ENDPOINT points at
it): GET /{repo}/resolve/{revision}/{file}, small files answered directly with the hub's X-Repo-Commit and ETag headers,
the weight index through a redirect as the hub sends large files, a file the repo lacks as 404 with
`X-Error-Code: EntryNotFound`, a gated repo as 403 `GatedRepo`, HF_TOKEN as a bearer token. Offline: one line naming
HF_ENDPOINT, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_test_token_not_real"
CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 2048,
    "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 16, "kv_lora_rank": 256,
    "qk_rope_head_dim": 64, "qk_nope_head_dim": 64, "v_head_dim": 64, "q_lora_rank": 512,
    "moe_intermediate_size": 768, "n_routed_experts": 32, "num_experts_per_tok": 4, "n_shared_experts": 1,
    "first_k_dense_replace": 1, "intermediate_size": 4096, "vocab_size": 32000, "num_nextn_predict_layers": 1,
    "max_position_embeddings": 32768, "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                            "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"]},
}  # fmt: skip
INDEX = {"metadata": {"total_size": 21_474_836_480}, "weight_map": {"lm_head.weight": "model-00001.safetensors"}}


class FakeHub(BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None]] = []  # (path of a GET, its Authorization header)
    elsewhere = ""  # another origin the weight index of acme/cdn redirects to

    def log_message(self, *args):
        pass

    def send(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
        self.send_response(status)
        # hf_hub_download's HEAD reads both (the ETag names the cached blob: one per content)
        commit = {"X-Repo-Commit": "0" * 40, "ETag": f'"{hashlib.sha256(body).hexdigest()}"'}
        for key, value in {"Content-Length": str(len(body)), **commit, **(headers or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        if self.command == "GET":
            FakeHub.seen.append((self.path, self.headers.get("Authorization")))
        if self.path == "/acme/cdn/resolve/main/model.safetensors.index.json":  # large files: a signed URL elsewhere
            size = str(len(json.dumps(INDEX)))
            return self.send(
                302, b"", {"Location": f"{FakeHub.elsewhere}/lfs/acme/moe-fp8/index", "X-Linked-Size": size}
            )
        if self.path.startswith("/acme/cdn/"):
            self.path = self.path.replace("/acme/cdn/", "/acme/moe-fp8/")
        files = {
            "/acme/moe-fp8/resolve/main/config.json": json.dumps(CONFIG).encode(),
            "/acme/no-index/resolve/main/config.json": json.dumps(CONFIG).encode(),
            "/lfs/acme/moe-fp8/index": json.dumps(INDEX).encode(),
        }
        if self.path.startswith("/acme/gated/"):
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self.send(403, b"gated", {"X-Error-Code": "GatedRepo"})
            self.path = self.path.replace("/acme/gated/", "/acme/moe-fp8/")
        if self.path == "/acme/moe-fp8/resolve/main/model.safetensors.index.json":
            return self.send(302, b"", {"Location": "/lfs/acme/moe-fp8/index"})  # large files: a redirect
        if self.path in files:
            return self.send(200, files[self.path], {"Content-Type": "application/json"})
        if self.path.startswith(("/acme/moe-fp8/", "/acme/no-index/")):
            return self.send(404, b"Entry not found", {"X-Error-Code": "EntryNotFound"})
        return self.send(401, b"Repository not found", {"X-Error-Code": "RepoNotFound"})


def serve():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def hub():
    (server, url), (other, FakeHub.elsewhere) = serve(), serve()  # another port: another origin
    FakeHub.seen = []
    yield url
    for each in (server, other):
        each.shutdown()
        each.server_close()


def test_the_token_never_follows_a_redirect_off_the_hubs_origin(hub, tmp_path):
    result = init(["acme/cdn", "--engine", "sglang"], tmp_path, HF_ENDPOINT=hub, HF_TOKEN=TOKEN)
    assert result.returncode == 0, result.stderr
    assert "weights: 21.5 GB  [model.safetensors.index.json metadata.total_size]" in result.stderr
    assert dict(FakeHub.seen)["/acme/cdn/resolve/main/config.json"] == f"Bearer {TOKEN}"
    assert dict(FakeHub.seen)["/lfs/acme/moe-fp8/index"] is None


def init(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env}
    return subprocess.run(
        [sys.executable, "-m", "porter", "init", *args], capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**environment, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])},
    )  # fmt: skip


def test_a_hub_id_is_read_through_the_file_api(hub, tmp_path):
    out = tmp_path / "task.yaml"
    result = init(["acme/moe-fp8", "--engine", "sglang", "--out", str(out)], tmp_path, HF_ENDPOINT=hub, HF_TOKEN=TOKEN)
    assert result.returncode == 0, result.stderr
    assert "weights: 21.5 GB  [model.safetensors.index.json metadata.total_size]" in result.stdout
    assert "MoE: hidden 2048, expert width 768, 32 experts, top-4, 1 shared of width 768" in result.stdout
    task = yaml.safe_load(out.read_text())
    assert task["model"]["id"] == "acme/moe-fp8" and task["model"]["path"] == "${MODEL_WEIGHTS:-/data/models/moe-fp8}"
    paths = [path for path, _ in FakeHub.seen if not path.startswith("/api/")]  # the library's own registry fetch
    assert paths[:2] == ["/acme/moe-fp8/resolve/main/config.json", "/lfs/acme/moe-fp8/index"]
    assert all(auth == f"Bearer {TOKEN}" for path, auth in FakeHub.seen if path in paths)  # stayed on the hub
    valid = subprocess.run([sys.executable, "-m", "porter", "validate", str(out)], capture_output=True, text=True,
                           timeout=60, cwd=ROOT)  # fmt: skip
    assert valid.returncode == 0, valid.stderr


def test_a_repo_without_an_index_gets_an_estimate_said_so(hub, tmp_path):
    result = init(["acme/no-index", "--engine", "vllm"], tmp_path, HF_ENDPOINT=hub)
    assert result.returncode == 0, result.stderr
    assert "ESTIMATE from the shapes (no weight index with metadata.total_size)" in result.stderr
    assert yaml.safe_load(result.stdout)["serve"]["engine"] == "vllm"


def test_refusals_are_one_line(hub, tmp_path):
    gated = init(["acme/gated", "--engine", "sglang"], tmp_path, HF_ENDPOINT=hub)
    missing = init(["acme/nothing-here", "--engine", "sglang"], tmp_path, HF_ENDPOINT=hub)
    for result, words in ((gated, "acme/gated is gated"), (missing, "acme/nothing-here: no such repository")):
        assert result.returncode == 2 and result.stdout == ""
        assert result.stderr.count("\n") == 1 and words in result.stderr and "Traceback" not in result.stderr


def test_offline_names_the_mirror_variable(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    unreachable = init(["acme/moe-fp8", "--engine", "sglang"], tmp_path, HF_ENDPOINT=closed)
    offline = init(["acme/moe-fp8", "--engine", "sglang"], tmp_path, HF_HUB_OFFLINE="1")
    for result in (unreachable, offline):
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert "HF_ENDPOINT" in result.stderr and "local checkpoint directory" in result.stderr
    assert "cannot reach" in unreachable.stderr and "HF_HUB_OFFLINE is set" in offline.stderr


def test_bad_input_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    for args, words in (
        ([str(tmp_path / "empty"), "--engine", "sglang"], "no config.json"),
        (["not a checkpoint", "--engine", "sglang"], "neither a checkpoint directory nor a hub repository id"),
        (["acme/x", "--engine", "sglang", "--hardware", "H100:8"], "unknown GPU"),
    ):
        result = init(args, tmp_path, HF_HUB_OFFLINE="1")
        assert result.returncode == 2 and words in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_a_config_with_wrong_types_is_one_line(tmp_path):
    checkpoint = tmp_path / "odd"
    checkpoint.mkdir()
    # a size every fact needs, mistyped (a mistyped size only some facts need leaves those undecided:
    # test_init_per_layer.py)
    (checkpoint / "config.json").write_text(json.dumps({**CONFIG, "num_attention_heads": "many"}))
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    for folder, words in ((checkpoint, "no positive integer 'num_attention_heads'"), (tmp_path / "deep", "not JSON")):
        result = init([str(folder), "--engine", "sglang"], tmp_path)
        assert result.returncode == 2 and words in result.stderr and result.stderr.count("\n") == 1, result.stderr
