"""Facts about the real stack that no package porter can install carries: read once in upstream's source, pinned here.

Covers where each engine image keeps the code an agent patches (and which image porter init defaults to for an
engine), and how aiter looks up and names a tuned fused-MoE config (the columns of each quantization, shared experts,
expert parallelism, its tuner), with the merge of porter's tuned rows into aiter's shipped tables by that lookup.
Each fact names the upstream file and the commit it was read from; tests/conformance checks porter's use of them
(and, where a PyPI package holds the same fact, the fact itself). The notes with the quoted lines:
/work/notes/upstream-facts.md (outside the repo). Does not cover flag names (the engines' own parsers answer
those at preflight) or anything measured.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ImageLayout:
    """Where an image installs a tree the agent may patch, and the upstream file that says so."""

    image: str
    repo: str
    path: str
    source: str

    @property
    def upstream(self) -> str:
        return UPSTREAMS[self.repo]


UPSTREAMS = {
    "vllm": "https://github.com/vllm-project/vllm.git",
    "sglang": "https://github.com/sgl-project/sglang.git",
    "aiter": "https://github.com/ROCm/aiter.git",
}


IMAGE_LAYOUTS = (
    # final stage: `uv pip install --system *.whl` (a wheel in the system Python's dist-packages; Python 3.12 from
    # docker/Dockerfile.rocm_base, ARG PYTHON_VERSION=3.12); /app/vllm only gets benchmarks/, examples/, docker/
    ImageLayout(
        "vllm/vllm-openai-rocm:v0.25.1",
        "vllm",
        "/usr/local/lib/python3.12/dist-packages/vllm",
        "vllm-project/vllm docker/Dockerfile.rocm @ 00305ee5, docker/Dockerfile.rocm_base @ 00256d59",
    ),
    # WORKDIR /sgl-workspace; `git clone ... sglang` then `pip install -e "python[all_hip]"` (editable)
    ImageLayout(
        "lmsysorg/sglang-rocm:v0.5.20-rocm720-mi35x-20260919",
        "sglang",
        "/sgl-workspace/sglang",
        "sgl-project/sglang docker/rocm.Dockerfile @ 004ae46f",
    ),
    # `git clone ${AITER_REPO}` in /sgl-workspace, `pip install --config-settings editable_mode=compat -e .`
    ImageLayout(
        "lmsysorg/sglang-rocm:v0.5.20-rocm720-mi35x-20260919",
        "aiter",
        "/sgl-workspace/aiter",
        "sgl-project/sglang docker/rocm.Dockerfile @ 004ae46f",
    ),
)

# ROCm/aiter @ c16d44b93a528b2a4bfd6d8d3409116d465872a9 (the AITER_COMMIT_DEFAULT of sglang's rocm.Dockerfile):
# aiter/fused_moe.py looks a tuned config up by M padded to the next power of two, M >= 32768 by these tiers.
AITER_COMMIT = "c16d44b93a528b2a4bfd6d8d3409116d465872a9"
AITER_PADDED_M_TIERS = (32768, 131072)
# aiter/configs/untuned_fmoe.csv's header, which gemm_moe_tune.py -i reads
AITER_FMOE_UNTUNED_COLUMNS = (
    "token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,doweight_stage1"
).split(",")


# aiter/utility/dtypes.py defaultDtypes: the torch fp8 type aiter computes in on each GPU (OCP e4m3 on gfx950, the
# FNUZ variant on gfx942)
AITER_FP8 = {"gfx942": "torch.float8_e4m3fnuz", "gfx950": "torch.float8_e4m3fn"}
# (q_dtype_a, q_dtype_w, q_type) of a quantization as aiter's own untuned fused-MoE lists write it,
# aiter/configs/model_configs/*_untuned_fmoe.csv; {fp8} is the GPU's AITER_FP8. Activation Silu, except
# ActivationType.Swiglu for gpt-oss's clamped SwiGLU (gptoss_*); dtype torch.bfloat16; use_g1u1 1; doweight_stage1 0.
AITER_MOE_QUANT = {
    "fp8-block": ("{fp8}", "{fp8}", "QuantType.per_1x128"),  # a8w8_blockscale_untuned_fmoe_{ds_v3,glm5,qwen3_235b}
    "fp8-channel": ("{fp8}", "{fp8}", "QuantType.per_Token"),  # glm5_ptpc_untuned_fmoe.csv (per token, per channel)
    "fp4": ("torch.float4_e2m1fn_x2", "torch.float4_e2m1fn_x2", "QuantType.per_1x32"),  # glm5_fp4, gptoss_fp4
    "fp4-weight-only": ("torch.bfloat16", "torch.float4_e2m1fn_x2", "QuantType.per_1x32"),  # gptoss_a16w4
    "int4-weight-only": ("torch.bfloat16", "torch.int4", "QuantType.per_1x32"),  # kimik2_i4 (group 32)
    "none": ("torch.bfloat16", "torch.bfloat16", "QuantType.No"),  # qwen3_235b_bf16
}
# The same lists' shapes: inter_dim is one rank's share of the expert width (GLM-5 fp4: 2048, 1024, 512, 256); a
# shared expert of the expert width is tuned fused as one more expert that every token picks (DeepSeek-V3, GLM-5:
# expert 257, topk 9; Qwen3.5-397B: 513/11), and Kimi-K2's and Qwen3-Next's lists hold both shapes (384/8, 385/9);
# under expert parallelism a rank holds whole experts, its local count (qwen3_235b: inter 1536, expert 16 of 128, topk
# 8: fused_moe.py keys on the routed top-k, `topk -= int(is_ep)` strips the masked slot); gpt-oss's 2880 is tuned as
# 3072 (model_dim and inter_dim padded to a multiple of 256 for MXFP4).
AITER_MXFP4_PAD = 256
# ROCm/aiter @ e4048607 (the tables in tests' ../shared/upstream/aiter) and c16d44b9 alike. The tuner
# (csrc/ck_gemm_moe_2stages_codegen/gemm_moe_tune.py -i UNTUNED -o TUNED) skips a shape only when its -o file holds it
# (aiter/utility/base_tuner.py get_retune_gemm_list reads -o alone): a fresh -o re-measures every row. At import the
# engine concatenates aiter/configs/tuned_fmoe.csv and every model_configs/*tuned_fmoe*.csv (jit/core.py
# get_config_file), and a key twice under one `_tag` makes update_config_files rewrite the files and raise; a row
# lacking `_tag` gets 0 where the shipped rows have "", so a tuner row without the column is never its duplicate and
# the lookup (fused_moe.py get_2stage_cfgs: rows tagged flydsl_fallback dropped, the first row of a key kept) takes the
# row that comes first, whatever its speed. porter therefore merges the rows it tunes into the shipped tables itself.
# With --compare --update_improved the tuner times the engine's own operator on each shape before tuning (with the
# shipped row) and after (with its new one) and writes to -o only the shapes >= --min_improvement_pct (3) faster, or
# with no working row before (base_tuner.py _build_compare_update_plan): the same-harness comparison.
AITER_FMOE_TUNER = "csrc/ck_gemm_moe_2stages_codegen/gemm_moe_tune.py"
AITER_FMOE_TUNE_FLAGS = "--compare --update_improved"
AITER_FMOE_TABLES = ("aiter/configs/tuned_fmoe.csv", "aiter/configs/model_configs/*tuned_fmoe*.csv")
# fused_moe.py get_2stage_cfgs _INDEX_COLS: the lookup key; a missing or placeholder gfx is read from cu_num
# (jit/utils/chip_info.py _LEGACY_CU_NUM_TO_GFX); jit/core.py fills a column a file lacks with 0 (gfx: from cu_num).
AITER_FMOE_KEY = ("gfx", "cu_num", *AITER_FMOE_UNTUNED_COLUMNS)
AITER_GFX_OF_CU_NUM = {"256": "gfx950", "80": "gfx942", "304": "gfx942"}
AITER_FMOE_FALLBACK_TAG = "flydsl_fallback"
TABLE_MAX_BYTES = 32 << 20


def aiter_padded_m(tokens: int) -> int:
    """The `token` value under which aiter looks up the tuned config for a batch of `tokens` rows
    (aiter/fused_moe.py: get_padded_M, nextPow2)."""
    if tokens < AITER_PADDED_M_TIERS[0]:
        return 1 if tokens <= 1 else 1 << (tokens - 1).bit_length()
    return max(tier for tier in AITER_PADDED_M_TIERS if tokens >= tier)


def default_image(engine: str) -> str | None:
    """The pinned image porter init writes for an engine: the one that installs the engine's own tree."""
    return next((entry.image for entry in IMAGE_LAYOUTS if entry.repo == engine), None)


