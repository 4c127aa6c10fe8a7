"""One long tool result is cut to whole lines, and the cut says which lines went and the call that reads them:
a 60 KB `cat` in the local sandbox (cut by the sandbox to its head and tail bytes), a long read_file, a line
longer than the cap. Runs the real loop on the local sandbox with a scripted model where a sandbox is needed."""

from __future__ import annotations

import re

from local_tasks import open_local_run, run_local

from porter.loop import agent
from porter.models import ToolCall

LINE = "value_{n} = {n} * 3  # line {n}"


def numbered_file(path, lines: int) -> None:
    path.write_text("".join(LINE.format(n=n) + "\n" for n in range(1, lines + 1)))


def test_a_60kb_cat_is_cut_at_whole_lines_and_says_how_to_read_on(tmp_path):
    ctx = open_local_run(tmp_path)
    big = tmp_path / "big.txt"
    numbered_file(big, 2000)  # 64 KB
    assert big.stat().st_size > 60_000
    command = f"cat {big}"
    script = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]},
    ]
    model = run_local(ctx, script)
    result = model.requests[1][-1].content.splitlines()
    note = next(line for line in result if line.startswith("[porter left out"))
    head, tail = result[1 : result.index(note)], result[result.index(note) + 1 :]
    assert head == [LINE.format(n=n) for n in range(1, len(head) + 1)]  # whole lines from the first, none cut
    first_tail = int(tail[0].rsplit(" ", 1)[1])
    assert tail == [LINE.format(n=n) for n in range(first_tail, 2001)]  # whole lines to the last
    reading = re.search(r"`\| sed -n '(\d+),(\d+)p'`", note)
    assert reading and int(reading.group(1)) == len(head) + 1  # reads on from the first line not shown
    assert f"after line {len(head) + 1} of this result" in note and str(big) in note  # the command to repeat
    assert "exec.log" not in note  # a host path the model cannot read is not offered


def test_a_long_read_file_names_the_range_it_left_out():
    lines = [f"{n:6d}  {LINE.format(n=n)}" for n in range(1, 3001)]
    text = "\n".join(["/repo/big.py lines 1-3000 of 3000", *lines])
    call = ToolCall("c1", "read_file", {"path": "/repo/big.py"})
    capped = agent.cap_text(text, call=call, facts={"path": "/repo/big.py", "lines": 3000}).splitlines()
    assert sum(len(line) + 1 for line in capped) < agent.MAX_TOOL_RESULT_CHARS + 600
    note = next(line for line in capped if line.startswith("[porter left out"))
    shown = [int(line.split()[0]) for line in capped[1:] if line != note]
    missing = sorted(set(range(1, 3001)) - set(shown))
    assert missing == list(range(missing[0], missing[-1] + 1))  # one cut, in the middle
    expected = f'read_file {{"path": "/repo/big.py", "start_line": {missing[0]}, "end_line": {missing[-1]}}}'
    assert expected in note


def test_one_overlong_line_is_cut_and_says_so():
    text = "exit 0 after 0.1 s\n" + "{" + "x" * 50_000 + "}\nlast line"
    capped = agent.cap_text(text, call=ToolCall("c1", "bash", {"command": "cat blob.json"}))
    assert len(capped) < agent.MAX_TOOL_RESULT_CHARS and capped.endswith("last line")
    assert f"[porter cut {50_002 - agent.MAX_TOOL_RESULT_CHARS // 4} more characters of this line]" in capped
