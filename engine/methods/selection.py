"""The final answer of a run: the verifier's best path, a majority vote, or a score-weighted vote."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engine.answers import answer_key, extract_answer
from engine.candidate import Candidate
from engine.methods.base import ranked


def final_pool(kept: Sequence[Candidate]) -> list[Candidate]:
    """The candidates the answer is chosen from: the finished kept paths, else every kept path."""
    finished = [c for c in kept if c.finished]
    return list(finished or kept)


def choose(pool: Sequence[Candidate], how: str, text_of: Callable[[Candidate], str]) -> Candidate:
    """The winning candidate of `pool` (non-empty).

    `best`: the highest aggregated score. `majority`: the answer most paths state (see
    engine/answers.py; counted by value), `weighted`: the answer whose paths' scores add up highest; either vote
    returns the best-scoring path stating the winning answer, and falls back to `best` when no
    path states an answer. Ties between answers go to the one whose best path scores higher.
    """
    order = ranked(pool)
    if how == "best":
        return order[0]
    if how not in ("majority", "weighted"):
        raise ValueError(f"unknown selection {how!r}; use best, majority or weighted.")
    votes: dict[str, float] = {}
    first: dict[str, Candidate] = {}
    for candidate in order:
        answer = extract_answer(text_of(candidate))
        if answer is None:
            continue
        answer = answer_key(answer)  # "1/2" and "0.5" are one answer
        votes[answer] = votes.get(answer, 0.0) + (candidate.aggregate if how == "weighted" else 1.0)
        first.setdefault(answer, candidate)
    if not votes:
        return order[0]
    rank = {c.id: i for i, c in enumerate(order)}
    winner = max(votes, key=lambda a: (votes[a], -rank[first[a].id]))
    return first[winner]