def layouts_of(image: str) -> list[ImageLayout]:
    """Every tree a pinned image installs that the agent may patch."""
    return [entry for entry in IMAGE_LAYOUTS if entry.image == image]


def layout_for(image: str, repo: str) -> ImageLayout | None:
    return next((entry for entry in IMAGE_LAYOUTS if entry.image == image and entry.repo == repo), None)


def layout_notes(image: str, repos: dict[str, str]) -> list[str]:
    """One line per declared repo of a pinned image: where it is, and a warning when the task looks elsewhere."""
    notes = []
    for name, path in repos.items():
        known = layout_for(image, name)
        if known is None:
            continue
        if known.path == path:
            notes.append(f"repo {name}: {path} is where {image} installs it ({known.source})")
        else:
            notes.append(f"WARNING repo {name}: {image} installs it at {known.path}, not {path} ({known.source})")
    return notes


@dataclass
class TunedMerge:
    """porter's tuned rows merged into aiter's tables: each changed table's new text, and one line per tuned row."""

    tables: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("replaced", "kept", "new", "failed"), 0))


def aiter_fmoe_key(row: dict) -> tuple[str, ...]:
    """The key aiter's lookup finds a row by (its values as the CSV spells them)."""
    gfx = row.get("gfx") or ""
    gfx = AITER_GFX_OF_CU_NUM.get(row["cu_num"], "") if gfx in ("0", "nan", "None", "") else gfx
    return (gfx, *(str(row[column]) for column in AITER_FMOE_KEY[1:]))


