"""Running an engine's own server-argument code (parser and post-processing) from the wheels under test, on a
machine with neither torch nor a GPU: what a launch command resolves to, as the engine itself decides it.

For sglang: `sglang/srt/server_args.py` `prepare_server_args(argv)` (its argparse parser, built by
`ServerArgs.add_cli_args`), then `ServerArgs.resolve_once()` (the resolution pipeline of `arg_groups/pipeline.py`:
model-config hooks, DSA and attention-backend choice, chunked prefill, CUDA-graph and memory defaults), read back
with `resolved_dict()`; and its parser alone (sglang_options). For vLLM, the parser and `EngineArgs.from_cli_args`
only (vllm_engine_args). Each runs in a child process on the unpacked wheels (the engine and the real libraries it
imports: msgspec, transformers, huggingface_hub, ...), so nothing upstream imports leaks into the test process.
Only what needs a GPU stack is stubbed: torch and the kernel/serving packages listed in STUBBED become permissive
stand-ins, and torch describes the node the real tasks run on (ROCm, 8 x gfx950 with 288 GiB each, at the torch
version the engine's METADATA pins, which its code checks), with a `rocminfo` on PATH printing the same pool size,
since sglang sizes memory from that command on ROCm. Does not cover what the tests compare.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import upstream_wheels

# Packages sglang's resolution imports that need torch or a device, or that serve requests; stand-ins here.
STUBBED = (
    "torch torchvision triton sgl_kernel aiter amdsmi tvm_ffi compressed_tensors gguf sentencepiece xgrammar "
    "partial_json_parser psutil orjson pybase64 starlette zmq IPython httpx httpcore fsspec "
    "cbor2 openai_harmony cloudpickle cachetools uvloop cpuinfo llguidance"  # and vLLM's
).split()
# Real libraries the resolution runs (the lock pins them next to the engines).
LIBRARIES = ("msgspec", "transformers", "huggingface-hub", "tokenizers", "safetensors", "dill", "tqdm", "regex")
GIB = 1 << 30
DEVICE_MEMORY_KB = 288 * GIB // 1024
TIMEOUT_S = 300


def resolve_sglang(wheels: dict[str, Path], argvs: list[list[str]], fields: list[str], scratch: Path) -> list[dict]:
    """The fields sglang resolves for each argv (launch_server's arguments), or {"error": argparse's message}; all
    in one child process (importing sglang takes seconds)."""
    return _ask(wheels, {"engine": "sglang", "argvs": argvs, "fields": fields}, scratch)


def vllm_engine_args(wheels: dict[str, Path], argvs: list[list[str]], fields: list[str], scratch: Path) -> list[dict]:
    """The EngineArgs fields vLLM's own parser gives each argv (`EngineArgs.add_cli_args` on its
    FlexibleArgumentParser, then `EngineArgs.from_cli_args`), or {"error": ...}. Not `create_engine_config`: that
    inspects the model class in a subprocess that imports torch."""
    return _ask(wheels, {"engine": "vllm", "argvs": argvs, "fields": fields}, scratch)


def sglang_options(wheels: dict[str, Path], spellings: list[str], scratch: Path) -> dict:
    """sglang's launch_server parser as it is built: {"options": {--flag: {dest, bool, choices, deprecated}},
    "spellings": {spelling: the dest `--spelling 2` sets, or argparse's error line}}. `deprecated` is the
    replacement a Deprecated* action names (sglang's argparse_actions.py), else None."""
    return _ask(wheels, {"engine": "sglang", "spellings": spellings}, scratch)


def _ask(wheels: dict[str, Path], request: dict, scratch: Path):
    paths = [str(upstream_wheels.unpacked(wheels[name])) for name in (request["engine"], *LIBRARIES)]
    bin_dir = scratch / "bin"
    bin_dir.mkdir(exist_ok=True)
    pool = f"  Name: gfx950\n  Pool Info:\n    Pool 1\n      Size: {DEVICE_MEMORY_KB}(0x0) KB\n"
    (bin_dir / "rocminfo").write_text("#!/bin/sh\ncat <<'EOF'\n" + pool * 8 + "EOF\n")
    (bin_dir / "rocminfo").chmod(0o755)
    environment = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(scratch)}
    environment["HF_HUB_OFFLINE"] = "1"
    request = json.dumps({"paths": paths, **request})
    try:
        result = subprocess.run(
            [sys.executable, __file__],
            input=request,
            capture_output=True,
            text=True,
            env=environment,
            cwd=scratch,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"sglang's argument resolution took over {TIMEOUT_S} s")
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        pytest.fail(f"sglang's argument resolution failed:\n{(result.stdout + result.stderr)[-4000:]}")
    return json.loads(lines[-1])


def _install_stand_ins(engine: str) -> None:
    """Make every STUBBED package importable as a permissive stand-in; torch describes an 8 x MI355X node."""
    import abc
    import importlib.abc
    import importlib.machinery
    import types
    from unittest import mock

    absent = {"torch": {"npu", "musa", "mlu", "hpu"}}  # platforms sglang probes with hasattr

    class StandInType(abc.ABCMeta):
        def __getattr__(cls, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return mock.MagicMock(name=name)

        def __getitem__(cls, item):
            return cls

        def __or__(cls, other):
            return cls

        __ror__ = __or__

    class StandInClass(metaclass=StandInType):
        def __init__(self, *args, **kwargs):
            pass

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return mock.MagicMock(name=name)

        def __call__(self, *args, **kwargs):
            return mock.MagicMock()

        @classmethod
        def __get_pydantic_core_schema__(cls, source, handler):
            from pydantic_core import core_schema

            return core_schema.any_schema()

    class StandIn(types.ModuleType):
        __path__: list[str] = []
        __version__ = "0.0"

        def __getattr__(self, name):
            if name.startswith("__") or name in absent.get(self.__name__, ()):
                raise AttributeError(name)
            if name.lstrip("_")[:1].isupper():
                value = StandInType(name, (StandInClass,), {})
            else:
                value = StandIn(f"{self.__name__}.{name}")
            setattr(self, name, value)
            return value

        def __call__(self, *args, **kwargs):
            return mock.MagicMock()

        def __or__(self, other):
            return self

        __ror__ = __or__

        def __getitem__(self, item):
            return self

        def __deepcopy__(self, memo):
            return self

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] not in STUBBED:
                return None
            return importlib.machinery.ModuleSpec(name, self, is_package=True)

        def create_module(self, spec):
            parent, _, child = spec.name.rpartition(".")
            existing = vars(sys.modules[parent]).get(child) if parent in sys.modules else None
            return existing if isinstance(existing, StandIn) else StandIn(spec.name)

        def exec_module(self, module):
            pass

    sys.meta_path.insert(0, Finder())
    _describe_the_node(__import__("torch"), StandInClass, types.SimpleNamespace, engine)


def _describe_the_node(torch, stand_in_class: type, namespace: type, engine: str) -> None:
    torch.__version__ = f"{_required_torch(engine)}+rocm7.2"
    torch.version.hip, torch.version.cuda = "7.2.0", None
    device = namespace(gcnArchName="gfx950:sramecc+:xnack-", total_memory=288 * GIB, name="AMD Instinct MI355X")
    device.major, device.minor, device.multi_processor_count = 9, 5, 256
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 8
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda *args: (device.major, device.minor)
    torch.cuda.get_device_properties = lambda *args: device
    torch.cuda.get_device_name = lambda *args: device.name
    torch.cuda.mem_get_info = lambda *args: (device.total_memory - 8 * GIB, device.total_memory)
    torch.xpu.is_available = torch.mps.is_available = torch.backends.mps.is_available = lambda: False
    torch.library.Library = type("Library", (stand_in_class,), {"m": None})  # sglang names its op library
    torch.library.infer_schema = _schema  # vLLM's IR ops check their schema against the activations they declare
    __import__("amdsmi").amdsmi_get_processor_handles = lambda: list(range(8))  # vLLM's ROCm platform probe
    for dtype, size in (("int32", 4), ("int64", 8), ("float32", 4), ("float16", 2), ("bfloat16", 2), ("uint8", 1)):
        getattr(torch, dtype).itemsize = size  # vLLM 0.34.0 checks them against array typecodes at import


def _schema(function, *args, **kwargs) -> str:
    """A torch op schema from a signature: every parameter a Tensor, one Tensor out per Tensor the return names."""
    import inspect

    signature = inspect.signature(function)
    outputs = max(str(signature.return_annotation).count("Tensor"), 1)
    returned = f"({', '.join(['Tensor'] * outputs)})" if outputs > 1 else "Tensor"
    return f"({', '.join(f'Tensor {name}' for name in signature.parameters)}) -> {returned}"


def _required_torch(engine: str) -> str:
    """The torch version the engine under test pins (its METADATA), which its code checks."""
    from importlib import metadata

    requirement = next(line for line in metadata.requires(engine) if line.startswith("torch=="))
    return requirement.split("==")[1].split(";")[0].strip()


def _child() -> None:
    request = json.loads(sys.stdin.read())
    sys.path[:0] = request["paths"]
    _install_stand_ins(request["engine"])
    if request["engine"] == "vllm":
        print(json.dumps([_engine_args(argv, request["fields"]) for argv in request["argvs"]], default=str))
        return
    if "spellings" in request:
        print(json.dumps(_options(request["spellings"]), default=str))
        return
    answers = [_resolved(argv, request["fields"]) for argv in request["argvs"]]
    print(json.dumps(answers, default=str))


def _options(spellings: list[str]) -> dict:
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")  # as prepare_server_args builds it
    ServerArgs.add_cli_args(parser)
    options = {}
    for action in parser._actions:
        deprecated = getattr(action, "new_flag", "?") if type(action).__name__.startswith("Deprecated") else None
        choices = sorted(map(str, action.choices)) if action.choices else None
        for option in action.option_strings:
            options[option] = {"dest": action.dest, "bool": action.nargs == 0, "choices": choices}
            options[option]["deprecated"] = deprecated
    answers, defaults = {}, vars(parser.parse_known_args(["--model-path", "m"])[0])
    for spelling in spellings:
        refusal = io.StringIO()
        try:
            with contextlib.redirect_stderr(refusal):
                parsed, _ = parser.parse_known_args(["--model-path", "m", f"--{spelling}", "2"])
        except SystemExit:
            answers[spelling] = refusal.getvalue().strip().splitlines()[-1]
            continue
        changed = [dest for dest, value in vars(parsed).items() if value != defaults.get(dest)]
        answers[spelling] = changed[0] if len(changed) == 1 else changed
    return {"options": options, "spellings": answers}


def _engine_args(argv: list[str], fields: list[str]) -> dict:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    EngineArgs.add_cli_args(parser)
    refusal = io.StringIO()
    try:
        with contextlib.redirect_stderr(refusal):
            engine_args = EngineArgs.from_cli_args(parser.parse_args(argv))
    except SystemExit:
        return {"error": refusal.getvalue().strip().splitlines()[-1]}
    return {name: getattr(engine_args, name, "<no such field>") for name in fields}


def _resolved(argv: list[str], fields: list[str]) -> dict:
    from sglang.srt.server_args import prepare_server_args

    refusal = io.StringIO()
    try:
        with contextlib.redirect_stderr(refusal):
            server_args = prepare_server_args(argv)
    except SystemExit:
        return {"error": refusal.getvalue().strip().splitlines()[-1]}
    server_args.resolve_once()
    resolved = server_args.resolved_dict()
    return {name: resolved.get(name, "<no such field>") for name in fields}


if __name__ == "__main__":
    _child()
