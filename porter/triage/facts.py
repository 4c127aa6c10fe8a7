"""Structured facts a rule-based fixer can act on, pulled from the lines of one finding.

Covers, per class: the compiler diagnostic (file, line, header or symbol, compiler), the shapes and
names of a weight-load mismatch (parameter, module prefixes, dtypes, quantisation), the shape fields
and config path of an untuned-kernel fallback, requested/free memory and the memory flags, the dtype,
arch and kernel of an unsupported-path error, and what a start-up was waiting for. Extraction is by
the form of the text (key=value pairs, `file:line:col: error:`, `torch.Size([...])`), never by one
log's wording. Does not classify lines (rules.py).
"""

from __future__ import annotations

import re

from porter.triage.mechanisms import DTYPE
from porter.triage.rules import CUDA_ONLY_STATEMENT, KERNEL_HINT
from porter.triage.toolchain import (
    CMAKE_ERROR,
    COMPILER_DIAGNOSTIC,
    CUDA_ONLY,
    ROCM_MACRO,
    SYSTEM_PATH,
    UNDEFINED,
    cuda_only_in_message,
    cuda_only_in_source,
    origin_of,
)

SHAPE = re.compile(r"torch\.Size\(\[[\d, ]*\]\)|\[\d+(?:\s*,\s*\d+)+\]|\(\d+(?:\s*,\s*\d+)+\)")
MODULE_NAME = re.compile(
    r"\b(?:model|language_model|transformer|decoder|encoder|lm_head|mtp|layers|backbone)(?:\.[\w*]+)+"
)
QUOTED_NAME = re.compile(r"'([A-Za-z_][\w]*(?:\.[\w*]+)+|[a-z_]\w*_(?:weight|scale|bias)\w*)'")
QUANT_NAME = re.compile(
    r"(?i)\b(?:mxfp4|mxfp8|nvfp4|fp4|fp8|int4|int8|w4a4|w4a8|w8a8|w4a16|gptq|awq|quark|compressed[-_]tensors"
    r"|ptpc|per_1x32|per_1x128|per_token|per_tensor|blockscale|qweight)\b"
)
KEY_VALUE = re.compile(r"(?:^|[\s,(\[{])([A-Za-z_]\w{0,15})\s*[=:]\s*(\.\.\.|-?\d[\w./]*|[\w.]+)")
TEXT_VALUED_KEYS = {"dtype", "q_dtype_a", "q_dtype_w", "q_type", "act_type", "device_name", "arch", "otype"}
CONFIG_PATH = re.compile(r"(/[^\s'\"\]]+?\.(?:csv|json|yaml|yml))\b|\b(\w[\w./-]*/configs?/[^\s'\",\]]+)")
SOURCE_LOCATION = re.compile(r"([\w/.-]+\.(?:py|h|hpp|cpp|cc|cu|cuh|hip|c)):(\d+)")
FLAG = re.compile(
    r"(?i)\b(mem[-_]fraction[-_]static|gpu[-_]memory[-_]utilization|max[-_]model[-_]len|context[-_]length"
    r"|max[-_]total[-_]tokens|chunked[-_]prefill[-_]size|cuda[-_]graph[-_]max[-_]bs|max[-_]num[-_]seqs"
    r"|max[-_]running[-_]requests|kv[-_]cache[-_]dtype)\b"
)
GFX = re.compile(r"\bgfx\d\w*\b")
COMPILER = re.compile(r"(?:^|[\s/])(hipcc|amdclang\+\+|clang\+\+|clang|g\+\+|gcc|c\+\+|nvcc|hipify\w*)(?=\s|$)")
HEADER = re.compile(r"(?:'|\b)([\w/]+\.(?:h|hpp|cuh))(?:'|:)\s*(?:file not found|No such file)")
QUOTED_SYMBOL = re.compile(r"['\"‘`]([^'\"’`]+)['\"’`]")
DEFINED_ROCM_MACROS = ("USE_ROCM", "__HIP_PLATFORM_AMD__", "__HIPCC__")
DEFINED_ROCM_MACRO = re.compile(r"\s-D(" + "|".join(DEFINED_ROCM_MACROS) + r")\b")  # in a compile command
MOE_TUPLE_FIELDS = (
    "cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype",
    "q_dtype_a", "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1",
)  # fmt: skip
UNIT_BYTES = {
    "B": 1,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}
WAITING_FOR = (  # most specific first: the thing named, then the URL that stayed silent, then the phase
    re.compile(r"(?i)waiting for ([^,;]+?)(?:[,;]|\.\s|$)"),
    re.compile(r"(\S+) (?:did not answer|did not become|never answered)"),
    re.compile(r"(?i)(server init|startup|start-up|health\S*)"),
)


def _unique(values, limit: int = 12) -> list[str]:
    return list(dict.fromkeys(value for value in values if value))[:limit]


