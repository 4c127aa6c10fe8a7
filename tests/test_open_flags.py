"""The flag space is open (#30 item 3): on the twin, the agent sets a flag the task never declared and an
environment variable of the serve process; a misspelt flag is refused with the engine parser's own message
before any launch; a secret is never set. The tunables stay the search space, not a fence."""

from __future__ import annotations

import json

import pytest
from twin_tasks import ROOT, bringup_task_data, call, run_scripted, tool_results, write_task

from porter.task import TaskError, load_task


def test_an_undeclared_flag_and_an_environment_variable_reach_the_server(docker_client, tmp_path, monkeypatch):
    monkeypatch.setenv("PORTER_TEST_TOKEN", "sk-secret-value-1234567890")
    data = bringup_task_data(ROOT / "tasks" / "twin_glm52.yaml")
    task_path = write_task(tmp_path, data)
    probe = "grep -ao 'PORTER_OPEN_FLAG_TEST=[a-z]*' /proc/$(pgrep -f twin.launch_server | head -1)/environ || true"
    script = [
        call("set_flags", flags={"chunked-prefil-size": 8192}),  # misspelt: the engine's parser says so
        call("set_flags", flags={"chunked-prefill-size": 8192, "$PORTER_OPEN_FLAG_TEST": "on"}),
        call("set_flags", flags={"$PORTER_TEST_TOKEN": "x"}),  # a secret's name
        call("set_flags", flags={"$SOME_OPTION": "sk-secret-value-1234567890"}),  # a secret's value
        call("serve"),
        call("bash", command=probe),
        call("finish", reason="done"),
    ]
    ctx = run_scripted(task_path, script)
    results = tool_results(ctx.run_dir)
    assert "unrecognized arguments: --chunked-prefil-size 8192" in results[0]["content"], results[0]["content"]
    assert "Nothing was changed" in results[0]["content"] and results[0]["facts"]["ok"] is False
    accepted = results[1]
    assert accepted["facts"]["ok"] and accepted["facts"]["undeclared"] == {"chunked-prefill-size": 8192}
    assert (
        "--chunked-prefill-size 8192" in accepted["content"] and '"PORTER_OPEN_FLAG_TEST": "on"' in accepted["content"]
    )
    assert not results[2]["facts"]["ok"] and "names a secret" in results[2]["content"]
    assert not results[3]["facts"]["ok"] and "never enters the serve process" in results[3]["content"]
    assert results[4]["facts"]["healthy"], results[4]["content"]
    assert "PORTER_OPEN_FLAG_TEST=on" in results[5]["content"]
    assert ctx.state.flags["chunked-prefill-size"] == 8192 and "$PORTER_TEST_TOKEN" not in ctx.state.flags
    assert "sk-secret-value" not in json.dumps(ctx.state.to_dict())


def test_a_task_may_declare_environment_variables_but_never_a_secret(tmp_path):
    data = bringup_task_data(ROOT / "tasks" / "twin_glm52.yaml")
    data["serve"]["flags"]["$SOME_ENGINE_OPTION"] = "false"
    assert load_task(write_task(tmp_path, data)).serve.flags["$SOME_ENGINE_OPTION"] == "false"
    data["serve"]["flags"]["$HF_TOKEN"] = "x"
    with pytest.raises(TaskError, match=r"\$HF_TOKEN names a secret"):
        load_task(write_task(tmp_path, data))
