"""Log lines in sglang's shape: `[2026-07-14 10:22:01 DP0 TP3] message`, one per rank that logs it.

Each line is one write with its newline, as Python's logging writes a record (StreamHandler: the message and its
terminator together), so stdout's and stderr's lines in the same log never splice. Does not cover the HTTP access
log (server.py writes that through `info`).
"""

import sys
import time


def _stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())


def info(message: str, rank: str | None = None) -> None:
    prefix = f"[{_stamp()} {rank}]" if rank else f"[{_stamp()}]"
    print(f"{prefix} {message}\n", end="", file=sys.stdout, flush=True)


def rank_names(tp: int, dp: int) -> list[str]:
    names = []
    for dp_rank in range(dp):
        for tp_rank in range(tp):
            gpu = dp_rank * tp + tp_rank
            names.append(f"DP{dp_rank} TP{tp_rank}" if dp > 1 else f"TP{gpu}")
    return names


def per_rank(message: str, tp: int, dp: int) -> None:
    for rank in rank_names(tp, dp):
        info(message, rank)


def aiter(message: str) -> None:
    print(f"[aiter] {message}\n", end="", file=sys.stdout, flush=True)


def warning(message: str) -> None:
    print(f"[{_stamp()}] WARNING {message}\n", end="", file=sys.stderr, flush=True)
