"""The four methods' expand/select policies: beam, DVTS, best-of-N and greedy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.candidate import Candidate
from engine.methods.base import ranked


@dataclass(frozen=True)
class BeamMethod:
    """Step-wise beam search: N x M children, the best N paths survive (finished ones compete on)."""

    beams: int
    width: int
    name: str = "beam"
    greedy: bool = False

    def roots(self) -> int:
        return self.beams * self.width

    def children(self) -> int:
        return self.width

    def lane(self, index: int) -> int:
        return 0

    def keep(self, pool: Sequence[Candidate]) -> list[Candidate]:
        return ranked(pool)[: self.beams]


@dataclass(frozen=True)
class DvtsMethod:
    """Diverse verifier tree search: the prompt's N x M children form N subtrees of M; each step each
    subtree's one path expands M children and keeps its best, so subtrees never compete."""

    subtrees: int
    width: int
    name: str = "dvts"
    greedy: bool = False

    def roots(self) -> int:
        return self.subtrees * self.width

    def children(self) -> int:
        return self.width

    def lane(self, index: int) -> int:
        return index // self.width

    def keep(self, pool: Sequence[Candidate]) -> list[Candidate]:
        best: dict[int, Candidate] = {}
        for candidate in ranked(pool):
            best.setdefault(candidate.lane, candidate)
        return ranked(list(best.values()))


@dataclass(frozen=True)
class BestOfNMethod:
    """N complete samples: each continues alone to EOS or max_steps; nothing is pruned, the final
    selection (the verifier's best, or a vote) picks among them."""

    samples: int
    name: str = "best-of-n"
    greedy: bool = False

    def roots(self) -> int:
        return self.samples

    def children(self) -> int:
        return 1

    def lane(self, index: int) -> int:
        return index

    def keep(self, pool: Sequence[Candidate]) -> list[Candidate]:
        return ranked(pool)


@dataclass(frozen=True)
class GreedyMethod:
    """One path at temperature 0: the baseline every search has to beat."""

    name: str = "greedy"
    greedy: bool = True

    def roots(self) -> int:
        return 1

    def children(self) -> int:
        return 1

    def lane(self, index: int) -> int:
        return 0

    def keep(self, pool: Sequence[Candidate]) -> list[Candidate]:
        return ranked(pool)
