"""What a person reads of a run: report.md opening with the baseline -> final table, a timeline in CLI form, the
plots, and report.html, loaded in a real headless Chromium (a screenshot and its DOM), which shows a later step
after the run advanced and stops reloading once the run is over.

On a prepared run (tests/prepared_run.py): porter's own records and a real git tree, built in a second.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from helpers import in_ci
from PIL import Image, ImageStat
from prepared_run import DRAFT_3, PreparedRun

from porter.report.run_reading import cli_change, read_run
from porter.report.run_report import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_the_report_opens_with_baseline_to_final_and_reads_in_cli_form(tmp_path):
    run = PreparedRun(tmp_path).build()
    text = write_report(run.run_dir).read_text()
    head = text.split("## Timeline")[0]
    assert head.index("## Baseline -> final") < head.index("| target | baseline | final | change | goal | met |")
    assert "| single stream (output tok/s) | 254 | 649 (stale) | +156% | >= 720 | no |" in head
    assert "| throughput (output tok/s/node at knee) | 410 | 484 | +18% | >= 780 | no |" in head
    assert "| quality gsm8k | 0.975 (95% CI 0.945-0.990, n=200) |" in head and ">= 0.93 |" in head
    timeline = text.split("## Timeline")[1].split("## Final serve command")[0]
    rows = [line for line in timeline.splitlines() if line[:3].strip("| ").isdigit()]
    assert [row.split(" | ")[4:6] for row in rows] == [
        ["kept", "`gain`"],
        ["kept", "`crash_fix`"],
        ["reverted", "`no_gain`"],
    ]
    reverted = rows[2].split(" | ")
    assert reverted[1] == "`--speculative-num-steps 5 --speculative-num-draft-tokens 6`"
    assert reverted[2] == "try `--speculative-num-steps 5` for single_stream"  # the agent's dict, in CLI form
    assert reverted[6].startswith("no improvement beyond noise; the crash fix it needed stays kept")
    assert "{'" not in text and "854.509" not in text
    document = json.loads((run.run_dir / "report.json").read_text())
    single = next(t for t in document["targets"] if t["metric"] == "output_tok_s")
    assert single["baseline"] == pytest.approx(253.8) and document["timeline"][2]["outcome"] == "reverted"
    for plot in ("throughput_ttft_vs_rps.png", "objective.png"):
        assert Image.open(run.run_dir / "plots" / plot).size[0] > 1000


@pytest.mark.skipif(CHROMIUM is None and not in_ci(), reason="no chromium here (CI installs it: scripts/setup.sh)")
def test_the_html_report_loads_in_a_browser_and_follows_the_run(tmp_path):
    run = PreparedRun(tmp_path).build()
    write_report(run.run_dir, live=True)
    page = run.run_dir / "report.html"
    shot = tmp_path / "report.png"
    first = browse(page, shot)
    assert '<meta http-equiv="refresh" content="30">' in first and "Running: step 12 of at most" in first
    assert "Baseline -&gt; final" in first and ">throughput (output tok/s/node at knee)</td>" in first
    assert first.count("data:image/png;base64,") == 2  # the plots are in the page itself
    image = Image.open(shot).convert("L")
    assert image.size == (1280, 2000) and ImageStat.Stat(image).stddev[0] > 20  # text and plots, not a blank page
    run.advance()
    write_report(run.run_dir, live=True)
    second = browse(page)
    assert "Running: step 13 of at most" in second and "try <code>--kv-cache-dtype fp8_e4m3</code>" not in first
    run.finish()
    write_report(run.run_dir)
    last = browse(page)
    assert 'http-equiv="refresh"' not in last and "Finished: not solved" in last


def browse(page, screenshot=None) -> str:
    """Chromium headless: the page's DOM after load (and a screenshot of it)."""
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,2000"]
    url = page.as_uri()
    if screenshot:
        subprocess.run(
            [CHROMIUM, *flags, f"--screenshot={screenshot}", url], check=True, capture_output=True, timeout=120
        )
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", url], check=True, capture_output=True, text=True, timeout=120)
    return dom.stdout


def test_what_an_agent_wrote_never_becomes_markup_or_a_fetch(tmp_path):
    run = PreparedRun(tmp_path).build()
    run.say(
        9,
        "<script>alert(1)</script> ![x](http://example.org/pixel.png) [y](javascript:alert(2))",
        "set_flags",
        flags={"speculative-num-steps": 5},
    )
    write_report(run.run_dir)
    page = (run.run_dir / "report.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script" not in page
    assert 'src="http' not in page and 'href="javascript' not in page
    assert "default-src 'none'; img-src data:" in page


def test_flags_read_as_a_command_line_environment_included(tmp_path):
    run = PreparedRun(tmp_path).build()
    task = read_run(run.run_dir).task
    before = {"tp-size": 8, "dp-size": 2, "$SGLANG_USE_AITER": "1", "chunked-prefill-size": 0}
    after = {
        "tp-size": 4,
        "dp-size": None,
        "$SGLANG_USE_AITER": None,
        "$HIP_FORCE_DEV_KERNARG": "1",
        "chunked-prefill-size": 0,
        **DRAFT_3,
    }
    assert cli_change(task, before, after) == (
        "HIP_FORCE_DEV_KERNARG=1 --tp-size 4 --speculative-algorithm EAGLE --speculative-num-steps 3 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 no --dp-size unset SGLANG_USE_AITER"
    )
    assert cli_change(task, {"chunked-prefill-size": 0}, {"chunked-prefill-size": None}) == "no --chunked-prefill-size"
