"""One log line at a time: the cheap prefilter, transport-prefix stripping and normalisation.

Covers the byte-level trigger test that decides whether a line is worth a regex at all, stripping the
prefixes engines and log collectors put in front of a message (sglang and vLLM log headers, `[rankN]:`,
worker `(Name pid=N)` tags, Kubernetes/CI timestamps, markdown `> ` quoting, ANSI colours), the rank a
line came from, and the normalisation used for folding duplicates and for signatures. Does not decide
what a line means (rules.py) or keep any state (scanner.py).
"""

from __future__ import annotations

import re

DIGITS = b"0123456789"

# The prefilter: a line whose digit-free bytes contain none of these is never looked at again. Every rule
# in rules.py needs one of them in its line; tests/test_triage_rules.py checks that invariant.
TRIGGER_WORDS = (
    b"rror",  # Error, error, ERROR, hipError*, HSA_STATUS_ERROR_*
    b"xception",
    b"Traceback",
    b'File "',  # traceback frames of a log that starts mid-traceback
    b"ault",  # fault, Fault, default (the untuned-config fallbacks)
    b"FAULT",
    b"upport",  # not supported, unsupported, No support
    b"mplemented",
    b"emory",  # out of memory, Not enough memory, Memory access fault
    b"OOM",
    b"profiled",  # sglang's negative KV budget
    b"imeout",
    b"imed out",
    b"imes out",
    b"did not answer",
    b"did not become",
    b"ailed",
    b"ismatch",
    b"shape",
    b"tuned",
    b"optimal",
    b"not found",
    b"ollective",
    b"atchdog",
    b"NCCL WARN",
    b"undefined",
    b"ShaderName",
    b"build",
    b"kernel",
    b"exclude",
    b"exit code",
    b"xit status",
    b"Killed",
    b"Abort",
    b"core dumped",
    b"sigquit",
    b"ready to roll",  # sglang's healthy marker
    b"startup complete",  # uvicorn / vLLM healthy marker
    b"allback",
    b"all back",
    b"_STATUS_",  # HSA / hipBLAS / rocBLAS status codes (status.py)
    b"RROR_",  # a terminal-wrapped HSA_STATUS_ERROR_* code
    b"code object",
    b"arch",
    b"mport",  # ImportError of a CUDA-only module
    b"module named",
    b"ransport",
    b"ibv_",
    b"rdma",
    b"what():",
    b"terminate called",
    b"responding",
    b"such file",
    b"nreachable",
    b"refused",
    b"ermission denied",
    b"HW Exception",
    b"GPU Hang",
    b"amdgpu",
    b"UTCL2",
    b"verriding",
    b"still ",
    b"stuck",
    b"hang",
    b"hung",
    b"deadlock",
    b"waiting for",
    b"no progress",
    b"not ready",
    b"No available",
    b"eys",  # unexpected / missing keys
    b"not found in",
)


def _grouped_by_first_byte(words: tuple[bytes, ...]) -> re.Pattern[bytes]:
    """One alternation per first byte: sre tries far fewer branches per position (measured 2x faster)."""
    groups: dict[bytes, list[bytes]] = {}
    for word in words:
        groups.setdefault(word[:1], []).append(re.escape(word[1:]))
    return re.compile(b"|".join(re.escape(first) + b"(?:" + b"|".join(rest) + b")" for first, rest in groups.items()))


TRIGGER = _grouped_by_first_byte(TRIGGER_WORDS)

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# Each alternative is one kind of prefix; they are stripped repeatedly because collectors nest them
# (a Kubernetes line carrying a vLLM worker tag carrying a vLLM log header).
PREFIX = re.compile(
    r"""^(?:
      >[ ]?                                                               # markdown quote
    | \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+(?:(?:stdout|stderr)\s+[FP]\s)?  # k8s / CI
    | \d{4}-\d\d-\d\d[ ]\d\d:\d\d:\d\d(?:[.,]\d+)?\s+(?:\[[A-Za-z]+\]\s+)?               # stamp [Level]
    | \d{1,3}%\|[^|\n]{0,200}\|[^\[\n]{0,40}\[[^\]\n]{0,60}\]                         # a tqdm bar left on the line
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
