"""Flags spelled for the engine release installed where the server runs: serve reads the release from the package's
metadata in the sandbox and renders the declaration's respellings for it (engines/sglang.py: DP attention is
`--enable-dp-attention --dp-size N` at 0.5.20 and `--attn-dp-size N` from 0.5.23 on), the parser check asks the
parser about that rendering, and a flag the release does not have is refused in one line before anything launches.
Real local sandbox, a stand-in `sglang` package (its launcher parses as 0.5.23's does for these flags) with the
release in its dist-info, as pip installs it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers import free_port

from porter.engines import serve
from porter.engines.parser_check import ask_parser
from porter.sandbox import SandboxError
from porter.sandbox.local import LocalSandbox
from porter.task import load_task

LAUNCHER = """
import argparse
parser = argparse.ArgumentParser()
for name in ("--model-path", "--host", "--port", "--tp-size", "--dp-size", "--attn-dp-size"):
    parser.add_argument(name)
parser.add_argument("--enable-dp-attention", action="store_true")
print(vars(parser.parse_args()))
"""
DP_ATTENTION = {"tp-size": 8, "dp-size": 8, "enable-dp-attention": True}


def sandbox_with_release(tmp_path: Path, release: str) -> tuple[LocalSandbox, object]:
    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "launch_server.py").write_text(LAUNCHER)
    (site / f"sglang-{release}.dist-info").mkdir()
    (site / f"sglang-{release}.dist-info" / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: sglang\nVersion: {release}\n"
    )
    task = {
        "name": "spelling",
        "description": "A stand-in sglang launcher.",
        "model": {"id": "test/model", "path": "/models/test", "in_image": True, "overlay": False},
        "hardware": {"gpu": "none", "count": 8},
        "sandbox": {"kind": "local", "env": {"PYTHONPATH": str(site)}},
        "serve": {
            "engine": "sglang",
            "command": "python3 -m sglang.launch_server --model-path {model_path} --host {host} --port {port} {flags}",
            "port": free_port(),
            "flags": {"tp-size": 8},
        },
        "agent": {"provider": "playbook"},
        "outputs": {"runs_dir": str(tmp_path / "runs")},
    }
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(task))
    task = load_task(tmp_path / "task.yaml", environ={})
    sandbox = LocalSandbox(task, tmp_path / "run", "spelling")
    sandbox.start()
    return sandbox, task


def test_the_installed_release_decides_the_spelling(tmp_path):
    sandbox, task = sandbox_with_release(tmp_path, "0.5.23")
    assert serve.installed_version(sandbox, task) == "0.5.23"
    command = serve.render_command(task, DP_ATTENTION, "0.5.23")
    assert "--attn-dp-size 8" in command and "--enable-dp-attention" not in command and "--dp-size" not in command
    assert "--enable-dp-attention" in serve.render_command(task, DP_ATTENTION)  # release unknown: as the task writes
    answer = ask_parser(sandbox, task, [DP_ATTENTION])
    assert answer.version == "0.5.23" and answer.verdicts == [None]


@pytest.mark.parametrize("flags", [{"attn-dp-size": 8}, {"attn-dp-size": 8, "enable-dp-attention": None}])
def test_a_flag_the_release_lacks_is_refused_in_one_line(tmp_path, flags):
    sandbox, task = sandbox_with_release(tmp_path, "0.5.20")
    answer = ask_parser(sandbox, task, [{"tp-size": 8, **flags}, DP_ATTENTION])
    assert answer.verdicts[0] == "sglang 0.5.20 has no --attn-dp-size (0.5.23 on): --enable-dp-attention --dp-size N"
    assert answer.verdicts[1] is None  # the other set is asked as 0.5.20 spells it
    with pytest.raises(SandboxError, match="has no --attn-dp-size .*Nothing was launched"):
        serve.launch(sandbox, task, {"tp-size": 8, **flags}, tmp_path / "serve.log")
    assert not (tmp_path / "serve.log").exists()


def test_a_launcher_that_is_not_the_engines_package_has_no_release(tmp_path):
    sandbox, task = sandbox_with_release(tmp_path, "0.5.23")
    twin = task.model_copy(update={"serve": task.serve.model_copy(update={"command": "python3 -m twin.launch_server"})})
    assert serve.installed_version(sandbox, twin) is None
