"""The conversation a model is sent, kept under `agent.context_budget_tokens`, never hiding the newest.

The system prompt, the task and the latest turn (the model's last reply, the results of its calls and
porter's notes after it) are always sent whole, at any budget: the model reads what it just asked for.
While a request fits the budget nothing is cut. When it would not, older material goes, oldest first,
until the request fits LOW_WATER of the budget:
1. older tool results are shortened to their head, their tail and the lines the model quoted since (in its
   later text or tool arguments), each gap marked, and a note naming the call that gets the rest back
   (read_file with the line range, read_log with the launch and the grep, the bash command again);
2. long texts and long string arguments of older assistant turns are cut;
3. whole older turns are dropped (one note counts them), never the latest.
The fitted conversation is the one the run keeps in state.json, so `--resume` continues from the same view;
the transcript keeps every result whole. A message's `facts` are never elided: the playbook reads them and
they are never sent. Also says how to read a result again (`how_to_read_again`), which agent.cap_text uses
for a result cut when it is recorded. Does not render results.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from porter.models import Message, ToolCall, ToolSpec
from porter.triage.lines import shorten

# Conservative: English is ~4 characters per token, code, JSON and logs nearer 3.
CHARS_PER_TOKEN = 3
# Once over the budget, fit well under it: shortening in batches changes the request's prefix once every few
# turns instead of every turn, so a provider's prompt cache keeps serving the unchanged part.
LOW_WATER = 0.8
SHORT = 600  # results and arguments this short are kept as they are: eliding them saves little
# What a shortened result keeps of its start (the header, the cause) and of its end, in lines and characters:
# a shortened result costs about 1.5k characters, so sixty of them fit a small budget beside the latest turn.
HEAD_LINES, HEAD_CHARS = 10, 800
TAIL_LINES, TAIL_CHARS = 5, 400
MAX_QUOTED_LINES = 60
LINE_CHARS = 200  # a kept line of a shortened result, at most
MIN_QUOTE = 8  # shorter lines ("}", "else:") are in every later text; they say nothing about what was quoted
ELIDED = "[porter elided"
SHORTENED = "[porter shortened"
DROPPED = re.compile(re.escape(ELIDED) + r" (\d+) older turn")
NUMBERED = re.compile(r"^\s*(\d+)  ")  # read_file's and read_log's numbered lines
QUOTED_SPAN = re.compile(rf"`([^`\n]{{{MIN_QUOTE},300}})`|\"([^\"\n]{{{MIN_QUOTE},300}})\"")
REPEATABLE = {"read_file", "read_log", "bash"}  # reads: calling them again only reads again


def message_chars(message: Message) -> int:
    arguments = sum(len(json.dumps(call.arguments, ensure_ascii=False)) + len(call.name) for call in message.tool_calls)
    thinking = len(json.dumps(message.thinking, ensure_ascii=False)) if message.thinking else 0
    return len(message.content) + arguments + thinking + 16  # role and framing


def request_tokens(messages: list[Message], tools: list[ToolSpec]) -> int:
    """An upper estimate of the prompt tokens of one request."""
    return (sum(message_chars(message) for message in messages) + _tool_chars(tools)) // CHARS_PER_TOKEN + 1


def _tool_chars(tools: list[ToolSpec]) -> int:
    return len(json.dumps([tool.to_dict() for tool in tools], ensure_ascii=False))


def fit(messages: list[Message], tools: list[ToolSpec], budget_tokens: int) -> list[Message]:
    """`messages` shortened (see the module docstring) so the request fits `budget_tokens` when it can;
    the latest turn is never shortened, so a request whose latest turn alone passes the budget passes it."""
    kept = list(messages)
    if request_tokens(kept, tools) <= budget_tokens:
        return kept
    goal_chars = int(budget_tokens * LOW_WATER) * CHARS_PER_TOKEN - _tool_chars(tools)
    chars = sum(message_chars(message) for message in kept)
    latest = latest_turn_start(kept)
    older_results = [index for index in range(latest) if kept[index].role == "tool"]
    older_turns = [index for index in range(latest) if kept[index].role == "assistant"]
    for index in older_results + older_turns:
        if chars <= goal_chars:
            return kept
        before = message_chars(kept[index])
        shorten = shorten_result if kept[index].role == "tool" else shorten_turn
        kept[index] = shorten(kept, index)
        chars += message_chars(kept[index]) - before
    while sum(message_chars(message) for message in kept) > goal_chars and drop_oldest_turn(kept):
        pass
    return kept


def latest_turn_start(messages: list[Message]) -> int:
    """Index of the model's last reply (its results and porter's notes follow it); len() before any reply."""
    assistants = _assistants(messages)
    return assistants[-1] if assistants else len(messages)


def shorten_result(messages: list[Message], index: int) -> Message:
    """messages[index], a tool result, cut to its head, its tail and the lines quoted in later assistant turns,
    with a note saying what was left out and how to read it again. Short or already shortened: as it is."""
    message = messages[index]
    if len(message.content) <= SHORT or SHORTENED in message.content:
        return message
    lines = message.content.splitlines()
    whole = _ends(lines, HEAD_LINES, HEAD_CHARS, range(len(lines)))
    whole |= _ends(lines, TAIL_LINES, TAIL_CHARS, range(len(lines) - 1, -1, -1))
    quoted = quoted_lines(lines, later_quotes(messages, index), exclude=whole)
    shown: list[str] = []
    gap: list[tuple[int, str]] = []  # the left-out lines since the last shown one
    gone: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        if number - 1 in whole or number - 1 in quoted:
            _close_gap(shown, gap)
            shown.append(shorten(line, LINE_CHARS))
        else:
            gap.append((number, line))
            gone.append((number, line))
    _close_gap(shown, gap)
    kept_quotes = f"; the {len(quoted)} line(s) you quoted since are kept" if quoted else ""
    note = (
        f"{SHORTENED} this older result to keep the conversation under its budget: {len(gone)} of {len(lines)} "
        f"lines left out{kept_quotes}. To read it again: "
        f"{how_to_read_again(call_of(messages, message.tool_call_id), message.facts, gone)}]"
    )
    return replace(message, content="\n".join([*shown, note]))


def _ends(lines: list[str], count: int, chars: int, order: range) -> set[int]:
    """Indices of up to `count` lines taken in `order` within `chars` characters (at least one)."""
    taken: set[int] = set()
    for index in order:
        chars -= min(len(lines[index]), LINE_CHARS) + 1
        if len(taken) >= count or (taken and chars < 0):
            break
        taken.add(index)
    return taken


def _close_gap(shown: list[str], gap: list[tuple[int, str]]) -> None:
    if gap:  # a count, not numbers: a read's own numbering (file lines) is on the lines around it
        shown.append(f"[... {len(gap)} line{'s' if len(gap) > 1 else ''} left out ...]")
        gap.clear()


@dataclass
class Quotes:
    """What the model wrote after a result: all of it (`words`), and the spans it quoted (`spans`): what it put
    in backticks or double quotes in its text, and each line of its calls' string arguments (an edit's `old`
    is a quote of the file; a grep pattern of the log)."""

    words: str
    spans: set[str]


def later_quotes(messages: list[Message], index: int) -> Quotes:
    texts, arguments = [], []
    for message in messages[index + 1 :]:
        if message.role == "assistant":
            texts.append(message.content)
            for call in message.tool_calls:
                arguments.extend(_strings(call.arguments))
    spans = {next(group for group in match.groups() if group) for match in QUOTED_SPAN.finditer("\n".join(texts))}
    spans |= {line.strip() for text in arguments for line in text.splitlines() if len(line.strip()) >= MIN_QUOTE}
    return Quotes("\n".join(texts + arguments), spans)


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def quoted_lines(lines: list[str], quotes: Quotes, exclude: set[int]) -> set[int]:
    """Indices of `lines` the model quoted: the line itself (without read_file's or read_log's line number)
    is in what it wrote, or the line holds one of its quoted spans. At most MAX_QUOTED_LINES."""
    if not quotes.words.strip():
        return set()
    found: set[int] = set()
    for index, line in enumerate(lines):
        if index in exclude or line.startswith("[porter "):  # porter's own notes name the calls that quote
            continue
        body = NUMBERED.sub("", line, count=1).strip()
        if (len(body) >= MIN_QUOTE and body in quotes.words) or any(span in line for span in quotes.spans):
            found.add(index)
            if len(found) >= MAX_QUOTED_LINES:
                break
    return found


def call_of(messages: list[Message], call_id: str | None) -> ToolCall | None:
    return next((call for message in messages for call in message.tool_calls if call.id == call_id), None)


def how_to_read_again(call: ToolCall | None, facts: dict | None, left_out: list[tuple[int, str]]) -> str:
    """The call that shows `left_out` (result line number, line) again, said as the model would send it."""
    if call is None:
        return "the run's transcript keeps it whole"
    facts = facts or {}
    numbers = [int(match.group(1)) for _, line in left_out if (match := NUMBERED.match(line))]
    arguments = dict(call.arguments)
    if call.name == "read_file" and numbers:
        return call_text(
            "read_file", {"path": arguments.get("path"), "start_line": min(numbers), "end_line": max(numbers)}
        )
    if call.name == "read_log":
        pinned = {"launch": facts.get("launch", arguments.get("launch"))}  # a later launch is the default then
        if "grep" in arguments or not numbers:
            return call_text("read_log", {**arguments, **pinned})
        return call_text("read_log", {**pinned, "start_line": min(numbers), "end_line": max(numbers)})
    if call.name == "bash" and left_out:
        first, last = left_out[0][0] - 1, left_out[-1][0] - 1  # the result's first line is porter's status line
        return (
            f"{call_text('bash', arguments)} again if it is safe to repeat, with `| sed -n '{max(first, 1)},{last}p'` "
            "appended for these lines of its output"
        )
    if call.name == "serve" and (launch := re.search(r"serve-0*(\d+)(?:-reduced)?\.log", str(facts.get("log", "")))):
        return f"{call_text('read_log', {'launch': int(launch.group(1))})} reads that launch's log"
    if call.name in REPEATABLE:
        return call_text(call.name, arguments)
    return f"it answered {call_text(call.name, arguments)}, which is not a read: calling it again runs it again"


def call_text(name: str, arguments: dict, limit: int = 400) -> str:
    text = f"{name} {json.dumps({key: value for key, value in arguments.items() if value is not None})}"
    return text if len(text) <= limit else f"{text[:limit]} ...(the call of that turn)"


def shorten_turn(messages: list[Message], index: int) -> Message:
    """An old assistant turn with long texts and long string arguments cut (the calls stay valid JSON)."""
    message = messages[index]
    calls = [ToolCall(call.id, call.name, _short_arguments(call.arguments)) for call in message.tool_calls]
    content = message.content
    if len(content) > SHORT and ELIDED not in content[-200:]:
        content = f"{content[: SHORT // 2]}\n{ELIDED} {len(content) - SHORT // 2} characters of an older turn]"
    return replace(message, content=content, tool_calls=calls)


def _short_arguments(arguments: dict) -> dict:
    short = {}
    for key, value in arguments.items():
        if isinstance(value, str) and len(value) > SHORT and ELIDED not in value[-200:]:
            value = f"{value[: SHORT // 2]}\n{ELIDED} {len(value) - SHORT // 2} characters of an older call]"
        short[key] = value
    return short


def drop_oldest_turn(messages: list[Message]) -> bool:
    """Replace the oldest assistant turn and its results (after the system prompt and the task) by a note
    counting the dropped turns; never the latest turn. Returns False when nothing more can go."""
    turns = _assistants(messages)
    if len(turns) < 2:
        return False
    start, end = turns[0], turns[1]
    dropped = 1
    previous = DROPPED.match(messages[start - 1].content) if start > 0 and messages[start - 1].role == "user" else None
    if previous:
        start, dropped = start - 1, int(previous.group(1)) + 1
    note = (
        f"{ELIDED} {dropped} older turn(s) to keep the conversation short; the run's transcript has them, and "
        "a read you need again can be repeated]"
    )
    messages[start:end] = [Message("user", note)]
    return True


def _assistants(messages: list[Message]) -> list[int]:
    return [index for index, message in enumerate(messages) if message.role == "assistant"]
