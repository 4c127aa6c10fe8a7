"""Redaction by value: which variables are secrets, text/bytes/files scrubbed (streamed), what a task or a sandbox
environment may not carry, and `${SECRET}` refused where a task is read."""

from __future__ import annotations

import json

import pytest

from porter import redaction
from porter.redaction import Secrets, environment_problems, looks_secret, secret_fields
from porter.task import TaskError, load_task

ENVIRON = {
    "ANTHROPIC_API_KEY": "sk-ant-api03-realkey-abcdefgh",
    "HF_TOKEN": "hf_abcdefghijkl",
    "ZAI_APIKEY": "zai.0123456789abcdef",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
    "MY_MODEL_ACCESS": "plain-name-but-the-key-var",  # a key under a name that does not look secret
    "DEBUG": "1",
    "DB_PASSWORD": "short",  # under 8 characters: would blank out ordinary words
}


@pytest.fixture
def secrets(monkeypatch) -> Secrets:
    for name, value in ENVIRON.items():
        monkeypatch.setenv(name, value)
    known = redaction.collect(key_names=["MY_MODEL_ACCESS"])
    yield known
    monkeypatch.undo()
    redaction.collect()


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("ZAI_APIKEY", True),
        ("OPENAI_API_KEY", True),
        ("GITHUB_TOKEN", True),
        ("DB_PASSWORD", True),
        ("AWS_ACCESS_KEY_ID", True),
        ("AZURE_CLIENT_SECRET", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("PATH", False),
        ("HOME", False),
        ("TWIN_TIME_SCALE", False),
    ],
)
def test_secret_names(name, secret):
    assert looks_secret(name) is secret


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("key=sk-ant-api03-realkey-abcdefgh", "key=[REDACTED:ANTHROPIC_API_KEY]"),
        ('{"auth": "hf_abcdefghijkl"}', '{"auth": "[REDACTED:HF_TOKEN]"}'),
        ("ZAI_APIKEY=zai.0123456789abcdef\n", "ZAI_APIKEY=[REDACTED:ZAI_APIKEY]\n"),
        ("x plain-name-but-the-key-var y", "x [REDACTED:MY_MODEL_ACCESS] y"),
        ("Bearer sk-proj-0123456789abcdefghij", "Bearer sk-[REDACTED]"),
        ("DEBUG=1 and sk-learn and short stay", "DEBUG=1 and sk-learn and short stay"),
    ],
)
def test_redact_by_value(secrets, text, expected):
    assert redaction.redact(text) == expected
    assert secrets.redact_bytes(text.encode()) == expected.encode()


def test_the_json_escaped_spelling_is_masked_too(monkeypatch):
    monkeypatch.setenv("WEIRD_SECRET", 'pa"ss\\word-123')
    redaction.collect()
    line = json.dumps({"note": 'value pa"ss\\word-123'})
    assert "pa" not in redaction.redact(line).replace("[REDACTED:WEIRD_SECRET]", "")
    monkeypatch.undo()
    redaction.collect()


@pytest.mark.parametrize("offset", [0, 1, (1 << 20) - 10, (1 << 20) - 1, 1 << 20, (2 << 20) - 5])
def test_files_are_scrubbed_streamed_even_across_chunk_borders(secrets, tmp_path, offset):
    path = tmp_path / "serve.log"
    secret = ENVIRON["ZAI_APIKEY"]
    data = b"a" * offset + secret.encode() + b"\n" + b"b" * 5000
    path.write_bytes(data)
    path.chmod(0o640)
    assert secrets.scrub_file(path) is True
    scrubbed = path.read_bytes()
    assert secret.encode() not in scrubbed and b"[REDACTED:ZAI_APIKEY]" in scrubbed
    assert len(scrubbed) == len(data) - len(secret) + len("[REDACTED:ZAI_APIKEY]")
    assert path.stat().st_mode & 0o777 == 0o640
    assert secrets.scrub_file(path) is False  # nothing left: the file is not rewritten


def test_scrub_tree_skips_the_sandbox_trees_and_links(secrets, tmp_path):
    secret = ENVIRON["HF_TOKEN"]
    (tmp_path / "logs").mkdir()
    (tmp_path / "repos").mkdir()
    (tmp_path / "logs" / "exec.log").write_text(f"token {secret}\n")
    (tmp_path / "repos" / "tree.txt").write_text(secret)
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text(secret)
    (tmp_path / "logs" / "link").symlink_to(outside)
    sweep = redaction.scrub_tree(tmp_path, skip=[tmp_path / "repos"])
    assert sweep.rewritten == [tmp_path / "logs" / "exec.log"] and sweep.too_large == []
    assert (tmp_path / "repos" / "tree.txt").read_text() == secret
    assert outside.read_text() == secret  # a link is never followed, the file behind it never rewritten


