"""What a log line means: the failure classes, their rules, and how specific each match is.

Covers classifying a line against the class rules (the table, one rule per mechanism, is mechanisms.py),
generic error and exception lines, healthy-start markers, the kernel hints used to blame a memory fault
and the rule sets the leave-one-source-out benchmark keeps on. Rules describe classes (every KeyError on
a quantised parameter name), never one log's text. Facts extraction lives in facts.py; state in scanner.py.

Scores order the classes when one log shows several: the more a line names a root cause, the higher
its score (a first compiler `error:` beats the build tool's final "subcommand failed"; a negative KV
budget beats the memory fault it later causes; any crash beats a slow-fallback warning). The precedence,
highest first (a raised exception adds EXCEPTION_BONUS to its line's score):
  100-95  the toolchain (toolchain.py): CUDA-only code or the CUDA toolkit reached in a ROCm build, then the
          first compiler, linker or CMake `error:`
  92-89   lines naming a cause: shapes, memory budgets, Triton/extension build and import-time link errors,
          quantised tensor names, composable_kernel's verdict on the problem, dtypes, HIP out-of-memory,
          CUDA-only imports and CUDA-only statements in a traceback
  88-84   GPU memory faults, missing code objects, GPU hangs, collectives (a line the collective library wrote
          is its report whatever failed call it quotes: it claims the line and takes no exception bonus, so a
          memory fault logged beside it still outranks it), a kernel library's refusal
  60-90   documented status codes, by how far the code alone decides (status.py)
  72-70   start-up that never completes; a kernel library's missing per-arch module
  60      a build tool's summary that a build failed
  55-30   unclassified (`other`): exceptions, what(), missing modules, error lines, process death
  20, 15  the last dispatched kernel (a hint for a fault); slow-fallback warnings
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ahocorasick_rs import AhoCorasick

from porter.triage.mechanisms import RULES as CLASS_RULES
from porter.triage.mechanisms import Rule
from porter.triage.status import status_class
from porter.triage.toolchain import TOOLCHAIN_RULES

RULES = (*TOOLCHAIN_RULES, *CLASS_RULES)  # in the order a line is tried against them

CATEGORIES = (
    "shape_mismatch",
    "quant_config_mismatch",
    "missing_rocm_guard",
    "unsupported_arch_or_kernel",
    "out_of_memory",
    "dtype_unsupported",
    "compile_error",
    "comm_error",
    "gpu_memory_fault",
    "startup_timeout",
    "slow_fallback_perf",
    "other",
)

EXCEPTION_BONUS = 3  # a raised exception outranks a log line of the same class: it is what stopped the process
GENERIC_EXCEPTION_SCORE = 55
WEAK_SCORE = 60  # lines scoring below this that were logged before a healthy start are not failures


SLOW_FALLBACK = Rule(
    "untuned_shape",
    "slow_fallback_perf",
    15,
    ("tuned", "default", "optimal", "not found", "torch solution", "back", "slow", "overrid"),
    r"not found tuned config|(?i:using default (?:moe )?config)|sub-?optimal|using [12]stage default"
    r"|Config file not found"
    r"|(?i:no tuned|untuned)|will use default config|using torch solution|(?i:fall(?:ing)? ?back to (?:the |a )?"
    r"(?:slow|default|naive|reference|torch|triton))|(?i:slow (?:path|fallback))|fallback kernel"
    r"|(?i:overriding \S+ backend)",
    confidence=0.7,
)
# Probing for other vendors' platforms fails on every ROCm host: that is not the failure.
EXPECTED_ON_ROCM = re.compile(
    r"(?i)\b(?:cuda|tpu|xpu|hpu|neuron) platform\b|\bnvml\b|libtpu|intel_extension_for_pytorch|habana"
)
# A warning that says it falls back is a performance finding, even when it gives "unsupported" as the reason.
WARNING_LINE = re.compile(r"\b\w*Warning\b|\bWARN(?:ING)?\b|\bwarn(?:ing)?:")
DISPATCH_TRACE = Rule(
    "last_dispatched_kernel",
    "gpu_memory_fault",
    20,
    ("shadername",),
    r"ShaderName\s*:\s*\S+",
    layer="HIP's AMD_LOG_LEVEL=4 dispatch log (clr rocclr/device/rocm/rocvirtual.cpp 'ShaderName : %s')",
)

HIP_ERROR = re.compile(r"HIP error|hipError\w+|HSA_STATUS_ERROR_\w+|HSA_STATUS_\w+")
# Literal-first alternatives (no leading \\b\\w*): the regex engine then skips ahead by first character.
ERROR_WORD = re.compile(r"ERROR\b|Error\b|error:|FAILED\b|[Ff]ailed\b|fatal\b|Exception\b")
# What a C++ program, a scheduler or a node manager says when something died without a Python exception.
PLAIN_FAILURE = re.compile(
    r"^what\(\):|terminate called after throwing|(?i:\bnot responding\b|no such file or directory|\bunreachable\b"
    r"|connection refused|permission denied|segmentation fault)"
)
MISSING_MODULE = re.compile(r"No module named '[\w.]+'|cannot import name '\w+'")
DEATH = re.compile(
    r"exit code|exit status|exitcode|\bKilled\b|\bAborted\b|core dumped|SIGABRT|SIGKILL|SIGSEGV|sigquit|died"
)
NOT_AN_ERROR = re.compile(r"ServerArgs\(|non-default args|args=Namespace\(|error_?log|_error\w*=|0 errors?\b")
# aiter's JIT builder lower-cases "Error:" when it colours its history (RuntimeError: -> Runtimeerror:).
EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*(?P<name>[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|OutOfResources|Warning|error))"
    r"(?::\s?|$)"
)
TRACEBACK_START = re.compile(r"Traceback \(most recent")
FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+)(?:, in (?P<function>\S+))?')
CHAIN = re.compile(r"^(?:The above exception was the direct cause|During handling of the above exception)")
HEALTHY = re.compile(r"ready to roll|Application startup complete|Uvicorn running on")
KERNEL_HINT = re.compile(
    r"ShaderName\s*:\s*(?P<shader>\S+)|kernel(?: name)?\s*[:=]\s*(?P<kernel>[\w:<>.$-]+)"
    r"|finish build \[?(?P<built>[^\s\],]+)|start build \[?(?P<building>[^\s\],]+)"
    r"|\[fused_moe\] using (?P<moe>\w+ \w+)"
)
STATUS_NEEDS = ("status_", "rror_", "hiperror", "nccl", "hip error", "cuda error", "runtime error")
EXPECTED_NEEDS = ("platform", "nvml", "libtpu", "intel_extension", "habana")
NOT_AN_ERROR_NEEDS = ("serverargs(", "non-default args", "namespace(", "error")
# When no class rule matched: lines that still say something went wrong, strongest first (all class `other`).
GENERIC_RULES = (
    Rule("cpp_exception_message", "other", 52, ("what():",), r"^what\(\):", confidence=0.3),
    Rule("missing_module", "other", 50, ("no module named", "cannot import name"), MISSING_MODULE.pattern),
    Rule(
        "plain_failure",
        "other",
        46,
        ("terminate called", "not responding", "such file", "unreachable", "refused", "denied", "segmentation"),
        PLAIN_FAILURE.pattern,
    ),
    Rule("hip_runtime_error", "other", 45, ("hip error", "hiperror", "hsa_status"), HIP_ERROR.pattern),
    Rule("error_line", "other", 40, ("error", "failed", "fatal", "exception"), ERROR_WORD.pattern),
    Rule("process_died", "other", 30, ("exit", "killed", "aborted", "core dumped", "sig", "died"), DEATH.pattern),
)
# A line stating a comparison that did not hold (two values set against each other, one "larger than" the other,
# "expected ... got", a negative amount): the grammar of an assertion's message in any program. It is no class and
# never a finding (report.build_triage), only a line the excerpt keeps, so that the line naming a cause in words
# no rule reads still survives when the log is buried in noise.
STATED_COMPARISON = Rule(
    "stated_comparison",
    "other",
    22,
    ("vs", "than", "expected", "match", "!=", "=-", " -"),
    r"\S*\d\S*\s+vs\.?\s+\S*\d|(?i:\bis (?:larger|greater|bigger|smaller|less|more|fewer|lower|higher) than\b)"
    r"|(?i:\bexpected\b.{0,80}\b(?:got|but (?:got|found|is|was|received))\b)"
    r"|(?i:\b(?:does not|doesn't|do not|don't) match\b)|\S\s*!=\s*\S|(?:[=:]\s*|\bvalue\s+)-\d",
    confidence=0.1,
)
COMPILER_RULES = frozenset(
    {"cuda_only_in_rocm_build", "compiler_error", "compiler_driver_error", "linker_error", "cmake_error"}
)
# The failing statement a traceback quotes names a CUDA-only Python API (read only there, never in log prose).
CUDA_ONLY_STATEMENT = Rule(
    "cuda_only_python_api",
    "missing_rocm_guard",
    89,
    ("cuda", "nvidia", "nvml", "cupy", "nvtx", "nvshmem"),
    r"\btorch\.version\.cuda\b|\bpynvml\b|\bnvidia[-_]smi\b|\bcupy\b|\bcuda\.bindings\b|\bpycuda\b|\bnvshmem\w*"
    r"|torch\.cuda\.nvtx|\bcudaRuntimeGetVersion|\blibcudart|\bassert\b.{0,60}\bis_cuda\(\)",
    layer="CPython tracebacks (Lib/traceback.py quotes the failing statement under its frame) naming CUDA-only "
    "Python APIs (torch/version.py's `cuda` is None on ROCm; pynvml, CuPy, cuda-python, NVTX)",
)
OTHER_CLASS_RULES = (SLOW_FALLBACK, DISPATCH_TRACE, CUDA_ONLY_STATEMENT)  # class rules outside the table
# A connection lost (CPython's ConnectionError family) while a process group talked: the traceback's frames are in
# torch.distributed or an engine's distributed package. An HTTP client hanging up raises the same error elsewhere.
CONNECTION_LOST = re.compile(
    r"^(?:\w+\.)*(?:ConnectionResetError|ConnectionRefusedError|ConnectionAbortedError|BrokenPipeError"
    r"|ConnectionError)\b"
)
DISTRIBUTED_FRAME = re.compile(r"/distributed/|/c10d|/gloo/")
# Rules that read a runtime status (HIP/HSA codes and texts): under a collective's report it is what the collective
# saw (scanner.Scanner._inherit_from_intro).
RUNTIME_STATUS = frozenset({"status_code", "hip_runtime_error", "other_memory_fault", "hip_out_of_memory"})
# Rule names switched off, for the leave-one-source-out benchmark only (benchmarks/triage_corpus.py).
DISABLED: set[str] = set()
# Rules that read a format's grammar rather than any engine's wording: Python exception lines and tracebacks,
# C++ terminate messages, compiler and linker diagnostics, the documented status codes (status.py). The strict
# leave-one-source-out figure never switches these off; every other rule may have been fitted to a source.
GRAMMAR_RULES = frozenset(
    {
        "exception",
        "unterminated_traceback",
        "connection_lost",
        "missing_module",
        "cpp_exception_message",
        "plain_failure",
        "error_line",
        "process_died",
        "hip_runtime_error",
        "stated_comparison",
        "status_code",
        "compiler_error",
        "compiler_driver_error",
        "linker_error",
        "cmake_error",
    }
)
# Rules that read the fixed messages of a layer beneath the engines (PyTorch, the HIP/HSA runtime and the amdgpu
# driver, RCCL and ibverbs, Triton/LLVM, composable_kernel's verdict, CPython's import and lookup errors), not the
# wording of sglang, vLLM or aiter themselves: each names that layer and its emitting file (`Rule.layer`), and the
# layered leave-one-source-out figure keeps these on too.
RUNTIME_LAYER_RULES = GRAMMAR_RULES | {rule.name for rule in (*RULES, *OTHER_CLASS_RULES) if rule.layer}


@dataclass(frozen=True)
class Match:
    rule: str
    category: str
    score: int
    confidence: float = 0.3


def _status_match(text: str) -> Match | None:
    found = None if "status_code" in DISABLED else status_class(text)
    if found is None:
        return None
    _, category, confidence = found
    return Match("status_code", category, 60 + round(30 * confidence), confidence)


def _rule_match(text: str, present: set[str]) -> tuple[Match, bool] | None:
    """The first rule (in table order) whose gate words the line holds and whose pattern matches, and whether
    it claims the line (mechanisms.Rule.claims_line)."""
    for index in sorted({index for word in present for index in _RULES_BY_WORD.get(word, ())}):
        rule = RULES[index]
        if rule.name not in DISABLED and rule.matches(text, present):
            bonus = EXCEPTION_BONUS if EXCEPTION_LINE.match(text) and not rule.claims_line else 0
            return Match(rule.name, rule.category, rule.score + bonus, rule.confidence), rule.claims_line
    return None


def gate_words(lowered: str) -> set[str]:
    """The gate words (every rule's `needs`) a lower-cased line holds, in one Aho-Corasick pass."""
    return set(_GATE.find_matches_as_strings(lowered, overlapping=True))


def classify(body: str) -> Match | None:
    """The most specific class a (prefix-stripped) line shows, or None when it shows no problem. Every regex
    is gated by words its matches must contain: most lines that reach this point are prose, not failures."""
    text = body.strip()
    present = gate_words(text.lower())
    if not present:
        return None
    ruled = _rule_match(text, present)
    if ruled is not None and ruled[1]:
        return ruled[0]
    probing = not present.isdisjoint(EXPECTED_NEEDS) and EXPECTED_ON_ROCM.search(text) is not None
    if ruled is not None and ruled[0].category == "missing_rocm_guard" and probing:
        return None  # an engine asking whether CUDA is there, on a node where it is not, names no guard
    status = None if present.isdisjoint(STATUS_NEEDS) else _status_match(text)
    found = max(filter(None, (ruled and ruled[0], status)), key=lambda match: match.score, default=None)
    fallback = SLOW_FALLBACK.matches(text, present)
    if fallback and found is not None and found.category in UNSUPPORTED_CLASSES and WARNING_LINE.search(text):
        found = None  # "unsupported ..., falling back": a warning about speed, not a failure
    if found is not None:
        return found
    if fallback:
        return Match(SLOW_FALLBACK.name, SLOW_FALLBACK.category, SLOW_FALLBACK.score, SLOW_FALLBACK.confidence)
    if probing:
        return None
    not_an_error = not present.isdisjoint(NOT_AN_ERROR_NEEDS) and NOT_AN_ERROR.search(text) is not None
    exception = EXCEPTION_LINE.match(text)
    if exception and not exception["name"].endswith("Warning") and not not_an_error:
        return Match("exception", "other", GENERIC_EXCEPTION_SCORE)
    if DISPATCH_TRACE.matches(text, present):
        return Match(DISPATCH_TRACE.name, DISPATCH_TRACE.category, DISPATCH_TRACE.score)
    if not_an_error:
        return None
    for rule in (*GENERIC_RULES, STATED_COMPARISON):
        if rule.name not in DISABLED and rule.matches(text, present):
            return Match(rule.name, rule.category, rule.score, rule.confidence)
    return None


_GATE = AhoCorasick(
    sorted(
        {word for rule in (*RULES, *OTHER_CLASS_RULES, *GENERIC_RULES, STATED_COMPARISON) for word in rule.needs}
        | {*STATUS_NEEDS, *EXPECTED_NEEDS, *NOT_AN_ERROR_NEEDS}
    )
)
_RULES_BY_WORD: dict[str, list[int]] = {}
for _index, _class_rule in enumerate(RULES):
    for _word in _class_rule.needs:
        _RULES_BY_WORD.setdefault(_word, []).append(_index)
UNSUPPORTED_CLASSES = ("unsupported_arch_or_kernel", "dtype_unsupported")


def classify_exception(exception_line: str, last_source_line: str | None, frame_paths: tuple[str, ...] = ()) -> Match:
    """Class of a traceback's final line; a bare `AssertionError` is read through the failing source line, a lost
    connection through the frames it was raised in (a process group's, or anyone's)."""
    found = classify(exception_line)
    if found and (found.category != "other" or found.score > GENERIC_EXCEPTION_SCORE):
        return found
    distributed = any(DISTRIBUTED_FRAME.search(path) for path in frame_paths)
    if CONNECTION_LOST.match(exception_line.strip()) and distributed and "connection_lost" not in DISABLED:
        return Match("connection_lost", "comm_error", 85 + EXCEPTION_BONUS, 0.7)
    statement = (last_source_line or "").strip()
    if statement and CUDA_ONLY_STATEMENT.name not in DISABLED:
        if CUDA_ONLY_STATEMENT.matches(statement, gate_words(statement.lower())):
            rule = CUDA_ONLY_STATEMENT
            return Match(rule.name, rule.category, rule.score + EXCEPTION_BONUS, rule.confidence)
    from_source = classify(statement) if statement else None
    if from_source and from_source.category != "other":
        score = from_source.score + EXCEPTION_BONUS
        return Match(from_source.rule, from_source.category, score, from_source.confidence)
    return Match("exception", "other", GENERIC_EXCEPTION_SCORE)


def kernel_hint(body: str) -> str | None:
    """The kernel or JIT module a line says is being built, selected or dispatched."""
    if not any(word in body for word in ("ShaderName", "kernel", "build", "[fused_moe]")):
        return None
    match = KERNEL_HINT.search(body)
    if not match:
        return None
    name = next(value for value in match.groups() if value)
    if match.group("built") or match.group("building"):
        name = re.sub(r"_[0-9a-f]{16,}$", "", name.rstrip("/").rsplit("/", 1)[-1])
    if match.group("moe"):
        name = f"fused_moe {match.group('moe')}"
    return name.strip("[],")
