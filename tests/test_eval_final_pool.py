"""The eval compares the final paths the engine chose its answer from, by the engine's one rule
(engine/methods/selection.py `final_pool`): a path finished by EOS or by filling the model's context when any did
(the context's end may stop mid-sentence too), else every kept path; a path cut off at max_steps beside one is not."""

from __future__ import annotations

import dataclasses

from app.eval_report import result_of
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.candidate import Candidate
from engine.config import SearchConfig
from engine.methods.selection import final_pool


def test_the_engine_counts_a_path_that_filled_the_context_as_finished() -> None:
    full = Candidate(1, None, 3, finished=True, context_full=True)
    cut = Candidate(2, None, 3)
    assert final_pool([cut, full]) == [full]
    assert final_pool([cut, Candidate(3, None, 3)]) == [cut, Candidate(3, None, 3)]  # none finished: every path


def _context_full_beside_cut_off() -> tuple[list, int, int]:
    """A run whose first kept path filled the context at its last step and whose second was cut off there."""
    stream = list(fake_run("q", SearchConfig(beams=2, width=2, max_steps=3, seed=1), finish_at_step=3))
    full, cut = next(e for e in reversed(stream) if isinstance(e, ev.StepSelected)).kept
    changed = []
    for e in stream:
        if isinstance(e, ev.CandidateText) and e.id == full:
            e = dataclasses.replace(e, context_full=True)
        if isinstance(e, ev.CandidateText | ev.CandidateScored) and e.id == cut:
            e = dataclasses.replace(e, finished=False)
        changed.append(e)
    return changed, full, cut


def test_the_eval_compares_a_path_that_filled_the_context_as_the_engine_chose_from_it() -> None:
    stream, full, cut = _context_full_beside_cut_off()
    # a path's text ends 'candidate ID.', so it states its id: only the context-full path is compared
    assert result_of("beam", 1, str(full), stream).candidates == 1
    assert result_of("beam", 1, str(full), stream).any_correct
    assert not result_of("beam", 1, str(cut), stream).any_correct
