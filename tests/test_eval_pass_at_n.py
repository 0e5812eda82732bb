"""pass@N's N is the number of final paths compared: the table said `0.0% (N=2)` beside best-of-n's 4 samples (two were
cut off at --max-steps while two finished, and the answer is chosen among the finished) and showed the largest count
over the problems as if every problem had it."""

from __future__ import annotations

import dataclasses
import re

from app.eval_exit import ExitTally
from app.eval_report import ProblemResult, result_of, summarize, table
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import SearchConfig


def _rows(text: str) -> dict[str, list[str]]:
    return {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line) for line in text.splitlines()[1:])}


def _one_kept_path_cut_off(stream: list) -> tuple[list, int, int]:
    """`stream` (every path finished at its last step) with the second kept path not finished: cut off there."""
    kept = next(e for e in reversed(stream) if isinstance(e, ev.StepSelected)).kept
    cut = kept[1]
    changed = [dataclasses.replace(e, finished=False)
               if isinstance(e, ev.CandidateText | ev.CandidateScored) and e.id == cut else e for e in stream]
    return changed, kept[0], cut


def test_n_counts_the_finished_paths_the_answer_was_chosen_from():
    stream = list(fake_run("q", SearchConfig(beams=2, width=2, max_steps=3, seed=1), finish_at_step=2))
    assert result_of("beam", 1, "80", stream).candidates == 2  # both kept paths finished
    changed, finished, cut = _one_kept_path_cut_off(stream)
    assert result_of("beam", 1, "80", changed).candidates == 1
    # a path's text ends 'candidate ID.', so it states its id; the cut-off path's is not compared
    assert not result_of("beam", 1, str(cut), changed).any_correct
    assert result_of("beam", 1, str(finished), changed).any_correct


def _result(candidates: int, status: str = "finished") -> ProblemResult:
    return ProblemResult("best-of-n", 1, "5", "5", True, True, candidates, 10, 0, 0.1, 2, 0, 0, 0, status,
                         ExitTally(), 1.0)


def test_the_table_names_what_n_counts_and_shows_a_range_over_problems():
    varied = summarize("best-of-n", [_result(2), _result(4), _result(0, "failed")], 1.0)
    same = summarize("beam", [_result(2), _result(2)], 1.0)
    assert (varied.n_min, varied.n, same.n_min, same.n) == (2, 4, 2, 2)  # a failed run compared nothing
    assert (varied.to_dict()["n_min"], varied.to_dict()["n"]) == (2, 4)
    rows = _rows(table([varied, same], vote=True))
    assert rows["pass@N"] == ["100.0%", "100.0%"]  # no "(N=4)" that only one problem had
    assert rows["N: final paths compared"] == ["2-4", "2"]
    lines = table([varied, same], vote=True).splitlines()
    assert lines.index(next(x for x in lines if x.startswith("vote: paths agreeing"))) == \
        lines.index(next(x for x in lines if x.startswith("N: final paths compared"))) + 1  # a share of those N


def test_no_finished_run_compared_nothing():
    failed = summarize("beam", [_result(0, "failed")], 1.0)
    assert _rows(table([failed]))["N: final paths compared"] == ["-"]
    assert (failed.n, failed.n_min) == (0, 0)
