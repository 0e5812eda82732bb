"""A checkable problem set a 135M model can sometimes solve: one- and two-operation sums of small numbers.

    python -m benchmarks.easy_problems > resources/problems/easy-arith.jsonl

Deterministic (seeded): the same file on every machine. Each line is {"question": ..., "answer": N}.
"""

from __future__ import annotations

import json
import random
import sys

NAMES = ("Ana", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana")
THINGS = ("apples", "pens", "books", "coins", "shells", "stamps")


def problem(rng: random.Random) -> dict:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    if rng.random() < 0.5:
        return {"question": f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have?",
                "answer": a + b}
    c = rng.randint(1, min(a + b - 1, 5))
    return {"question": f"{name} has {a} {thing}, gets {b} more, then gives away {c}. "
            f"How many {thing} does {name} have now?", "answer": a + b - c}


def main() -> int:
    rng = random.Random(13)
    for _ in range(30):
        print(json.dumps(problem(rng)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
