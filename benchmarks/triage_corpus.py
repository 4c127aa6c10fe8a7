"""Triage on the labelled real crash logs in ../shared/crashlogs: accuracy, excerpt sizes, burial, MB/s.

    python3 benchmarks/triage_corpus.py [--crashlogs DIR] [--noise-lines 100000] [--speed-mb 64]

Per category: category accuracy, key-line accuracy (our key line and the labelled one name the same
line: one contains the other once whitespace, quoting and the labeller's `...` elisions are ignored),
whether the labelled key line is in the excerpt (when it is in the log at all) and whether our key line
is, and excerpt tokens (chars / 4). Then each log buried in `--noise-lines` lines of healthy engine
noise (porter.triage.noise): the category and key line must not change; and again with aiter
untuned-config warnings in the noise (category only: the key line of a slow-fallback log legitimately
moves to the earliest warning). Speed (one core, after a warm-up, median of 3): a healthy
engine log with a crash inside, the same with aiter untuned-config warnings, and the worst case where
every line is new text. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from porter.triage import triage_file, triage_text  # noqa: E402
from porter.triage.corpus import crashlogs_dir, in_text, load_cases, same_line  # noqa: E402
from porter.triage.noise import bury, noise_lines  # noqa: E402

DEFAULT_CRASHLOGS = crashlogs_dir()


def evaluate(case: dict, noise_lines_count: int) -> dict:
    plain = triage_text(case["log"])
    buried_text, _ = bury(case["log"], noise_lines_count, seed=len(case["log"]))
    buried = triage_text(buried_text)
    noisy = triage_text(bury(case["log"], noise_lines_count, seed=1, aiter_warnings=True)[0])
    return {
        "file": case["file"],
        "category": case["category"],
        "got": plain.category,
        "category_ok": plain.category == case["category"],
        "key_ok": same_line(case["key_line"], plain.key_line),
        "label_in_log": in_text(case["key_line"], case["log"]),
        "label_in_excerpt": in_text(case["key_line"], plain.excerpt),
        "key_in_excerpt": bool(plain.key_line) and plain.key_line in plain.excerpt,
        "tokens": plain.excerpt_tokens,
        "buried_unchanged": (buried.category, buried.key_line) == (plain.category, plain.key_line),
        "buried_key_in_excerpt": bool(buried.key_line) and buried.key_line in buried.excerpt,
        "buried_tokens": buried.excerpt_tokens,
        "aiter_noise_category_ok": noisy.category == plain.category,
    }


def engine_log_blocks(seed: int, aiter_warnings: bool = False) -> str:
    return "\n".join(noise_lines(100_000, seed=seed, aiter_warnings=aiter_warnings)) + "\n"


def unique_request_blocks(seed: int) -> str:
    """The worst case for the template cache: every line is new text (vLLM request logging with prompts)."""
    rng = random.Random(seed)
    words = "the model prompt request tokens sample output answer question batch layer expert value".split()
    return "".join(
        f"INFO 07-14 10:00:00 [logger.py:39] Received request chatcmpl-{rng.getrandbits(64):x}: prompt: "
        f"'{' '.join(rng.choice(words) for _ in range(20))}'\n"
        for _ in range(50_000)
    )


def speed(megabytes: int, make_block) -> dict:
    """MB/s of triage_file on a log of `megabytes` built from fresh blocks, one crash in the middle."""
    crash = (
        'Traceback (most recent call last):\n  File "/x/loader.py", line 1, in load\n    load()\n'
        "KeyError: 'model.layers.3.w2_weight_scale'\n"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as handle:
        written, seed = 0, 0
        while written < megabytes * 1_000_000:
            block = make_block(seed)
            handle.write(block + (crash if seed == 2 else ""))
            written, seed = written + len(block), seed + 1
        path = Path(handle.name)
    size = path.stat().st_size
    try:
        triage_file(path)
        timings = []
        for _ in range(3):
            started = time.perf_counter()
            result = triage_file(path)
            timings.append(time.perf_counter() - started)
    finally:
        path.unlink()
    median = statistics.median(timings)
    return {
        "bytes": size,
        "median_s": round(median, 3),
        "mb_per_s": round(size / median / 1e6, 1),
        "category": result.category,
    }


def print_table(results: list[dict]) -> None:
    by_category = defaultdict(list)
    for result in results:
        by_category[result["category"]].append(result)
    print(f"{'category':28} {'n':>3} {'class':>6} {'key':>6} {'label in excerpt':>17} {'tokens':>7}")
    for category, rows in sorted(by_category.items()):
        print(
            f"{category:28} {len(rows):3d} {sum(r['category_ok'] for r in rows):6d} "
            f"{sum(r['key_ok'] for r in rows):6d} "
            f"{sum(r['label_in_excerpt'] for r in rows):>8d}/{sum(r['label_in_log'] for r in rows):<8d} "
            f"{statistics.median(r['tokens'] for r in rows):7.0f}"
        )
    for result in results:
        if not (result["category_ok"] and result["key_ok"] and result["buried_unchanged"]):
            print(
                f"miss {result['file']}: want {result['category']} got {result['got']} key_ok={result['key_ok']} "
                f"buried_unchanged={result['buried_unchanged']}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crashlogs", type=Path, default=DEFAULT_CRASHLOGS)
    parser.add_argument("--noise-lines", type=int, default=100_000)
    parser.add_argument("--speed-mb", type=int, default=64)
    args = parser.parse_args()
    if not args.crashlogs.is_dir():
        print(f"no labelled logs at {args.crashlogs}", file=sys.stderr)
        return 2
    results = [evaluate(case, args.noise_lines) for case in load_cases(args.crashlogs)]
    print_table(results)
    figures = {
        "engine_log": speed(args.speed_mb, engine_log_blocks),
        "engine_log_with_aiter_warnings": speed(args.speed_mb, lambda seed: engine_log_blocks(seed, True)),
        "every_line_new_text": speed(args.speed_mb, unique_request_blocks),
    }
    total = len(results)
    summary = {
        "cases": total,
        "category_accuracy": round(sum(r["category_ok"] for r in results) / total, 3),
        "key_line_accuracy": round(sum(r["key_ok"] for r in results) / total, 3),
        "key_line_in_excerpt": round(sum(r["key_in_excerpt"] for r in results) / total, 3),
        "labelled_key_in_excerpt": round(
            sum(r["label_in_excerpt"] for r in results) / max(1, sum(r["label_in_log"] for r in results)), 3
        ),
        "excerpt_tokens_median": statistics.median(r["tokens"] for r in results),
        "excerpt_tokens_max": max(r["tokens"] for r in results),
        "buried_unchanged": round(sum(r["buried_unchanged"] for r in results) / total, 3),
        "buried_key_in_excerpt": round(sum(r["buried_key_in_excerpt"] for r in results) / total, 3),
        "buried_tokens_median": statistics.median(r["buried_tokens"] for r in results),
        "aiter_noise_category_unchanged": round(sum(r["aiter_noise_category_ok"] for r in results) / total, 3),
        "noise_lines": args.noise_lines,
        "speed": figures,
    }
    for name, figure in figures.items():
        print(f"speed {name}: {figure['mb_per_s']} MB/s on {figure['bytes'] / 1e6:.0f} MB (median of 3, one core)")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
