"""Scoring a step, shared by the local and the remote search: the verify-skip gate, scores, aggregates."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from engine import events as ev
from engine.candidate import Candidate
from engine.config import SearchConfig
from engine.methods.confidence import best_index, decisiveness, step_confidence
from engine.verifiers import aggregate


def path_to(candidates: dict[int, Candidate], cid: int | None) -> list[int]:
    """Candidate ids from the first step down to `cid`."""
    path = []
    while cid is not None:
        path.append(cid)
        cid = candidates[cid].parent
    return path[::-1]


def score_step(
    candidates: dict[int, Candidate],
    children: Sequence[int],
    step: int,
    cfg: SearchConfig,
    verify: Callable[[], Sequence[float]],
    gate: dict,
) -> Iterator[ev.Event]:
    """Score the step's children: by confidence when verify-skip finds the generator decisive, else by
    `verify()` (also run when auditing); fills `gate` with the step's verify-skip facts."""
    confidences = [step_confidence(candidates[c].logprobs, candidates[c].top1) for c in children]
    decision = decisiveness(confidences, cfg.tau_conf, cfg.r_gap)
    skip = cfg.verify_skip and decision.skip
    scores = verify() if not skip or cfg.audit_early_exit else None
    agrees = None if scores is None else best_index(scores) == best_index(confidences)
    gate.update(verify_skipped=skip, confidence=decision.top, confidence_gap=decision.gap, verifier_agrees=agrees)
    for cid, score in zip(children, confidences if skip else scores, strict=True):
        c = candidates[cid]
        c.scores.append(float(score))
        c.aggregate = aggregate(c.scores, cfg.aggregation)
        yield ev.CandidateScored(
            step, cid, c.parent, c.text, c.step_tokens, c.scores[-1], c.aggregate, c.finished, c.group
        )
