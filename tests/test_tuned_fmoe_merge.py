"""porter's tuned fused-MoE rows merged into aiter's shipped tables (../shared/upstream/aiter/configs: byte copies of
ROCm/aiter @ e4048607, see its SOURCES.md; skipped when absent): one row per aiter lookup key, the faster row kept,
upstream's rows and file order untouched otherwise. The tuner's output is imitated as gemm_moe_tune.py writes it at
that commit: its key and result columns, no `_tag`."""

from __future__ import annotations

import csv
import io
import shutil
from collections import Counter
from pathlib import Path

import git
import pytest
import yaml
from local_tasks import local_task

from porter.evaluate import runs
from porter.loop import tools
from porter.task import load_task
from porter.upstream_facts import AITER_FMOE_FALLBACK_TAG, AITER_FMOE_TABLES, aiter_fmoe_key, merge_into_tree

SHIPPED = Path(__file__).resolve().parents[1] / ".." / "shared" / "upstream" / "aiter"
GLM5_FP4 = "aiter/configs/model_configs/glm5_fp4_tuned_fmoe.csv"
TUNER_COLUMNS = (
    "gfx,cu_num,token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,"
    "doweight_stage1,block_m,ksplit,us1,kernelName1,err1,us2,kernelName2,err2,us,run_1stage,xbf16,flat,tflops,bw"
).split(",")


@pytest.fixture
def tree(tmp_path) -> Path:
    if not (SHIPPED / "configs" / "tuned_fmoe.csv").is_file():
        pytest.skip("aiter's shipped tables are not in ../shared/upstream/aiter")
    shutil.copytree(SHIPPED / "configs", tmp_path / "aiter-tree" / "aiter" / "configs")
    return tmp_path / "aiter-tree"


