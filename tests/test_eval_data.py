"""`porter data get` against a local stand-in for the Hugging Face Hub (no network here).

The fake hub speaks the two real endpoints porter uses: the dataset viewer's `/rows` pages (gsm8k) and
the hub's `resolve` download of a gated file (GPQA's CSV, with the extra columns the real one has), which
answers 401 without the right bearer token. The files porter writes are read back with the quality
check's own reader.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from porter.checks.quality import MC_FIELDS
from porter.checks.quality_data import check_fields, read_rows

TOKEN = "hf_test_token_not_real"
GSM8K_ROWS = [{"question": f"What is {n} + {n}?", "answer": f"{n} + {n} = {2 * n}\n#### {2 * n}"} for n in range(250)]
GSM8K_TRAIN_ROWS = [{"question": f"Train {n} - 1?", "answer": f"#### {n - 1}"} for n in range(130)]
GPQA_HEADER = [
    "Pre-Revision Question",
    "Question",
    "Correct Answer",
    "Incorrect Answer 1",
    "Incorrect Answer 2",
    "Incorrect Answer 3",
    "Explanation",
    "Record ID",
    "High-level domain",
]


def gpqa_csv() -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(GPQA_HEADER)
    for n in range(198):
        writer.writerow(
            [
                f"old {n}",
                f"Which is {n}, with a comma?\n",
                f" {n} ",
                f"{n + 1}",
                f"{n + 2}",
                f"{n + 3}",
                "because",
                f"rec{n}",
                "Physics",
            ]
        )
    return out.getvalue().encode()


class FakeHub(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Repo-Commit", "0" * 40)  # hf_hub_download's HEAD reads the commit and the ETag
        self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        split = {"test": GSM8K_ROWS, "train": GSM8K_TRAIN_ROWS}.get(query.get("split", ""))
        if url.path == "/rows" and query.get("dataset") == "openai/gsm8k" and query.get("config") == "main" and split:
            offset, length = int(query["offset"]), min(int(query["length"]), 100)
            rows = [
                {"row_idx": i, "row": split[i], "truncated_cells": []}
                for i in range(offset, min(offset + length, len(split)))
            ]
            self.send(200, json.dumps({"rows": rows, "num_rows_total": len(split), "partial": False}).encode())
        elif url.path == "/datasets/Idavidrein/gpqa/resolve/main/gpqa_diamond.csv":
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.send(401, b'{"error": "Access to dataset Idavidrein/gpqa is restricted."}')
            else:
                self.send(200, gpqa_csv(), "text/csv")
        else:
            self.send(404, b'{"error": "not found"}')


@pytest.fixture(scope="module")
def hub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def data_get(hub: str, name: str, out, token: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    env.update(HF_ENDPOINT=hub, PORTER_DATASETS_SERVER=hub, **({"HF_TOKEN": token} if token else {}))
    command = [sys.executable, "-m", "porter", "data", "get", name, "--out", str(out)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def test_gsm8k_pages_through_the_viewer_api_into_checkable_jsonl(hub, tmp_path):
    result = data_get(hub, "gsm8k", tmp_path / "gsm8k", token=None)
    assert result.returncode == 0, result.stderr
    path = tmp_path / "gsm8k" / "test.jsonl"
    rows = read_rows(path)
    check_fields(rows, ("question", "answer"), path)
    assert rows == GSM8K_ROWS  # all 250, in order, across three pages
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert (tmp_path / "gsm8k" / "test.jsonl.sha256").read_text() == f"{digest}  test.jsonl\n"
    assert f"250 rows, sha256 {digest}" in result.stdout


def test_gpqa_uses_the_hub_token_and_keeps_the_choice_columns(hub, tmp_path):
    result = data_get(hub, "gpqa-diamond", tmp_path / "gpqa", token=TOKEN)
    assert result.returncode == 0, result.stderr
    path = tmp_path / "gpqa" / "gpqa_diamond.jsonl"
    rows = read_rows(path)
    check_fields(rows, MC_FIELDS, path)
    assert len(rows) == 198 and set(rows[0]) == set(MC_FIELDS)
    assert rows[3]["Question"] == "Which is 3, with a comma?\n" and rows[3]["Correct Answer"] == "3"  # lm-eval's text


@pytest.mark.parametrize(
    ("token", "said"),
    [(None, "GPQA is gated on the Hugging Face Hub and HF_TOKEN is not set"), ("hf_wrong", "HTTP 401")],
)
def test_gpqa_without_access_says_what_to_do(hub, tmp_path, token, said):
    result = data_get(hub, "gpqa-diamond", tmp_path / "gpqa", token=token)
    assert result.returncode == 2 and said in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "gpqa" / "gpqa_diamond.jsonl").exists()
    assert "hf_wrong" not in result.stderr  # the token's value is never printed


def test_gsm8k_train_is_the_train_split_next_to_the_test_set(hub, tmp_path):
    """lm-eval's gsm8k takes its shots from the train split; the real tasks read them from gsm8k/train.jsonl."""
    result = data_get(hub, "gsm8k-train", tmp_path / "gsm8k", token=None)
    assert result.returncode == 0, result.stderr
    assert read_rows(tmp_path / "gsm8k" / "train.jsonl") == GSM8K_TRAIN_ROWS
    assert not (tmp_path / "gsm8k" / "test.jsonl").exists()
