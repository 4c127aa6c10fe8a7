"""`porter run` options that choose the model: a provider override never sends the task's key elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from fake_provider import FakeProvider
from local_tasks import local_task

SECRET = "sk-ant-task-key-" + "q" * 20


@pytest.mark.parametrize("explicit", [False, True])
def test_a_provider_override_resets_the_key_variable(tmp_path, explicit):
    task = local_task(tmp_path, provider="anthropic", model="claude-sonnet-4-5", api_key_env="PORTER_TASK_KEY")
    with FakeProvider() as fake:
        fake.reply(tool_calls=[("finish", {"reason": "checked the key"})])
        command = [sys.executable, "-m", "porter", "run", str(task), "--skip-preflight"]
        command += ["--provider", "openai", "--model", "glm-5.2", "--base-url", fake.url + "/v1"]
        command += ["--api-key-env", "PORTER_TASK_KEY"] if explicit else []
        env = {key: value for key, value in os.environ.items() if key != "OPENAI_API_KEY"}
        done = subprocess.run(command, capture_output=True, text=True, env={**env, "PORTER_TASK_KEY": SECRET})
        assert done.returncode == 1, done.stderr[-2000:]
        sent = fake.requests[0].headers.get("authorization", "")
    assert (SECRET in sent) is explicit  # without --api-key-env the task's key stays home
    assert explicit or sent == "Bearer porter-no-key"