def merge_tuned_fmoe(tables: dict[str, str], tuned: str, new_rows_into: str) -> TunedMerge:
    """Merge the tuner's rows (`tuned`) into aiter's tables, given in aiter's order: a row whose `us` is lower than
    that of the row aiter's lookup finds for its key (aiter's own rule between duplicates) replaces it in place (in
    that row's file and columns, untagged); otherwise that row stays; a key no table holds is appended to the table
    holding most rows of its shape (else `new_rows_into`); a row with no valid time is left out."""
    parsed = {name: _table(text, name) for name, text in tables.items()}
    found: dict[tuple, tuple[str, int]] = {}
    for name, (_, rows, _) in parsed.items():
        for index, row in enumerate(rows):
            if (row.get("_tag") or "") != AITER_FMOE_FALLBACK_TAG:
                found.setdefault(aiter_fmoe_key(row), (name, index))
    merge, changed, (columns, tuned_rows, _) = TunedMerge(), set(), _table(tuned, "the tuner's output")
    parsed.setdefault(new_rows_into, (columns, [], []))  # a tree without it gets one, in the tuner's columns
    for row in tuned_rows:
        key = aiter_fmoe_key(row)
        name, index = found.get(key, (_home(parsed, key, new_rows_into), None))
        header, rows, lines = parsed[name]
        before = None if index is None else rows[index]
        action = "failed" if _us(row) == math.inf else "new" if before is None else "kept"
        action = "replaced" if action == "kept" and _us(row) < _us(before) else action
        merge.counts[action] += 1
        merge.lines.append(f"{action} {','.join(key)}: {before and before['us']} us -> {row['us']} us")
        if action in ("new", "replaced"):
            _fit(header, rows, lines, row)
            merged = {**dict.fromkeys(header, "0"), "_tag": "", "gfx": key[0], **row}
            if index is None:
                found[key], index = (name, len(rows)), len(rows)
                rows.append(merged)
                lines.append("")
            rows[index], lines[index] = merged, ""
            changed.add(name)
    merge.tables = {name: _csv(tables.get(name, ""), *parsed[name]) for name in changed}
    return merge


