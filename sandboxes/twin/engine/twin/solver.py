"""The model's answers: reads the prompt and answers GSM8K-style word problems and four-choice questions.

It solves by parsing the question text (the evaluation files are never inside the sandbox): word problems
are a start quantity followed by operation sentences; multiple-choice questions are physics/chemistry
formulas whose value is matched against the offered choices. Errors are deterministic: a hash of the
question decides whether this question is one the model gets wrong, at the error rates the device's
numerics give for this launch (how precision loss shows up is the hardware's business, not the engine's).
Anything else gets fluent filler text. Does not cover timing or tokenization (tokenizer.py).
"""

import hashlib
import re
from dataclasses import dataclass

FILLER_WORDS = (
    "the model serves tokens from a cache of blocks and each step of the batch moves every request one token "
    "further while the scheduler keeps the queue short and the kernels busy"
).split()


@dataclass(frozen=True)
class Numerics:
    """Error rates (word problems, multiple choice) of this launch, and the modules whose weights are garbage."""

    error_rates: tuple[float, float] = (0.0, 0.0)
    corrupt_modules: tuple[str, ...] = ()


def _unit_hash(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 2**32


def _is_wrong(question: str, kind_index: int, numerics: Numerics) -> bool:
    salt = "corrupt:" if numerics.corrupt_modules else ""
    return _unit_hash(salt + question) < numerics.error_rates[kind_index]


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _show(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"


# ---------------------------------------------------------------- word problems

_START = re.compile(r"^(?P<name>[A-Z]\w+) has (?P<count>\d+) (?P<item>\w+)\.")
_OPERATIONS = [
    (re.compile(r"(?:buys|finds|receives|picks) (\d+) more \w+"), "+"),
    (re.compile(r"(?:gives|loses|sells|eats) (\d+) \w+"), "-"),
    (re.compile(r"doubles the number of \w+"), "*2"),
    (re.compile(r"triples the number of \w+"), "*3"),
    (re.compile(r"ends up with (\d+) times as many \w+"), "*"),
    (re.compile(r"shares the \w+ equally among (\d+) (?:friends|boxes|bags) and keeps one share"), "/"),
]


def solve_word_problem(question: str) -> tuple[list[str], float] | None:
    """Steps of reasoning and the answer, or None when the question is not in the known form."""
    start = _START.search(question.strip())
    if not start:
        return None
    value, item = float(start["count"]), start["item"]
    steps = [f"{start['name']} starts with {_show(value)} {item}."]
    for sentence in re.split(r"(?<=\.)\s+", question.strip())[1:]:
        for pattern, operation in _OPERATIONS:
            match = pattern.search(sentence)
            if not match:
                continue
            before = value
            if operation in ("*2", "*3"):
                value, symbol, operand = value * int(operation[1]), "*", float(operation[1])
            else:
                operand = _number(match.group(1))
                symbol = operation
                value = {"+": value + operand, "-": value - operand, "*": value * operand, "/": value / operand}[symbol]
            steps.append(f"{_show(before)} {symbol} {_show(operand)} = {_show(value)}.")
            break
    return steps, value


def answer_word_problem(question: str, numerics: Numerics) -> str | None:
    solved = solve_word_problem(question)
    if solved is None:
        return None
    steps, value = solved
    if _is_wrong(question, 0, numerics):
        if numerics.corrupt_modules:
            return " ".join(FILLER_WORDS[:12]) + f" #### {int(_unit_hash(question) * 1000)}"
        value = value + 1 + int(_unit_hash("offset:" + question) * 9)
        steps = steps[:-1] + [f"So the total is {_show(value)}."]
    return " " + " ".join(steps) + f" The answer is {_show(value)}.\n#### {_show(value)}"


# ---------------------------------------------------------------- multiple choice

_FORMULAS = [
    (
        re.compile(r"mass of ([\d.]+) kg moves at ([\d.]+) m/s.*kinetic energy"),
        lambda a, b: 0.5 * a * b * b,
        "kinetic energy is one half of m v^2",
    ),
    (
        re.compile(r"resistor of ([\d.]+) ohms carries a current of ([\d.]+) A"),
        lambda a, b: a * b,
        "Ohm's law gives V = I R",
    ),
    (re.compile(r"sample of ([\d.]+) g occupies ([\d.]+) cm\^3"), lambda a, b: a / b, "density is mass over volume"),
    (
        re.compile(r"([\d.]+) g of a compound with molar mass ([\d.]+) g/mol"),
        lambda a, b: a / b,
        "moles are mass over molar mass",
    ),
    (
        re.compile(r"frequency of ([\d.]+) Hz and a wavelength of ([\d.]+) m"),
        lambda a, b: a * b,
        "wave speed is frequency times wavelength",
    ),
    (
        re.compile(r"force of ([\d.]+) N acts on a mass of ([\d.]+) kg"),
        lambda a, b: a / b,
        "Newton's second law gives a = F / m",
    ),
]
_CHOICE = re.compile(r"^\(([A-D])\)\s*(.+)$", re.MULTILINE)


def answer_choice_question(text: str, numerics: Numerics) -> str | None:
    choices = dict(_CHOICE.findall(text))
    if len(choices) < 2:
        return None
    # the question as written, whatever instruction the prompt puts before it
    question = text.split("Choices:")[0].rsplit("question:", 1)[-1].strip()
    for pattern, formula, reason in _FORMULAS:
        match = pattern.search(question)
        if not match:
            continue
        value = formula(_number(match.group(1)), _number(match.group(2)))
        letter = _closest_choice(choices, value)
        if _is_wrong(question, 1, numerics):
            letters = sorted(set(choices) - {letter})
            letter = letters[int(_unit_hash("pick:" + question) * len(letters))]
        return f" The {reason}, which comes to about {_show(round(value, 4))}. Answer: {letter}"
    return None


def _closest_choice(choices: dict[str, str], value: float) -> str:
    def distance(letter: str) -> float:
        found = re.search(r"-?[\d.]+(?:e-?\d+)?", choices[letter])
        return abs(_number(found.group(0)) - value) if found else float("inf")

    return min(sorted(choices), key=distance)


def filler(length: int, seed: str) -> str:
    offset = int(_unit_hash(seed) * len(FILLER_WORDS))
    return "".join(" " + FILLER_WORDS[(offset + index) % len(FILLER_WORDS)] for index in range(length))


def reply(prompt_text: str, numerics: Numerics) -> str | None:
    """The answer text for a recognised evaluation prompt, or None (the caller generates filler)."""
    if "Choices:" in prompt_text:
        return answer_choice_question(prompt_text, numerics)
    if "Question:" in prompt_text:
        last = prompt_text.rsplit("Question:", 1)[1].split("\nAnswer:")[0]
        return answer_word_problem(last, numerics)
    return None