def compiler_facts(text: str, context: list[str]) -> dict:
    """File, line, message, header or symbol of a toolchain error; the CUDA-only `api` and the ROCm `macro` a guard
    would test; `origin`: where in the project the error is (its own file, or the project file that led to it)."""
    key_line = text.split("\n", 1)[0]
    facts = _diagnostic_facts(key_line)
    compiler = next(filter(None, map(COMPILER.search, reversed(context))), None)
    if compiler:
        facts["compiler"] = compiler.group(1)
    undefined = UNDEFINED.search(key_line)
    if undefined:
        facts["symbol"] = (undefined.group(1) or undefined.group(2)).strip()
        library = re.search(r"(\S+\.so)\b", key_line)
        facts["library"] = library.group(1) if library else None
    resource = re.search(r"out of resource: ([\w ]+), Required: (\d+), Hardware limit: (\d+)", text)
    if resource:
        facts.update(resource=resource.group(1), required=int(resource.group(2)), limit=int(resource.group(3)))
    facts.update(_guard_facts(key_line, text, context))
    if facts.get("file") and not SYSTEM_PATH.match(facts["file"]):
        facts["origin"] = f"{facts['file']}:{facts['line']}"
    else:  # a system header's error, a link error or a missing tool: the project file that led there
        origin = origin_of(text, context)
        facts.update({"origin": origin} if origin else {})
    return facts


def _diagnostic_facts(key_line: str) -> dict:
    """What a compiler's `file:line:col: error: message` or CMake's `CMake Error at file:line` says."""
    facts: dict = {}
    match = COMPILER_DIAGNOSTIC.search(key_line)
    if match:
        message = match.group("message").strip()
        facts.update(file=match.group("file"), line=int(match.group("line") or match.group("nvcc_line")))
        facts.update(column=int(match.group("column")) if match.group("column") else None, message=message)
        header = HEADER.search(message) or re.search(r"'([\w/.]+\.(?:h|hpp|cuh))'", message)
        symbol = CUDA_ONLY.search(message) or QUOTED_SYMBOL.search(message)
        if header:
            facts["header"] = header.group(1)
        if symbol:
            facts["symbol"] = symbol.group(1) if symbol.re is QUOTED_SYMBOL else symbol.group(0)
    cmake = CMAKE_ERROR.search(key_line)
    if cmake and cmake.group("file"):
        facts.update(file=cmake.group("file"), line=int(cmake.group("line")))
    return facts


def _guard_facts(key_line: str, text: str, context: list[str]) -> dict:
    """The CUDA-only API the error, the source under it or the failing Python statement names, and the ROCm macro
    a guard would test: the one the error names, else what the build defines (USE_ROCM first: torch's)."""
    facts: dict = {}
    statement = next(filter(None, map(CUDA_ONLY_STATEMENT.pattern.search, reversed(context))), None)
    api = cuda_only_in_message(key_line) or cuda_only_in_source(text) or (statement and statement.group(0))
    if api:
        facts["api"] = api
    macro = ROCM_MACRO.search(key_line)
    defined = next((DEFINED_ROCM_MACRO.findall(line) for line in reversed(context) if " -D" in line), [])
    if macro or defined:
        facts["macro"] = macro.group(0) if macro else min(defined, key=DEFINED_ROCM_MACROS.index)
    return facts


def shape_facts(text: str, context: list[str], module_names: list[str]) -> dict:
    everything = "\n".join([text, *context])
    names = QUOTED_NAME.findall(text) or MODULE_NAME.findall(text) or re.findall(r"\b(\w+)\.shape\b", text)
    facts = {
        "shapes": _unique(SHAPE.findall(text), 4),
        "parameter": names[0] if names else None,
        "dtypes": _unique(match.group(0) for match in DTYPE.finditer(everything)),
        "quantization": _unique(match.group(0).lower() for match in QUANT_NAME.finditer(everything)),
        "module_prefixes": _unique([*MODULE_NAME.findall(everything), *module_names], 16),
    }
    suggestion = re.search(r"Did you mean:? '([^']+)'", text)
    if suggestion:
        facts["suggestion"] = suggestion.group(1)
    return facts


def shape_fields(text: str) -> dict:
    """The shape of an untuned kernel call, from key=value / key:value pairs or aiter's MoE key tuple."""
    tuple_match = re.search(r"\((\s*'?gfx\w+'?\s*,)?\s*(\d+\s*,[^()]*)\)", text)
    if tuple_match and re.search(r"(?i)moe|fmoe", text):
        values = [value.strip().strip("'\"") for value in tuple_match.group(2).split(",")]
        fields = dict(zip(MOE_TUPLE_FIELDS, values, strict=False))
        if tuple_match.group(1):
            fields["arch"] = tuple_match.group(1).strip(" ,'\"")
        return fields
    fields: dict = {}
    config = CONFIG_PATH.search(text)
    if config:  # vLLM names the config file after the shape: E=128,N=1024,device_name=...,dtype=....json
        stem = (config.group(1) or config.group(2)).rsplit("/", 1)[-1].rsplit(".", 1)[0]
        fields.update(pair.split("=", 1) for pair in stem.split(",") if "=" in pair)
    described = re.split(r"will use|using default|using torch solution", text, maxsplit=1)[0]
    for key, value in KEY_VALUE.findall(described):
        numeric = value == "..." or value[:1].isdigit() or value[:1] == "-"
        if (numeric or key in TEXT_VALUED_KEYS) and key not in fields and len(fields) < 16:
            fields[key] = value if value == "..." else value.rstrip(".,")
    return fields


