"""The model overlay: a checkpoint's small files as a patchable git tree, its weights linked read-only.

Runs a real local sandbox (and, marked docker, a real container) on a small checkpoint directory: the
engine sees the whole checkpoint at its container path, the agent's edits land in git, the weights are
never copied nor writable, and the accepted change exports as a patch series that `git am`s onto the
checkpoint's files as published.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import git
import pytest

from porter.evaluate import runs
from porter.ledger.transcript import write_state
from porter.loop import tools
from porter.report.pr_draft import write_prs
from porter.sandbox import DockerSandbox, SandboxError
from porter.sandbox.trees.overlay import build_from_dir, is_weight
from porter.sandbox.trees.tracked import commit_message
from porter.task import Task

CONFIG = {"architectures": ["GlmMoeDsaForCausalLM"], "quantization_config": {"exclude": ["lm_head"]}}
WEIGHT_BYTES = b"\x00\x01weights" * 100


def make_checkpoint(root: Path) -> Path:
    """A checkpoint as the hub ships it: config, tokenizer, remote code, two shards in two folders."""
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    (root / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}\n')
    (root / "modeling_glm.py").write_text("class GlmMoeDsaForCausalLM: ...\n")
    (root / "model-00001-of-00002.safetensors").write_bytes(WEIGHT_BYTES)
    (root / "mtp").mkdir()
    (root / "mtp" / "model-00002-of-00002.safetensors").write_bytes(WEIGHT_BYTES[::-1])
    return root


def overlay_task(checkpoint: Path, kind: str = "local", runs_dir: Path | None = None) -> Task:
    sandbox = {"kind": kind, "workdir": "/"}
    if kind == "docker":
        sandbox["image"] = "porter-base:bookworm"
    return Task.model_validate(
        {
            "name": "overlay",
            "model": {"id": "zai-org/GLM-5.2-MXFP4", "path": str(checkpoint), "mount": "/models/GLM-5.2-MXFP4"},
            "hardware": {"gpu": "MI355X", "count": 8},
            "sandbox": sandbox,
            "serve": {"command": "true {model_path} {flags}"},
            "outputs": {"runs_dir": str(runs_dir or checkpoint.parent / "runs")},
        }
    )


@pytest.mark.parametrize(
    ("name", "size", "weight"),
    [
        ("model-00001-of-00163.safetensors", 10, True),
        ("pytorch_model.bin", 10, True),
        ("config.json", 10, False),
        ("tokenizer.json", 20 << 20, False),
        ("vocab.dat", 100 << 20, True),
    ],
)
def test_what_counts_as_a_weight(name, size, weight):
    assert is_weight(name, size) is weight


def test_small_files_are_copied_and_committed_weights_are_links(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    tree = tmp_path / "overlay"
    linked = build_from_dir(checkpoint, tree, link_base="/porter/weights")
    assert linked == ["model-00001-of-00002.safetensors", "mtp/model-00002-of-00002.safetensors"]
    assert (tree / "mtp/model-00002-of-00002.safetensors").readlink() == Path(
        "/porter/weights/mtp/model-00002-of-00002.safetensors"
    )
    assert not (tree / "config.json").is_symlink()
    repo = git.Repo(tree)
    assert sorted(repo.git.ls_files().splitlines()) == ["config.json", "modeling_glm.py", "tokenizer_config.json"]
    assert not repo.is_dirty(untracked_files=True)


def test_a_directory_without_config_json_is_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SandboxError, match=r"model.path .*empty: no config.json there"):
        build_from_dir(tmp_path / "empty", tmp_path / "overlay", link_base="/w")


def test_the_overlay_is_a_repo_of_the_run_and_its_patch_series_git_ams(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    task = overlay_task(checkpoint)
    ctx = runs.open_run(task, "task.yaml")
    try:
        assert sorted(ctx.repos) == ["model"]
        tree = ctx.run_dir / "root" / "models" / "GLM-5.2-MXFP4"
        assert ctx.repos["model"].path == tree
        # the engine reads the whole checkpoint at the container path, weights through the links
        assert (tree / "mtp/model-00002-of-00002.safetensors").read_bytes() == WEIGHT_BYTES[::-1]
        result = tools.dispatch(
            ctx,
            "edit_file",
            {
                "path": "/models/GLM-5.2-MXFP4/config.json",
                "old": '"lm_head"',
                "new": '"lm_head",\n      "model.decoder.mlp.shared_experts.*"',
            },
        )
        assert result.ok, result.text
        result = tools.dispatch(ctx, "read_file", {"path": "/models/GLM-5.2-MXFP4/model-00001-of-00002.safetensors"})
        assert not result.ok and "symbolic link" in result.text  # weights are not the agent's to edit
        assert ctx.repos["model"].changed_files() == ["config.json"]
        message = commit_message("Exclude the MTP shared expert under the engine's name", "load", "", "", "")
        ctx.repos["model"].accept(ctx.state.repos["model"], message)
        write_state(ctx.run_dir, ctx.state.to_dict(), lambda text: text)
    finally:
        ctx.transcript.close()
    assert json.loads((checkpoint / "config.json").read_text()) == CONFIG  # the original is untouched
    written = write_prs(ctx.run_dir)
    assert written == [ctx.run_dir / "prs" / "model.md"]
    assert "https://huggingface.co/zai-org/GLM-5.2-MXFP4" in written[0].read_text()
    (patch,) = sorted((ctx.run_dir / "patches" / "model").glob("*.patch"))
    published = tmp_path / "published"
    published.mkdir()
    for name in ("config.json", "tokenizer_config.json", "modeling_glm.py"):
        (published / name).write_bytes((checkpoint / name).read_bytes())
    repo = git.Repo.init(published)
    repo.git.add(A=True)
    repo.git.execute(["git", "-c", "user.name=hub", "-c", "user.email=hub@example.org", "commit", "-qm", "upload"])
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "am", str(patch)],
        cwd=published,
        check=True,
        capture_output=True,
    )
    excluded = json.loads((published / "config.json").read_text())["quantization_config"]["exclude"]
    assert excluded == ["lm_head", "model.decoder.mlp.shared_experts.*"]


@pytest.mark.docker
def test_in_docker_the_checkpoint_is_whole_at_the_mount_and_the_weights_are_read_only(docker_client, tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    task = overlay_task(checkpoint, kind="docker")
    box = DockerSandbox(task, tmp_path / "run", "overlay-docker-test", client=docker_client)
    try:
        box.start()
        shard = "/models/GLM-5.2-MXFP4/mtp/model-00002-of-00002.safetensors"
        result = box.exec(f"sha256sum {shard} && cat /models/GLM-5.2-MXFP4/config.json", timeout=60)
        assert result.exit_code == 0, result.output
        assert hashlib.sha256(WEIGHT_BYTES[::-1]).hexdigest() in result.output
        assert "GlmMoeDsaForCausalLM" in result.output
        written = box.exec(f"echo x >> {shard}", timeout=30)
        assert written.exit_code != 0 and "Read-only file system" in written.output
        assert (checkpoint / "mtp/model-00002-of-00002.safetensors").read_bytes() == WEIGHT_BYTES[::-1]
        edited = box.exec("echo '# note' >> /models/GLM-5.2-MXFP4/modeling_glm.py", timeout=30)
        assert edited.exit_code == 0
        assert git.Repo(tmp_path / "run" / "repos" / "model").is_dirty()
    finally:
        box.stop(remove=True)
