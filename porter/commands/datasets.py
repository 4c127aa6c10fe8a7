"""`porter data get gsm8k|gsm8k-train|gpqa-diamond --out DIR`: the public sets, as the quality check reads them.

Covers downloading from the Hugging Face Hub and writing JSONL plus a `sha256sum`-style file next to it:
- gsm8k: openai/gsm8k, config `main`, split `test` (1319 rows). The hub stores it as parquet only, so the
  rows come as JSON from the hub's dataset viewer API (`/rows`, at most 100 a page), not through a
  parquet reader; each row keeps `question` and `answer` (`... #### N`).
- gsm8k-train: the same, split `train` (7473 rows): where lm-eval's gsm8k takes its five shots (`fewshot_split:
  train`), so all 1319 test questions are asked.
- gpqa-diamond: Idavidrein/gpqa, file `gpqa_diamond.csv` (198 rows), a gated dataset: the user accepts its
  terms on the hub and exports a token (HF_TOKEN); fetched with huggingface_hub's hf_hub_download (its token
  rules: the hub's origin only) into a temporary cache; each row keeps `Question`, `Correct Answer` and
  `Incorrect Answer 1..3`.
Endpoints: HF_ENDPOINT (the hub, default https://huggingface.co) and PORTER_DATASETS_SERVER (the viewer
API, default https://datasets-server.huggingface.co); tests point both at a local server. Does not cover
scoring (checks/quality.py) or any other dataset.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from huggingface_hub import get_token, hf_hub_download
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
from huggingface_hub.utils import logging as hub_logging

from porter.checks.quality import MC_FIELDS
from porter.checks.quality_data import OUTPUT_NAMES

GSM8K_DATASET, GSM8K_CONFIG, GSM8K_FIELDS = "openai/gsm8k", "main", ("question", "answer")
GPQA_REPO, GPQA_FILE = "Idavidrein/gpqa", "gpqa_diamond.csv"
GPQA_FIELDS = MC_FIELDS  # the columns the multiple-choice check reads, as GPQA's CSV names them
PAGE = 100  # the viewer API's largest page
TIMEOUT_S = 60


class DataError(Exception):
    """A dataset that could not be fetched; the message says why and what to do."""


def default_out(name: str) -> Path:
    """Where the shipped real tasks look: $PORTER_DATA/gsm8k, $PORTER_DATA/gpqa (PORTER_DATA default /data/evals)."""
    root = Path(os.environ.get("PORTER_DATA") or "/data/evals")
    return root / ("gpqa" if name == "gpqa-diamond" else "gsm8k")


def get(name: str, out_dir: Path) -> tuple[Path, str, int]:
    """Fetch `name` (one of OUTPUT_NAMES, as the command line's choice) into out_dir; returns (file, sha256, rows)."""
    rows = _gpqa_rows() if name == "gpqa-diamond" else _gsm8k_rows("train" if name == "gsm8k-train" else "test")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / OUTPUT_NAMES[name]
    data = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode()
    temporary = path.with_name(f".{path.name}.partial")
    temporary.write_bytes(data)
    temporary.replace(path)  # a reader never sees half a file
    digest = hashlib.sha256(data).hexdigest()
    path.with_name(path.name + ".sha256").write_text(f"{digest}  {path.name}\n")
    return path, digest, len(rows)


def _gsm8k_rows(split: str) -> list[dict]:
    server = os.environ.get("PORTER_DATASETS_SERVER", "https://datasets-server.huggingface.co").rstrip("/")
    rows: list[dict] = []
    total = None
    while total is None or len(rows) < total:
        query = {"dataset": GSM8K_DATASET, "config": GSM8K_CONFIG, "split": split, "offset": len(rows), "length": PAGE}
        page = json.loads(_fetch(f"{server}/rows?{urllib.parse.urlencode(query)}"))
        total = page["num_rows_total"]
        if not page["rows"]:
            raise DataError(f"{server} returned no rows at offset {len(rows)} of {total}")
        for entry in page["rows"]:
            if entry.get("truncated_cells"):
                raise DataError(f"row {entry['row_idx']} came back truncated ({entry['truncated_cells']})")
            rows.append({field: entry["row"][field] for field in GSM8K_FIELDS})
    return rows


def _gpqa_rows() -> list[dict]:
    where = f"{GPQA_REPO}/{GPQA_FILE}"
    if get_token() is None:  # HF_TOKEN (or the older HUGGING_FACE_HUB_TOKEN), as hf_hub_download reads it
        raise DataError(
            "GPQA is gated on the Hugging Face Hub and HF_TOKEN is not set: accept its terms at "
            f"https://huggingface.co/datasets/{GPQA_REPO}, create a read token, and export it as HF_TOKEN"
        )
    hub_logging.set_verbosity_error()  # its retries' warnings would break the one line a failure gets
    try:
        with tempfile.TemporaryDirectory(prefix="porter-data-") as cache:
            path = hf_hub_download(GPQA_REPO, GPQA_FILE, repo_type="dataset", cache_dir=cache)
            text = Path(path).read_text(encoding="utf-8")
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise DataError(
            f"{where}: HTTP {status}; the token in HF_TOKEN has no access (accept the dataset's terms on the hub "
            "with that account)"
        ) from None
    except (LocalEntryNotFoundError, OSError) as exc:
        raise DataError(f"{where}: cannot reach the hub ({type(exc).__name__}); set HF_ENDPOINT to a mirror") from None
    reader = csv.DictReader(io.StringIO(text))
    missing = [field for field in GPQA_FIELDS if field not in (reader.fieldnames or [])]
    if missing:
        raise DataError(f"{where}: the CSV lacks the columns {missing}")
    # the question as written: lm-eval's gpqa prompt holds it raw (it strips only the choices, as the check does)
    return [{field: row[field].strip() for field in GPQA_FIELDS} | {"Question": row["Question"]} for row in reader]


def _fetch(url: str) -> bytes:
    """A page of the viewer API: gsm8k is public, so no token is sent (nor can follow a redirect)."""
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers={"User-Agent": "porter"}), timeout=TIMEOUT_S
        ) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        raise DataError(f"GET {url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise DataError(f"GET {url} failed: {getattr(exc, 'reason', exc)}") from None
