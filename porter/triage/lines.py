"""One log line at a time: the cheap prefilter, transport-prefix stripping and normalisation.

Covers the prefilter that decides which lines are worth a regex at all (one Aho-Corasick pass per chunk), stripping the
prefixes engines and log collectors put in front of a message (sglang and vLLM log headers, `[rankN]:`,
worker `(Name pid=N)` tags, Kubernetes/CI timestamps, markdown `> ` quoting, ANSI colours), the rank a
line came from, and the normalisation used for folding duplicates and for signatures. Does not decide
what a line means (rules.py) or keep any state (scanner.py).
"""

from __future__ import annotations

import re

from ahocorasick_rs import BytesAhoCorasick, Implementation

DIGITS = b"0123456789"

# The prefilter: a line containing none of these (compared in lower case) is never looked at. They are the
# phrases the rules in rules.py and status.py need, chosen rare in ordinary prose so that a log of new text
# (request logging with prompts) stays on the fast path: "default config", not "default"; "not supported", not
# "support". tests/test_triage_rules.py checks that every class line passes it.
TRIGGER_WORDS = (
    # exceptions, errors, tracebacks, process death
    *("rror", "xception", "traceback", 'file "', "what():", "terminate called", "abort", "killed", "core dumped"),
    *("exit code", "exit status", "exitcode", "sigsegv", "sigabrt", "sigkill", "sigquit", "segmentation"),
    *("failed", "failure", "fail to", "not found", "no module named", "cannot import", "has no attribute"),
    *("not responding", "such file", "unreachable", "connection refused", "permission denied"),
    # status codes (status.py) and HIP runtime text
    *("_status_", "hiperror", "hip error", "kernel image", "device function", "nobinary", "code object", "hipmodule"),
    # memory
    *("of memory", "enough memory", "allocate memory", "available memory", "cache memory", "outofmemory"),
    *(
        "stored in kv cache",
        "cache size: 0 tokens",
        "free memory on device",
        "insufficient",
        "profiled value",
        "max_total_num_tokens",
        "oom-kill",
        "oom_kill",
        "illegal memory",
    ),
    *("illegaladdress", "memory access", "access fault", "page fault", "memory fault", "memory_fault", "_fault"),
    *("fault by", "retry fault", "amdgpu", "utcl2", "gfxhub", "mmhub", "gpu hang", "gpu reset"),
    # support, dtypes, kernels, arch
    *("not support", "unsupport", "no support", "issupport", "only supported", "not implemented", "should be one of"),
    *("not available", "requires cuda", "instance found", "available kernel", "suitable kernel", "valid kernel"),
    *("matching kernel", "kernel instance", "gfx", "not compiled", "for this arch", "for arch", "architecture"),
    # shapes and quantisation
    *("mismatch", "must match", "not match", "n't match", ".shape", "with shape", "shape is", "attempted to load"),
    *("param_data", "loaded_weight", "params_dict", "unexpected key", "missing key", "quantization", "quant_config"),
    *("exclude",),
    # compilers, linkers, builds and the CUDA toolkit
    *("fatal", "cannot find", "multiple definition", "recompile with", "cannot open shared", "cuda_home", "ptxas"),
    *(
        "compilerfailed",
        "inductorerror",
        "undefined symbol",
        "undefined reference",
        "compilation",
        "failed to compile",
        "llvm",
        "linker command",
    ),
    *("of resource", "outofresource", "resources requested", "build stopped", "start build", "finish build"),
    # collectives and transport
    *("collective", "watchdog", "nccl warn", "nccl communicator", "processgroup", "process group", "tcpstore"),
    *("rendezvous", "retry counter", "ibv_", "rdma", "gloo", "c10d", "heartbeat", "nccl work", "reset by peer"),
    *("closed by peer", "cuda failure", "hip failure", "socket timeout", "detected by watchdog", "could not build"),
    # start-up: timeouts, stalls, healthy markers
    *("timeout", "timed out", "times out", "timedout", "did not answer", "did not become", "did not start"),
    *("didn't become", "didn't start", "didn't answer", "still starting", "still loading", "still initiali"),
    *("still waiting", "still compiling", "still not", "stuck ", "hangs ", "hung ", "hanging ", "deadlock"),
    *("for baton", "for lock", "for the lock", "file lock", "no progress", "not ready", "no available"),
    *("ready to roll", "startup complete", "uvicorn running"),
    # slow paths and the kernel logged before a fault
    *("untuned", "no tuned", "tuned config", "found tuned", "suboptimal", "sub-optimal", "default config"),
    *("default moe", "use default", "using default", "stage default", "torch solution", "fallback", "fall back"),
    *("falling back", "overriding", "slow path", "shadername", "kernel:", "kernel=", "kernel name", "fused_moe]"),
)
_AUTOMATON = BytesAhoCorasick([word.encode() for word in TRIGGER_WORDS], implementation=Implementation.DFA)