def fallback_facts(text: str) -> dict:
    config = CONFIG_PATH.search(text)
    kind = (
        "fused_moe"
        if re.search(r"(?i)moe", text)
        else "gemm"
        if re.search(r"(?i)gemm|\bM:\s*\S+,\s*N:", text)
        else None
    )
    return {
        "shape": shape_fields(text),
        "config_path": (config.group(1) or config.group(2)) if config else None,
        "kernel": kind,
        "arch": (GFX.findall(text) or [None])[0],
    }


def memory_facts(text: str, context: list[str]) -> dict:
    everything = "\n".join([*context, text])

    def amount(pattern: str) -> int | None:
        """Bytes of the first (number, unit) the pattern finds; None when the unit is not one of UNIT_BYTES."""
        for found in re.finditer(pattern, everything):
            number, unit = [value for value in found.groups() if value is not None][:2]
            if unit in UNIT_BYTES:
                return int(float(number) * UNIT_BYTES[unit])
        return None

    budget = re.search(r"profiled value (-?\d+)|max_total_num_tokens=(-?\d+)|KV cache size: (\d+) tokens", everything)
    avail = re.findall(r"avail mem=(\d+(?:\.\d+)?\s*GB)", everything)
    return {
        "requested_bytes": amount(r"(?i)tried to allocate (\d+(?:\.\d+)?)\s*(\w+)"),
        "free_bytes": amount(r"(?i)(\d+(?:\.\d+)?)\s*(\w+) (?:is )?free|free[^\d]{0,20}(\d+(?:\.\d+)?)\s*(\w+)"),
        "total_bytes": amount(r"(?i)total capacity of (\d+(?:\.\d+)?)\s*(\w+)"),
        "kv_budget_tokens": int(next(value for value in budget.groups() if value)) if budget else None,
        "available_after_weights": avail[-1] if avail else None,
        "flags": _unique(flag.lower().replace("_", "-") for flag in FLAG.findall(everything)),
    }


def unsupported_facts(text: str, context: list[str], arch: str | None) -> dict:
    everything = "\n".join([*context, text])
    kernels = re.findall(r"\b\w*(?:gemm|GEMM|moe|fmha|Fmha|attn|ck_\w+|kernel)\w*\b|\S+\.(?:co|hsaco)\b", text)
    location = SOURCE_LOCATION.search(text)
    return {
        "dtypes": _unique(match.group(0) for match in DTYPE.finditer(text)),
        "arch": (GFX.findall(everything) or [arch])[0],
        "kernel": kernels[0] if kernels else None,
        "source": f"{location.group(1)}:{location.group(2)}" if location else None,
        "shape": shape_fields(everything) or None,
    }


def timeout_facts(text: str, context: list[str]) -> dict:
    found = next((match for match in (pattern.search(text) for pattern in WAITING_FOR) if match), None)
    seconds = re.search(r"(\d+(?:\.\d+)?)\s*(?:s\b|sec|second)", text)
    activity = [line for line in context if line.strip() and not line.lstrip().startswith("...")]
    return {
        "waiting_for": found.group(1) if found else None,
        "timeout_s": float(seconds.group(1)) if seconds else None,
        "last_activity": activity[-1].strip() if activity else None,
    }


def facts_for(category: str, text: str, context: list[str], module_names: list[str], arch: str | None) -> dict:
    """Facts of one finding; `text` is its key line with continuations, `context` the lines around it."""
    if category in ("missing_rocm_guard", "compile_error"):
        return compiler_facts(text, context)
    if category in ("shape_mismatch", "quant_config_mismatch"):
        return shape_facts(text, context, module_names)
    if category == "slow_fallback_perf":
        return fallback_facts(text)
    if category == "out_of_memory":
        return memory_facts(text, context)
    if category in ("dtype_unsupported", "unsupported_arch_or_kernel"):
        return unsupported_facts(text, context, arch)
    if category == "startup_timeout":
        return timeout_facts(text, context)
    if category == "comm_error":
        operation = re.search(
            r"\b(nccl\w+|all_?reduce|all_?gather|reduce_?scatter|barrier|all_?to_?all|broadcast)\b", text, re.I
        )
        return {
            "backend": "RCCL/NCCL" if re.search(r"(?i)nccl|rccl", text) else None,
            "operation": operation and operation.group(1),
        }
    if category == "gpu_memory_fault":
        address = re.search(r"on address (0x[0-9a-fA-F]+)", text)
        hints = [KERNEL_HINT.search(line) for line in context]
        return {
            "address": address and address.group(1),
            "hint_lines": [line for line, hint in zip(context, hints, strict=True) if hint][-3:],
        }
    return {}