def _home(parsed: dict, key: tuple, default: str) -> str:
    """The table holding most rows of the key's shape (all of it but token and inter_dim): where a model's rows live."""
    homes = Counter(
        name for name, (_, rows, _) in parsed.items() for row in rows if _shape(aiter_fmoe_key(row)) == _shape(key)
    )
    return homes.most_common(1)[0][0] if homes else default


def _shape(key: tuple) -> tuple:
    return key[:2] + key[3:4] + key[5:]


def _fit(header: list[str], rows: list[dict], lines: list[str], row: dict) -> None:
    """Give a table the columns of `row` it lacks where the row holds what aiter would not fill in itself when it
    merges the file (jit/core.py: gfx from cu_num, 0 otherwise); its other rows get that fill."""
    for column in [name for name in row if name is not None and name not in header]:
        if row[column] not in ("", _fill(row, column)):
            header.append(column)
            for index, other in enumerate(rows):
                other[column], lines[index] = _fill(other, column), ""


def _fill(row: dict, column: str) -> str:
    return AITER_GFX_OF_CU_NUM.get(row.get("cu_num") or "", "") if column == "gfx" else "0"


def _table(text: str, name: str) -> tuple[list[str], list[dict], list[str]]:
    """(columns, rows, each row's line as written: kept byte for byte unless the row changes)."""
    reader = csv.DictReader(io.StringIO(text))
    try:
        rows, header = list(reader), list(reader.fieldnames or [])
    except csv.Error as exc:
        raise ValueError(f"{name} is not a readable CSV: {exc}") from None
    missing = [column for column in (*AITER_FMOE_KEY[1:], "us") if column not in header]
    if missing:
        raise ValueError(f"{name} is not an aiter tuned fused-MoE table: no column {', '.join(missing)}")
    lines = text.splitlines(keepends=True)[1:]
    return header, rows, lines if len(lines) == len(rows) else [""] * len(rows)


def _us(row: dict) -> float:
    """A row's time in microseconds; infinite when the tuner recorded none (empty, zero, negative: a failed shape)."""
    try:
        value = float(row.get("us") or "nan")
    except ValueError:
        return math.inf
    return value if 0 < value < math.inf else math.inf


def _csv(text: str, header: list[str], rows: list[dict], lines: list[str]) -> str:
    """The table as CSV: its header and untouched rows as they were written, the others in its columns."""
    out = io.StringIO()
    writer = csv.DictWriter(out, header, extrasaction="ignore", lineterminator="\n")
    written = (text.splitlines(keepends=True) or [""])[0]
    if next(csv.reader([written]), []) == header:
        out.write(written if written.endswith("\n") else written + "\n")
    else:
        writer.writeheader()
    for row, line in zip(rows, lines, strict=True):
        if line:
            out.write(line if line.endswith("\n") else line + "\n")
        else:
            writer.writerow({column: row.get(column) or "" for column in header})
    return out.getvalue()


def merge_into_tree(root: Path, tuned: str) -> TunedMerge:
    """Merge the tuner's output file (`tuned`, under the aiter tree `root`) into the tree's shipped tables, write the
    tables that changed, and remove the output: the tree holds each key once, as aiter reads it."""
    root, first, pattern = root.resolve(), *AITER_FMOE_TABLES
    output = (root / tuned).resolve()
    if not output.is_relative_to(root) or not output.is_file():
        raise ValueError(f"{tuned}: no tuner output under {root}")
    paths = [root / first, *sorted(path for path in root.glob(pattern) if "untuned" not in path.name)]
    tables = {str(path.relative_to(root)): _capped(path) for path in paths if path.is_file() and path != output}
    try:
        merge = merge_tuned_fmoe(tables, _capped(output), first)
    finally:  # the tuner's file never stays in the tree: a failed merge is reported, not left half-applied
        output.unlink()
    outside = [name for name in merge.tables if not (root / name).resolve().is_relative_to(root)]
    if outside:
        raise ValueError(f"{', '.join(outside)} links out of {root}: no table was written")
    for name, text in merge.tables.items():
        (root / name).write_text(text)
    return merge


def _capped(path: Path) -> str:
    if path.stat().st_size > TABLE_MAX_BYTES:
        raise ValueError(f"{path.name} is over {TABLE_MAX_BYTES >> 20} MiB: not an aiter tuned table")
    return path.read_text()
