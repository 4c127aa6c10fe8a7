"""vLLM's log lines: `(PROCESS pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] message`.

The format is vllm 0.25.1's (vllm/logger.py _FORMAT "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d]
%(message)s", _DATE_FORMAT "%m-%d %H:%M:%S") behind the process prefix vLLM adds to the output of its API server,
engine-core and worker processes ("(APIServer pid=1)", "(EngineCore_DP0 pid=2)", "(Worker_TP3 pid=3)"); each
process keeps its own pid. Does not cover what is said (engine/wording.py).
"""

import os
import sys
import time

PID = os.getpid()


def process_pid(process: str) -> int:
    """The pid a process logs with: the API server's own, then the engine cores' and workers'."""
    if process == "APIServer":
        return PID
    return PID + 1 + sum(ord(character) for character in process) % 997


def _where(depth: int) -> str:
    frame = sys._getframe(depth + 1)
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def emit(level: str, message: str, process: str = "APIServer", depth: int = 1) -> None:
    """Print a message as vLLM's formatter does: every line of it with the full prefix. `depth` 1 names the caller
    of emit as the line's [file:line], 2 its caller, and so on."""
    head = f"({process} pid={process_pid(process)}) {level} {time.strftime('%m-%d %H:%M:%S')} [{_where(depth)}]"
    for part in message.splitlines() or [""]:
        print(f"{head} {part}\n", end="", file=sys.stdout, flush=True)


def plain(message: str, process: str = "APIServer") -> None:
    """A line another library printed in the process (uvicorn's `INFO:     ...`, a traceback)."""
    print(f"({process} pid={process_pid(process)}) {message}\n", end="", file=sys.stdout, flush=True)


class Logger:
    """init_logger's logger: info, warning, error, for the API server process unless told otherwise."""

    def __init__(self, name: str):
        self.name = name

    def info(self, message: str, process: str = "APIServer") -> None:
        emit("INFO", message, process, depth=2)

    def warning(self, message: str, process: str = "APIServer") -> None:
        emit("WARNING", message, process, depth=2)

    def error(self, message: str, process: str = "APIServer") -> None:
        emit("ERROR", message, process, depth=2)


def init_logger(name: str) -> Logger:
    return Logger(name)