def trigger_positions(chunk: bytes) -> list[int]:
    """Byte offsets in `chunk` where a trigger word starts (Aho-Corasick over the lower-cased bytes)."""
    return [start for _, start, _ in _AUTOMATON.find_matches_as_indexes(chunk.lower())]


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# Each alternative is one kind of prefix; they are stripped repeatedly because collectors nest them
# (a Kubernetes line carrying a vLLM worker tag carrying a vLLM log header).
PREFIX = re.compile(
    r"""^(?:
      >(?!>>)[ ]?                                           # markdown quote (lld's ">>> " is its own)
    | -->                                                   # aiter's JIT history joins its tracebacks with it
    | \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+(?:(?:stdout|stderr)\s+[FP]\s)?  # k8s / CI
    | \d{4}-\d\d-\d\d[ ]\d\d:\d\d:\d\d(?:[.,]\d+)?\s+(?:\[[A-Za-z]+\]\s+)?               # stamp [Level]
    | \d{1,3}%\|[^|\n]{0,200}\|[^\[\n]{0,40}\[[^\]\n]{0,60}\]                         # a tqdm bar left on the line
    | \[\s*\d+\.\d+\]\s                                                   # dmesg
    | \((?P<worker>[\w.-]+(?:\s+pid=\d+)?(?:,\s*ip=[\d.]+)?)\)\s*          # (Worker_TP0 pid=12) (raylet)
    | \[(?P<rank>rank\d+)\]:\s?                                           # torchrun
    | (?P<level>INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\s+(?:\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+)?
        \[?(?P<where>[\w./-]+\.py:\d+)\]\s?                               # vLLM
    | \[\d{4}-\d\d-\d\d\s\d\d:\d\d:\d\d(?:[.,]\d+)?(?P<tags>(?:\s[A-Z]{1,6}\d+)*)\]\s?  # sglang
    | \[[WEIF]\d{4}\s\d\d:\d\d:\d\d(?:\.\d+)?\s+\d+\s+(?P<glog>[\w./-]+:\d+)\]\s?      # glog / c10
    )""",
    re.VERBOSE,
)
RANK = re.compile(r"(?:\b|_)(?:TP|DP|EP|PP|rank|Rank|node-|GPU\s)(\d+)\b")

HEX = re.compile(r"0x[0-9a-fA-F]+|\b[0-9a-f]{12,}\b")
NUMBER = re.compile(r"\d+")
TEMP_PATH = re.compile(r"/tmp/[^\s'\",)\]]+")
SPACES = re.compile(r"\s+")


def decode(raw: bytes) -> str:
    """Text of a raw line: what a terminal would show after carriage returns, without colours."""
    text = raw.decode("utf-8", "replace").rstrip("\r\n")
    if "\r" in text:
        text = text.rsplit("\r", 1)[-1] or text.replace("\r", "")
    return ANSI.sub("", text) if "\x1b" in text else text


def split_prefix(text: str) -> tuple[str, str]:
    """(channel, body): the identity of the writer (worker, rank, logger) and the message itself.

    The channel keeps the parts that stay constant for one writer (worker tag, rank, logger location)
    and drops timestamps, so lines of one traceback share a channel while interleaved ranks do not.
    """
    channel_parts = []
    body = text
    for _ in range(6):
        match = PREFIX.match(body)
        if not match or match.end() == 0:
            break
        channel_parts.extend(
            value for value in match.group("worker", "rank", "level", "where", "tags", "glog") if value
        )
        body = body[match.end() :]
    return "|".join(part.strip() for part in channel_parts), body


def ranks_in(channel: str, body: str) -> list[str]:
    """Rank-like ids a line names (TP3, rank3, node-3); the channel first because it is the writer."""
    found = RANK.findall(channel) or RANK.findall(body[:200])
    return found[:4]


def fold_key(body: str) -> str:
    """The text two lines share when they are the same message from different ranks or runs."""
    text = TEMP_PATH.sub("/tmp/*", body)
    text = HEX.sub("#", text)
    text = NUMBER.sub("N", text)
    return SPACES.sub(" ", text).strip()


def shorten(text: str, limit: int) -> str:
    """At most `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[+{len(text) - limit} chars]"
