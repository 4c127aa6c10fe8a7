"""Triage on the labelled real crash logs in ../shared/crashlogs: accuracy, held-out accuracy, recall, MB/s, RSS.

    python3 benchmarks/triage_corpus.py [--crashlogs DIR] [--noise-lines 100000] [--speed-mb 64] [--rss-mb 1024]

Figures (the last line printed is one JSON object):
- category accuracy, and key-line accuracy (our key line names the labelled line: triage_cases.same_line);
- category accuracy buried: the same logs inside `--noise-lines` lines of healthy engine noise;
- leave-one-source-out (LOSO) figures (triage_cases.leave_one_source_out): category accuracy, plain and
  buried, key-line accuracy and key-line recall, plain and buried (layered and strict; by tracker: category only),
  each read while the held-out source's own rules are off. The rules are
  hand-written, not fitted, so "judged on logs from repositories they were not written against" is measured as an
  ablation: for each source, every class rule that reads a line of that source's logs (whether or not it decides the
  case: a rule outranked there would take over once the winner is off) and rightly reads a line of no other source's
  logs (a line of a case labelled with the rule's class) is switched off, as it may exist only because of that
  source, and that source's logs are triaged again. A source is a code family, not an issue tracker: forks and ROCm
  builds of one engine (CODE_FAMILIES) print that engine's messages, so a rule seen on vllm-project/vllm and
  ROCm/vllm has still only been seen on vLLM's wording. The layered figure also keeps the rules that read the fixed
  messages of a layer beneath the engines (rules.RUNTIME_LAYER_RULES: each such rule names the layer and the upstream
  file that emits its wording in `Rule.layer`: PyTorch, HIP/HSA, amdgpu, RCCL, compilers, composable_kernel's
  verdict, CPython). The strict figure keeps only the format grammar (rules.GRAMMAR_RULES: Python exceptions,
  compiler diagnostics, documented status codes). Per source, the rules that only a declaration keeps on are printed
  beside the rules switched off, and for the layered figure the cases it gets right only while each rule is declared
  (corpus.owed_to_declarations), so what each figure owes to the declarations is visible. The unit switched off is
  a whole rule, so the figure is only as honest as the rules are single mechanisms (a rule that ORed two engines'
  unrelated sentences would survive on either's evidence). The figures "by tracker" are the first definition
  (source = issue tracker; a rule is off when it decides that source's cases and decides no other source's), kept
  for comparison: it flattered (forks as separate sources, a wrong decision counted as evidence, a source-specific
  rule outranked in every case never switched off). All are bounds of an ablation, not a true held-out test: the
  rules were written by people who had read every log;
- key-line recall: the labelled line is in the excerpt, plain and buried in `--noise-lines` lines of healthy
  engine noise (benchmarks/triage_noise.py), over the cases whose label quotes a line of the posted log;
- speed (one core, after a warm-up, median of 3; MB per CPU-second, which a shared machine does not skew, and
  MB per wall-second beside it) of triage_file on a healthy engine log with a crash
  inside, the same with aiter untuned-config warnings, and all-new prose (request logging whose prompts are
  English drawn with Zipf weights from a vocabulary that includes words like "error", "memory", "build",
  "default", "support", "still" and "change", so some lines do reach the rules);
- peak RSS and MB per CPU-second of triage_file in a child process on a `--rss-mb` file with no newline at all (tqdm
  redraws joined by \\r) with a HIP out-of-memory message inside one redraw, and peak RSS on all-new prose of
  `--speed-mb` and four times that (constant memory: the same peak; the child's MB/s includes starting Python);
- `done_when`: issue #19's conditions, each true or false, inside the last line (one JSON object).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # triage_cases, triage_noise: benchmark-only code

from triage_cases import (  # noqa: E402
    crashlogs_dir,
    in_text,
    leave_one_source_out,
    load_cases,
    owed_to_declarations,
    same_line,
)
from triage_noise import bury, noise_lines  # noqa: E402

from porter.triage import rules, triage_file, triage_text  # noqa: E402

ENGLISH = (
    "the of and to a in is it you that he was for on are with as they be at one have this from or had by word but "
    "what some we can out other were all there when up use your how said an each she which do their time if will "
    "way about many then them write would like so these her long make thing see him two has look more day could go "
    "come did number sound no most people my over know water than call first who may down side been now find any "
    "new work part take get place made live where after back little only round man year came show every good me "
    "give our under name very through just form sentence great think say help low line differ turn cause much mean "
    "before move right boy old too same tell does set three want air well also play small end put home read hand "
    "port large spell add even land here must big high such follow act why ask men change went light kind off need "
    "house picture try us again animal point mother world near build self earth father head stand own page should "
    "country found answer school grow study still learn plant cover food sun four between state keep eye never last "
    "let thought city tree cross farm hard start might story saw far sea draw left late run while press close night "
    "real life few north open seem together next white children begin got walk example ease paper group always "
    "music those both mark often letter until mile river car feet care second book carry took science eat room "
    "friend began idea fish mountain stop once base hear horse cut sure watch color face wood main enough plain "
    "model prompt request token sample output answer question batch layer expert value code function error memory "
    "default support kernel file data server user system test result table list string number image text"
).split()


def evaluate(case: dict, noise_lines_count: int) -> dict:
    plain = triage_text(case["log"])
    buried = triage_text(bury(case["log"], noise_lines_count, seed=len(case["log"]))[0])
    label_in_log = in_text(case["key_line"], case["log"])
    return {
        "file": case["file"],
        "source": case["source_repo"],
        "category": case["category"],
        "got": plain.category,
        "rule": plain.findings[0].rule.split("+")[0] if plain.findings else "",
        "category_ok": plain.category == case["category"],
        "category_buried_ok": buried.category == case["category"],
        "key_ok": same_line(case["key_line"], plain.key_line),
        "label_in_log": label_in_log,
        "recall_plain": label_in_log and in_text(case["key_line"], plain.excerpt),
        "recall_buried": label_in_log and in_text(case["key_line"], buried.excerpt),
        "buried_unchanged": (buried.category, buried.key_line) == (plain.category, plain.key_line),
        "tokens": plain.excerpt_tokens,
        "buried_tokens": buried.excerpt_tokens,
    }


def held_out_judge(noise_lines_count: int):
    """What leave_one_source_out reads per case while the case's source's rules are off: the class and the key
    line, plain and buried in noise (recall only where the label quotes a line of the posted log)."""

    def judge(case: dict) -> dict[str, bool | None]:
        plain = triage_text(case["log"])
        buried = triage_text(bury(case["log"], noise_lines_count, seed=len(case["log"]))[0])
        label_in_log = in_text(case["key_line"], case["log"])
        return {
            "category": plain.category == case["category"],
            "category_buried": buried.category == case["category"],
            "key_line": same_line(case["key_line"], plain.key_line),
            "recall_plain": in_text(case["key_line"], plain.excerpt) if label_in_log else None,
            "recall_buried": in_text(case["key_line"], buried.excerpt) if label_in_log else None,
        }

    return judge


def engine_log_blocks(seed: int, aiter_warnings: bool = False) -> str:
    return "\n".join(noise_lines(100_000, seed=seed, aiter_warnings=aiter_warnings)) + "\n"


def prose_blocks(seed: int) -> str:
    """Every line new: vLLM request logging with English prompts (Zipf-weighted words, random ids)."""
    rng = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(len(ENGLISH))]
    lines = []
    for _ in range(30_000):
        words = rng.choices(ENGLISH, weights, k=rng.randrange(8, 40))
        lines.append(
            f"INFO 07-14 10:00:00 [logger.py:39] Received request chatcmpl-{rng.getrandbits(64):x}: "
            f"prompt: '{' '.join(words)}', params: SamplingParams(n=1, temperature={rng.random():.2f})\n"
        )
    return "".join(lines)


CRASH = (
    'Traceback (most recent call last):\n  File "/x/loader.py", line 1, in load\n    load()\n'
    "KeyError: 'model.layers.3.w2_weight_scale'\n"
)


def write_log(megabytes: int, make_block) -> Path:
    """A temporary log of `megabytes` built from fresh blocks, one crash in the middle."""
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as handle:
        written, seed = 0, 0
        while written < megabytes * 1_000_000:
            block = make_block(seed)
            handle.write(block + (CRASH if seed == 2 else ""))
            written, seed = written + len(block), seed + 1
        return Path(handle.name)


def speed(megabytes: int, make_block) -> dict:
    """MB/s of triage_file on a log of `megabytes` built from fresh blocks, one crash in the middle."""
    path = write_log(megabytes, make_block)
    size = path.stat().st_size
    try:
        triage_file(path)
        timings = []
        for _ in range(3):
            started, cpu_started = time.perf_counter(), time.process_time()
            result = triage_file(path)
            timings.append((time.process_time() - cpu_started, time.perf_counter() - started))
    finally:
        path.unlink()
    cpu, wall = statistics.median(t[0] for t in timings), statistics.median(t[1] for t in timings)
    return {
        "bytes": size,
        "median_cpu_s": round(cpu, 3),
        "mb_per_s": round(size / cpu / 1e6, 1),
        "mb_per_s_wall": round(size / wall / 1e6, 1),
        "category": result.category,
    }


def triage_in_child(path: Path) -> dict:
    """Peak RSS and MB per CPU-second of triage_file on `path` in a child process (os.wait4: this child's own
    usage, not the maximum over every child this benchmark has started)."""
    code = "import sys; from porter.triage import triage_file; print(triage_file(sys.argv[1]).category)"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    size = path.stat().st_size
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    stdout, stderr = child.stdout.read(), child.stderr.read()
    _, _, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    cpu = usage.ru_utime + usage.ru_stime
    return {
        "bytes": size,
        "cpu_s": round(cpu, 2),
        "mb_per_s": round(size / cpu / 1e6, 1),
        "mb_per_s_wall": round(size / seconds / 1e6, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "category": stdout.strip() or stderr.strip()[-200:],
    }


def prose_rss(megabytes: int) -> dict:
    """Peak RSS of triage_file on all-new prose of `megabytes` and of four times that: constant memory means the
    two peaks are (nearly) the same."""
    figures = {}
    for size in (megabytes, 4 * megabytes):
        path = write_log(size, prose_blocks)
        try:
            figures[f"{size}_mb"] = triage_in_child(path)
        finally:
            path.unlink()
    return figures


def one_line_file_rss(megabytes: int) -> dict:
    """Peak RSS and MB/s of triage_file in a child process on a file of tqdm redraws with no newline at all."""
    redraw = "".join(
        f"\rLoading safetensors checkpoint shards: {percent:3d}% Completed | {percent}/100 [01:{percent:02d}<02:10]"
        for percent in range(100)
    ).encode()
    block = redraw * (1_000_000 // len(redraw) + 1)
    with tempfile.NamedTemporaryFile(suffix=".log", delete=False) as handle:
        for index in range(megabytes):
            handle.write(block)
            if index == megabytes // 2:
                handle.write(b"\rtorch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB")
        path = Path(handle.name)
    try:
        return triage_in_child(path)
    finally:
        path.unlink()


def done_when(summary: dict) -> dict:
    """Issue #19's "Done when", each condition with its figure (memory: the prose peak grows by under 20% when the
    log is four times longer)."""
    small, large = (figure["peak_rss_mb"] for figure in summary["prose_rss"].values())
    return {
        "loso_at_least_0.9": summary["loso_category_accuracy"] >= 0.9,
        "recall_plain_100": summary["key_line_recall_plain"] == 1.0,
        "recall_buried_100": summary["key_line_recall_buried"] == 1.0,
        "prose_at_least_100_mb_per_cpu_s": summary["speed"]["all_new_prose"]["mb_per_s"] >= 100,
        "prose_constant_memory": large < 1.2 * small,
    }


def print_table(results: list[dict]) -> None:
    by_category = defaultdict(list)
    for result in results:
        by_category[result["category"]].append(result)
    print(f"{'category':28} {'n':>3} {'class':>6} {'key':>6} {'recall plain':>13} {'recall buried':>14} {'tokens':>7}")
    for category, rows in sorted(by_category.items()):
        labelled = sum(r["label_in_log"] for r in rows)
        print(
            f"{category:28} {len(rows):3d} {sum(r['category_ok'] for r in rows):6d} "
            f"{sum(r['key_ok'] for r in rows):6d} "
            f"{sum(r['recall_plain'] for r in rows):>7d}/{labelled:<5d} {sum(r['recall_buried'] for r in rows):>8d}/"
            f"{labelled:<5d} {statistics.median(r['tokens'] for r in rows):7.0f}"
        )
    for result in results:
        misses = [
            name for name in ("category_ok", "category_buried_ok", "key_ok", "buried_unchanged") if not result[name]
        ]
        misses += [name for name in ("recall_plain", "recall_buried") if result["label_in_log"] and not result[name]]
        if misses:
            print(
                f"miss {result['file']} ({result['source']}): want {result['category']} got {result['got']}: {misses}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crashlogs", type=Path, default=crashlogs_dir())
    parser.add_argument("--noise-lines", type=int, default=100_000)
    parser.add_argument("--speed-mb", type=int, default=64)
    parser.add_argument("--rss-mb", type=int, default=1024)
    args = parser.parse_args()
    if not args.crashlogs.is_dir():
        print(f"porter: no labelled logs at {args.crashlogs} (set --crashlogs or PORTER_CRASHLOGS)", file=sys.stderr)
        return 2
    cases = load_cases(args.crashlogs)
    results = [evaluate(case, args.noise_lines) for case in cases]
    print_table(results)
    layered, strict = frozenset(rules.RUNTIME_LAYER_RULES), rules.GRAMMAR_RULES
    judge = held_out_judge(args.noise_lines)
    loso = leave_one_source_out(cases, layered, judge=judge)
    loso_strict = leave_one_source_out(cases, strict, judge=judge)
    by_tracker = leave_one_source_out(cases, layered, by_tracker=True)
    by_tracker_strict = leave_one_source_out(cases, strict, by_tracker=True)
    for name, figure in (
        ("layered", loso),
        ("strict", loso_strict),
        ("layered, by tracker", by_tracker),
        ("strict, by tracker", by_tracker_strict),
    ):
        print(
            f"leave-one-source-out ({name}): {figure['accuracy']:.3f}; misses: {' '.join(figure['misses'])}; "
            f"switched off: {figure['rules_switched_off']}; "
            f"kept on only by declaration: {figure['kept_by_declaration']}"
        )
    for name, figure in (("layered", loso), ("strict", loso_strict)):
        print(f"leave-one-source-out ({name}), each figure: {figure['figures']}; misses: {figure['figure_misses']}")
    owed = owed_to_declarations(cases, layered, strict)
    print(f"layered cases right only while a rule is declared a lower layer (rules.Rule.layer names why): {owed}")
    figures = {
        "engine_log": speed(args.speed_mb, engine_log_blocks),
        "engine_log_with_aiter_warnings": speed(args.speed_mb, lambda seed: engine_log_blocks(seed, True)),
        "all_new_prose": speed(args.speed_mb, prose_blocks),
    }
    for name, figure in figures.items():
        print(
            f"speed {name}: {figure['mb_per_s']} MB/s per CPU second ({figure['mb_per_s_wall']} MB/s wall) on "
            f"{figure['bytes'] / 1e6:.0f} MB, median of 3, one core"
        )
    one_line = one_line_file_rss(args.rss_mb)
    print(
        f"one {one_line['bytes'] / 1e6:.0f} MB line: {one_line['mb_per_s']} MB/s, peak RSS {one_line['peak_rss_mb']} MB"
    )
    prose_memory = prose_rss(args.speed_mb)
    for figure in prose_memory.values():
        print(f"all-new prose, {figure['bytes'] / 1e6:.0f} MB in a child: peak RSS {figure['peak_rss_mb']} MB")
    total, labelled = len(results), max(1, sum(r["label_in_log"] for r in results))
    summary = {
        "cases": total,
        "sources": len({r["source"] for r in results}),
        "category_accuracy": round(sum(r["category_ok"] for r in results) / total, 3),
        "category_accuracy_buried": round(sum(r["category_buried_ok"] for r in results) / total, 3),
        "loso_category_accuracy": loso["accuracy"],
        "loso_figures": loso["figures"],
        "loso_strict_figures": loso_strict["figures"],
        "loso_strict_category_accuracy": loso_strict["accuracy"],
        "loso_by_tracker_category_accuracy": by_tracker["accuracy"],
        "loso_by_tracker_strict_category_accuracy": by_tracker_strict["accuracy"],
        "loso_per_source": loso["per_source"],
        "key_line_accuracy": round(sum(r["key_ok"] for r in results) / total, 3),
        "labelled_key_in_log": labelled,
        "key_line_recall_plain": round(sum(r["recall_plain"] for r in results) / labelled, 3),
        "key_line_recall_buried": round(sum(r["recall_buried"] for r in results) / labelled, 3),
        "buried_unchanged": round(sum(r["buried_unchanged"] for r in results) / total, 3),
        "excerpt_tokens_median": statistics.median(r["tokens"] for r in results),
        "buried_tokens_median": statistics.median(r["buried_tokens"] for r in results),
        "noise_lines": args.noise_lines,
        "speed": figures,
        "one_line_file": one_line,
        "prose_rss": prose_memory,
        "loso_owed_to_declared_rules": owed,
    }
    summary["done_when"] = done_when(summary)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
