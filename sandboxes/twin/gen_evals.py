"""Generate the twin's built-in evaluation sets (seeded, so the files are reproducible byte for byte).

Writes porter/checks/data/twin-gsm8k.jsonl (GSM8K fields: question, answer ending "#### N") and
porter/checks/data/twin-gpqa.jsonl (GPQA fields: Question, Correct Answer, Incorrect Answer 1..3).
The questions use the forms the twin's solver (engine/twin/solver.py) parses; the files themselves are
never copied into the sandbox. Run: python3 sandboxes/twin/gen_evals.py [--out DIR]
"""

import argparse
import json
import random
from pathlib import Path

NAMES = ["Mia", "Liam", "Ava", "Noah", "Zoe", "Omar", "Lena", "Ravi", "Sofia", "Kenji", "Ines", "Tariq"]
PRONOUNS = {"Mia": "She", "Ava": "She", "Zoe": "She", "Lena": "She", "Sofia": "She", "Ines": "She"}
ITEMS = ["apples", "marbles", "stickers", "books", "cookies", "coins", "pencils", "shells"]


def _word_problem(rng: random.Random) -> tuple[str, str]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    pronoun = PRONOUNS.get(name, "He")
    value = rng.randint(6, 60)
    sentences, steps = [f"{name} has {value} {item}."], [f"{name} starts with {value} {item}."]
    for _ in range(rng.randint(2, 4)):
        kind = rng.choice(["add", "add", "sub", "mul", "div"])
        before = value
        if kind == "add":
            amount = rng.randint(2, 40)
            verb = rng.choice(["buys", "finds", "receives", "picks"])
            sentences.append(f"{pronoun} {verb} {amount} more {item}.")
            value, step = value + amount, f"{before} + {amount} = {value + amount}."
        elif kind == "sub" and value > 3:
            amount = rng.randint(1, value - 1)
            verb = rng.choice(["gives", "loses", "sells", "eats"])
            sentences.append(f"{pronoun} {verb} {amount} {item}" + (" to a friend." if verb == "gives" else "."))
            value, step = value - amount, f"{before} - {amount} = {value - amount}."
        elif kind == "mul" and value < 200:
            factor = rng.choice([2, 3, 4])
            if factor == 4:
                sentences.append(f"After a trade {pronoun.lower()} ends up with {factor} times as many {item}.")
            else:
                sentences.append(f"{pronoun} {'doubles' if factor == 2 else 'triples'} the number of {item}.")
            value, step = value * factor, f"{before} * {factor} = {value * factor}."
        else:
            divisors = [d for d in (2, 3, 4, 5) if value % d == 0]
            if not divisors:
                continue
            divisor = rng.choice(divisors)
            place = rng.choice(["friends", "boxes", "bags"])
            sentences.append(f"{pronoun} shares the {item} equally among {divisor} {place} and keeps one share.")
            value, step = value // divisor, f"{before} / {divisor} = {value // divisor}."
        steps.append(step)
    sentences.append(f"How many {item} does {name} have now?")
    return " ".join(sentences), " ".join(steps) + f"\n#### {value}"


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"


def _formula_templates(a: int, b: int) -> list[tuple[str, float, list[float], str]]:
    """(question, correct value, common wrong values, unit) for each formula the solver knows."""
    return [
        (
            f"A ball with a mass of {a} kg moves at {b} m/s. What is its kinetic energy?",
            0.5 * a * b * b,
            [a * b * b, 0.5 * a * b, a * b],
            "J",
        ),
        (
            f"A resistor of {a} ohms carries a current of {b} A. What is the voltage across it?",
            a * b,
            [a / b, a + b, a * b * 2],
            "V",
        ),
        (
            f"A sample of {a * b} g occupies {b} cm^3. What is the density of the sample?",
            a,
            [a * b * b, b, a + b],
            "g/cm^3",
        ),
        (
            f"How many moles are in {a * b} g of a compound with molar mass {b} g/mol?",
            a,
            [a * b * b, b / a, a + 1],
            "mol",
        ),
        (
            f"A wave has a frequency of {a} Hz and a wavelength of {b} m. What is its speed?",
            a * b,
            [a / b, a + b, 2 * a * b],
            "m/s",
        ),
        (
            f"A net force of {a * b} N acts on a mass of {b} kg. What is the resulting acceleration?",
            a,
            [a * b * b, b, a + b],
            "m/s^2",
        ),
    ]


def _choice_question(rng: random.Random) -> dict:
    kind = rng.randrange(6)
    a, b = rng.randint(2, 40), rng.randint(2, 30)
    templates = _formula_templates(a, b)
    question, correct, wrong, unit = templates[kind]
    wrong = [value for value in dict.fromkeys(wrong) if value != correct]
    while len(wrong) < 3:
        wrong.append(correct + len(wrong) + 1)
    return {
        "Question": question,
        "Correct Answer": f"{_fmt(correct)} {unit}",
        **{f"Incorrect Answer {index + 1}": f"{_fmt(value)} {unit}" for index, value in enumerate(wrong[:3])},
    }


def generate(out_dir: Path, gsm8k_count: int = 300, choice_count: int = 100, seed: int = 20260714) -> None:
    rng = random.Random(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "twin-gsm8k.jsonl", "w") as handle:
        for _ in range(gsm8k_count):
            question, answer = _word_problem(rng)
            handle.write(json.dumps({"question": question, "answer": answer}) + "\n")
    with open(out_dir / "twin-gpqa.jsonl", "w") as handle:
        for _ in range(choice_count):
            handle.write(json.dumps(_choice_question(rng)) + "\n")


def main() -> None:
    default_out = Path(__file__).resolve().parents[2] / "porter" / "checks" / "data"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--seed", type=int, default=20260714)
    args = parser.parse_args()
    generate(args.out, seed=args.seed)
    print(f"wrote {args.out}/twin-gsm8k.jsonl and twin-gpqa.jsonl")


if __name__ == "__main__":
    main()
