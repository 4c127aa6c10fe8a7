"""Quality datasets as files: the built-in sets, a path or `builtin:NAME` resolved, rows read from JSONL or CSV
(bounded, errors naming the file and line), and the fields a check needs checked as text.

Does not choose questions or build prompts (quality.py) nor fetch public sets (commands/datasets.py).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from porter.checks.loadgen import CheckError

DATA_DIR = Path(__file__).parent / "data"
# the file `porter data get NAME` writes for each public set, under its folder of the data directory
OUTPUT_NAMES = {"gsm8k": "test.jsonl", "gsm8k-train": "train.jsonl", "gpqa-diamond": "gpqa_diamond.jsonl"}
MAX_DATASET_BYTES = 256 << 20  # GSM8K's test split is under 1 MB; the whole file is read into memory


def builtin_names() -> list[str]:
    return sorted(path.stem for path in DATA_DIR.glob("*.jsonl"))


def resolve_dataset(reference: str) -> Path:
    """A path, or `builtin:NAME` -> porter/checks/data/NAME.jsonl; a missing one lists what exists."""
    if reference.startswith("builtin:"):
        name = reference.removeprefix("builtin:")
        path = DATA_DIR / f"{name}.jsonl"
        if not path.is_file():
            raise CheckError(f"no built-in dataset {name!r}; available: {', '.join(builtin_names()) or 'none'}")
        return path
    path = Path(reference).expanduser()
    if not path.is_file():
        raise CheckError(f"dataset file {path} does not exist (built-in sets: {', '.join(builtin_names())})")
    return path


def read_rows(path: Path) -> list[dict]:
    """Rows of a JSONL or CSV file; errors name the file and the line."""
    try:
        if path.stat().st_size > MAX_DATASET_BYTES:
            raise CheckError(f"{path}: larger than {MAX_DATASET_BYTES >> 20} MB; a quality set is a few MB")
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckError(f"{path}: not UTF-8 text (byte {exc.start}); datasets are UTF-8 JSONL or CSV") from None
    except OSError as exc:
        raise CheckError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    if path.suffix.lower() == ".csv":
        try:
            return list(csv.DictReader(io.StringIO(text, newline="")))
        except csv.Error as exc:
            raise CheckError(f"{path}: not a readable CSV: {exc}") from None
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise CheckError(f"{path}:{number}: not a JSON object: {exc}") from None
        if not isinstance(row, dict):
            raise CheckError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        rows.append(row)
    return rows


def check_fields(rows: list[dict], fields: tuple[str, ...], path: Path) -> None:
    """Every row has every field as text; numbers (an answer written as 42) become their text."""
    if not rows:
        raise CheckError(f"{path}: the dataset is empty")
    for number, row in enumerate(rows, start=1):
        for name in fields:
            value = row.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                row[name] = value = str(value)
            if value is not None and not isinstance(value, str):
                raise CheckError(f"{path}: row {number}: `{name}` is a {type(value).__name__}; expected text")
        missing = [name for name in fields if not (row.get(name) or "").strip()]
        if missing:
            raise CheckError(f"{path}: row {number} lacks {missing}; expected fields {list(fields)}")


def check_size(count: int, few_shot: int, path: Path) -> None:
    if count <= few_shot:
        raise CheckError(
            f"{path} has {count} rows: its {few_shot} few-shot examples leave no question to ask; "
            "use a larger dataset or lower few_shot"
        )