def test_a_sparse_file_stays_sparse_and_a_huge_one_is_not_read(secrets, tmp_path, monkeypatch):
    secret = ENVIRON["HF_TOKEN"].encode()
    sparse = tmp_path / "sparse.log"
    with open(sparse, "wb") as out:
        out.write(b"head " + secret + b"\n")
        out.seek(100 << 20)  # 100 MiB of hole
        out.write(b"tail " + secret + b"\n")
        out.seek(50 << 20, 1)  # and a hole at the end
        out.truncate()
    huge = tmp_path / "huge.log"
    with open(huge, "wb") as out:
        out.write(secret)
        out.truncate(redaction.MAX_SCRUB_BYTES + 1)
    size = sparse.stat().st_size
    sweep = redaction.scrub_tree(tmp_path)
    assert sweep.rewritten == [sparse] and sweep.too_large == [huge]
    assert sparse.stat().st_size == size - 2 * len(secret) + 2 * len(b"[REDACTED:HF_TOKEN]")
    assert sparse.stat().st_blocks * 512 < 8 << 20  # still holes (a chunk around each write), not 150 MiB
    with open(sparse, "rb") as scrubbed:
        assert scrubbed.read(64).startswith(b"head [REDACTED:HF_TOKEN]\n")
    assert huge.read_bytes()[: len(secret)] == secret  # left alone, and named
    with open(huge, "rb") as source, pytest.raises(redaction.ScrubTooLarge):
        secrets.copy_redacted(source, None, max_bytes=redaction.MAX_SCRUB_BYTES)


def test_environment_problems_by_name_value_and_reference(secrets):
    problems = environment_problems(
        {
            "HF_TOKEN": "x",
            "MY_MODEL_ACCESS": "y",
            "INNOCENT": f"prefix-{ENVIRON['ZAI_APIKEY']}",
            "REFERS": "${ANTHROPIC_API_KEY}",
            "ALSO_REFERS": "$ZAI_APIKEY",
            "FINE": "TWIN_TIME_SCALE=0.5",
        },
        key_name="MY_MODEL_ACCESS",
    )
    assert problems == [
        "HF_TOKEN (a secret by its name)",
        "MY_MODEL_ACCESS (a secret by its name)",
        "INNOCENT (its value is the secret ZAI_APIKEY)",
        "REFERS (refers to the secret variable ANTHROPIC_API_KEY)",
        "ALSO_REFERS (refers to the secret variable ZAI_APIKEY)",
    ]


def test_secret_fields_name_where_a_value_hides(secrets):
    data = {"agent": {"api_key_env": "ZAI_APIKEY"}, "serve": {"command": f"run --key {ENVIRON['ZAI_APIKEY']}"}}
    assert secret_fields(data) == ["serve.command (holds the value of ZAI_APIKEY)"]


TASK = """\
name: demo
model: {id: org/demo, path: /models/demo}
hardware: {gpu: MI355X, count: 1}
sandbox: {kind: local, env: {A: "WHAT"}}
serve: {command: "serve {model_path}"}
agent: {api_key_env: "KEYNAME"}
"""


@pytest.mark.parametrize(
    ("what", "problem"),
    [
        ('"${ZAI_APIKEY}"', "sandbox.env.A: ${ZAI_APIKEY} names a secret; use agent.api_key_env: ZAI_APIKEY"),
        ('"x-${HF_TOKEN:-none}"', "sandbox.env.A: ${HF_TOKEN} names a secret"),
    ],
)
def test_a_task_may_not_expand_a_secret(tmp_path, what, problem):
    path = tmp_path / "task.yaml"
    path.write_text(TASK.replace('"WHAT"', what))
    with pytest.raises(TaskError, match=problem.replace("$", r"\$").replace("{", r"\{").replace("}", r"\}")):
        load_task(path, environ={"ZAI_APIKEY": "zai.0123456789abcdef", "HF_TOKEN": "hf_abcdefghijkl"})
    path.write_text(TASK.replace('"KEYNAME"', '"${KEY_VARIABLE}"'))
    assert load_task(path, environ={"KEY_VARIABLE": "ZAI_APIKEY"}).agent.api_key_env == "ZAI_APIKEY"
