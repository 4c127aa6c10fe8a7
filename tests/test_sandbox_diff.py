"""Nothing outside the repos: on the twin in a real Docker sandbox, a package installed into dist-packages
(what `pip install` does; the image has no pip) makes accept refuse and name it, while what the engine
writes by itself while serving (caches, temp files, bytecode, the mount points) does not count."""

from __future__ import annotations

import pytest
from twin_tasks import build_twin, call, facts, fast_twin_task, run_scripted, tool_results

pytestmark = pytest.mark.docker

INSTALL = (
    "mkdir -p /usr/local/lib/python3.11/dist-packages/fastkernels /usr/local/lib/python3.11/dist-packages/"
    "fastkernels-0.1.dist-info && echo 'SPEEDUP = 2' > /usr/local/lib/python3.11/dist-packages/fastkernels/__init__.py"
)


@pytest.fixture(scope="module")
def twin_image(docker_client) -> str:
    return build_twin()


def test_a_package_installed_in_the_sandbox_blocks_accept(twin_image, tmp_path):
    change = call("set_flags", flags={"mem-fraction-static": 0.8})
    script = [call("serve"), change, call("serve"), call("accept", summary="Smaller static memory fraction")]
    script[1:1] = [call("bash", command=INSTALL)]
    ctx = run_scripted(fast_twin_task(tmp_path), script)
    accept = next(result for result in tool_results(ctx.run_dir) if result["name"] == "accept")
    refused = accept["content"]
    assert facts(accept)["ok"] is False and "accept refused" in refused
    assert "added /usr/local/lib/python3.11/dist-packages/fastkernels" in refused
    assert "fastkernels-0.1.dist-info" in refused
    for harmless in ("/tmp", "/root/.cache", "/porter", "docker-init", "__pycache__", "/sgl-workspace"):
        assert harmless not in refused.split("Undo these")[0], harmless
    assert ctx.state.flags["mem-fraction-static"] == 0.8 and ctx.state.attempts == []  # nothing kept or reverted
