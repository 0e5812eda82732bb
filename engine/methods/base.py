"""What the step loop knows of a method: how many children to make, and which candidates survive."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from engine.candidate import Candidate


class Method(Protocol):
    name: str
    greedy: bool  # decode at temperature 0 whatever the configured temperature

    def roots(self) -> int:
        """Children of the prompt in the first step."""
        ...

    def children(self) -> int:
        """Children of each unfinished kept path in later steps."""
        ...

    def lane(self, index: int) -> int:
        """The subtree (DVTS) or sample (best-of-N) of the `index`-th child of the prompt."""
        ...

    def keep(self, pool: Sequence[Candidate]) -> list[Candidate]:
        """The survivors of a step, best first; `pool` holds the new children and finished kept paths."""
        ...


def ranked(pool: Sequence[Candidate]) -> list[Candidate]:
    """Best aggregated score first; ties go to the older (smaller) id, so runs are reproducible."""
    return sorted(pool, key=lambda c: (-c.aggregate, c.id))
