"""The final answer of a run: the verifier's best path, a majority vote, or a score-weighted vote."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import TypeVar

from engine.answers import answer_key, extract_answer
from engine.candidate import Candidate
from engine.methods.base import ranked

T = TypeVar("T")


def final_pool(kept: Sequence[T], finished: Callable[[T], bool] = attrgetter("finished")) -> list[T]:
    """The candidates the answer is chosen from: the finished kept paths, else every kept path. Finished is
    `Candidate.finished`: the model ended the answer (EOS) or the path filled the model's context (it could go no
    further, though it may stop mid-sentence); through a server, also a step that is empty or writes "The answer
    is". A path cut off at max_steps may stop mid-sentence too, so beside a finished one it is left out.
    `finished` reads the flag from another record of a candidate: the eval's, the session tree's `Node.eos`."""
    done = [c for c in kept if finished(c)]
    return list(done or kept)


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