def read(path: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def tuner_output(path: Path, rows: list[dict]) -> None:
    out = io.StringIO()
    writer = csv.DictWriter(out, TUNER_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(out.getvalue())


def lookup(root: Path) -> dict[tuple, dict]:
    """The row aiter would use per key: the tables in its order (tuned_fmoe.csv, then model_configs), fallback rows
    dropped, the first row of a key."""
    first, pattern = AITER_FMOE_TABLES
    paths = [root / first, *sorted(p for p in root.glob(pattern) if "untuned" not in p.name)]
    rows = [row for path in paths for row in read(path) if (row.get("_tag") or "") != AITER_FMOE_FALLBACK_TAG]
    chosen: dict[tuple, dict] = {}
    for row in rows:
        chosen.setdefault(aiter_fmoe_key(row), row)
    assert not [key for key, count in Counter(aiter_fmoe_key(row) for row in rows).items() if count > 1]
    return chosen


def test_a_faster_row_replaces_upstream_a_slower_one_does_not_and_a_new_key_is_added(tree):
    shipped = read(tree / GLM5_FP4)
    before_text = {path: path.read_bytes() for path in tree.rglob("*.csv")}
    faster = {**shipped[3], "us": f"{float(shipped[3]['us']) / 2:.4f}", "kernelName1": "porter_faster_kernel"}
    slower = {**shipped[5], "us": f"{float(shipped[5]['us']) * 3:.4f}", "kernelName1": "porter_slower_kernel"}
    novel = {**shipped[7], "inter_dim": "768", "us": "12.5", "kernelName1": "porter_new_kernel"}
    tuner_output(tree / "aiter" / "configs" / "porter_tuned_fmoe.csv", [faster, slower, novel])

    merge = merge_into_tree(tree, "aiter/configs/porter_tuned_fmoe.csv")

    assert merge.counts == {"replaced": 1, "kept": 1, "new": 1, "failed": 0}
    assert not (tree / "aiter" / "configs" / "porter_tuned_fmoe.csv").exists()
    glm5 = read(tree / GLM5_FP4)
    assert glm5[3]["kernelName1"] == "porter_faster_kernel" and glm5[3]["_tag"] == "" and glm5[5] == shipped[5]
    assert len(glm5) == len(shipped) + 1 and glm5[-1]["kernelName1"] == "porter_new_kernel"  # where its shape lives
    changed = [path for path in before_text if path.read_bytes() != before_text[path]]
    assert [str(path.relative_to(tree)) for path in changed] == ["aiter/configs/model_configs/glm5_fp4_tuned_fmoe.csv"]
    old, new = before_text[tree / GLM5_FP4].decode().splitlines(), (tree / GLM5_FP4).read_text().splitlines()
    assert [index for index, (a, b) in enumerate(zip(old, new, strict=False)) if a != b] == [4]  # the header is line 0
    chosen = lookup(tree)
    assert chosen[aiter_fmoe_key(faster)]["kernelName1"] == "porter_faster_kernel"
    assert chosen[aiter_fmoe_key(slower)]["kernelName1"] == shipped[5]["kernelName1"]
    assert chosen[aiter_fmoe_key(novel)]["kernelName1"] == "porter_new_kernel"
    assert any("replaced" in line and f"{shipped[3]['us']} us -> {faster['us']} us" in line for line in merge.lines)


def test_the_real_tasks_48_rows_never_shadow_upstream(tree):
    """GLM-5.2's task tunes inter_dim 256/512/1024 x 16 padded M (E=257, topk=9, fp4): all 48 keys are upstream's.
    Every other row is 20% faster, the rest 3x slower: 24 replaced, 24 kept, each key once, the faster row used."""
    shipped = [row for row in read(tree / GLM5_FP4) if row["inter_dim"] in ("256", "512", "1024")]
    assert len(shipped) == 48
    tuned = [
        {**row, "us": f"{float(row['us']) * (0.8 if n % 2 else 3):.4f}", "kernelName2": f"porter_{n}"}
        for n, row in enumerate(shipped)
    ]
    tuner_output(tree / "tuned.csv", tuned)
    merge = merge_into_tree(tree, "tuned.csv")
    assert merge.counts == {"replaced": 24, "kept": 24, "new": 0, "failed": 0}
    chosen = lookup(tree)
    for n, row in enumerate(tuned):
        assert chosen[aiter_fmoe_key(row)]["kernelName2"] == (f"porter_{n}" if n % 2 else shipped[n]["kernelName2"])


def test_a_failed_shape_is_left_out_and_a_foreign_file_is_refused(tree):
    row = read(tree / GLM5_FP4)[0]
    tuner_output(tree / "tuned.csv", [{**row, "us": "-1"}, {**row, "inter_dim": "4096", "us": "inf"}])
    assert merge_into_tree(tree, "tuned.csv").counts == {"replaced": 0, "kept": 0, "new": 0, "failed": 2}
    (tree / "notes.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not an aiter tuned fused-MoE table: no column cu_num"):
        merge_into_tree(tree, "notes.csv")
    assert not (tree / "notes.csv").exists()  # never left in the tree
    with pytest.raises(ValueError, match="no tuner output under"):
        merge_into_tree(tree, "../outside.csv")


def test_the_tune_tool_merges_what_the_tuner_wrote(tree, tmp_path):
    """A task's tune command whose aiter_tuned_output names the tuner's -o file: after it runs, porter has merged
    the rows into the aiter repo's tables, removed the file, and told the model what it replaced, kept and added."""
    shipped = read(tree / GLM5_FP4)
    tuner_output(tmp_path / "out.csv", [{**shipped[0], "us": "0.5"}, {**shipped[1], "us": "99999"}])
    repo = git.Repo.init(tree)
    repo.git.add("--all")
    repo.git.execute(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "aiter"])
    (tmp_path / "run").mkdir()
    path = local_task(tmp_path / "run")
    task = yaml.safe_load(path.read_text())
    task["repos"].append({"name": "aiter", "path": str(tree)})
    command = f"cp {tmp_path / 'out.csv'} porter_tuned_fmoe.csv"  # imitates gemm_moe_tune.py -o porter_tuned_fmoe.csv
    task["tune"] = [
        {"name": "moe", "command": command, "workdir": str(tree), "aiter_tuned_output": "porter_tuned_fmoe.csv"}
    ]
    path.write_text(yaml.safe_dump(task))
    ctx = runs.open_run(load_task(path), str(path))
    try:
        result = tools.dispatch(ctx, "tune", {"name": "moe"})
    finally:
        ctx.transcript.close()
        ctx.sandbox.stop(remove=True)
    assert result.ok, result.text
    assert "merged into aiter's tables: {'replaced': 1, 'kept': 1, 'new': 0, 'failed': 0}" in result.text
    assert result.facts["changed"] == {"aiter": ["aiter/configs/model_configs/glm5_fp4_tuned_fmoe.csv"]}


def test_a_table_linked_out_of_the_tree_is_never_written(tree, tmp_path):
    outside = tmp_path / "outside.csv"
    shutil.copy(tree / GLM5_FP4, outside)
    (tree / GLM5_FP4).unlink()
    (tree / GLM5_FP4).symlink_to(outside)
    row = read(outside)[0]
    tuner_output(tree / "tuned.csv", [{**row, "us": "0.5"}])
    with pytest.raises(ValueError, match="glm5_fp4_tuned_fmoe.csv links out of .*: no table was written"):
        merge_into_tree(tree, "tuned.csv")
    assert read(outside)[0]["us"] == row["us"]
    (tree / "huge.csv").write_text("cu_num,us\n" + "x" * 200_000 + ",1\n")
    with pytest.raises(ValueError, match="not a readable CSV"):
        merge_into_tree(tree, "huge.csv")


def test_a_row_beating_a_legacy_table_row_keeps_what_that_table_lacks(tree):
    """aiter/configs/tuned_fmoe.csv has no gfx, xbf16 or flat column: a tuned row whose flat is 1 adds the column,
    the table's other rows getting the 0 aiter's merge would give them; a gfx aiter reads from cu_num is not added."""
    table = tree / "aiter" / "configs" / "tuned_fmoe.csv"
    shipped = read(table)
    tuned = {**shipped[2], "gfx": "gfx942", "xbf16": "0", "flat": "1", "us": "0.001", "kernelName1": "porter_flat"}
    assert shipped[2]["cu_num"] == "80" and "flat" not in shipped[2]
    tuner_output(tree / "tuned.csv", [tuned])
    assert merge_into_tree(tree, "tuned.csv").counts["replaced"] == 1
    merged = read(table)
    assert merged[2]["flat"] == "1" and merged[2]["kernelName1"] == "porter_flat"
    assert {row["flat"] for n, row in enumerate(merged) if n != 2} == {"0"}
    assert "gfx" not in merged[0] and "xbf16" not in merged[0]


def test_a_tree_without_the_default_table_gets_one_for_a_shape_nobody_ships(tree):
    (tree / "aiter" / "configs" / "tuned_fmoe.csv").unlink()
    row = {**read(tree / GLM5_FP4)[0], "model_dim": "1234", "us": "9.5"}
    tuner_output(tree / "tuned.csv", [row])
    assert merge_into_tree(tree, "tuned.csv").counts["new"] == 1
    assert read(tree / "aiter" / "configs" / "tuned_fmoe.csv")[0]["model_dim"] == "1234"
