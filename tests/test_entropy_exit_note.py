"""The layer-entropy exit that stops every candidate at its earliest layer: why the bundled model's self-judge
scores read 0.000 with --entropy-exit, and the note that tells the user so (engine/exit_note.py)."""

from __future__ import annotations

import pytest

from engine.config import CacheConfig, SearchConfig
from engine.exit_note import FIRST_LAYER, earliest_exit_note
from engine.search import run
from engine.verifiers.entropy_exit import ExitRule

QUESTION = "Tom has 3 apples and buys 4 more. How many?"


def _search(loaded, **changes) -> list:
    settings = {"beams": 2, "width": 2, "step_tokens": 4, "step_delimiter": None, "max_steps": 2,
                "verifier": "self-judge", **changes}
    config = SearchConfig(**settings)
    return list(run(QUESTION, loaded, config, CacheConfig()))


def _notes(events) -> list[str | None]:
    return [earliest_exit_note(e.exit_layer, e.verifier_layers) for e in events if e.type == "step_selected"]


def test_the_note_names_the_layer_and_what_to_do_only_for_an_exit_at_the_earliest_layer():
    assert ExitRule().first_layer == FIRST_LAYER == 2
    note = earliest_exit_note(2.0, 30)
    assert note is not None and "layer 2 of 30" in note and "the earliest it may" in note
    assert "may rank by noise" in note
    assert earliest_exit_note(None, None) is None  # the exit is off
    assert earliest_exit_note(30.0, 30) is None  # it never fired: the scores are the full pass's
    assert earliest_exit_note(2.5, 30) is None  # some candidate ran on: the entropy moved, the rule had a say
    assert earliest_exit_note(3.0, 30, first_layer=3) is not None
    assert earliest_exit_note(2.0, 2) is None  # a 2-layer verifier ran every layer: nothing cut short


def test_a_search_whose_exit_fires_at_once_gets_the_note_and_one_that_never_fires_does_not(tiny_qwen2):
    at_once = _search(tiny_qwen2, entropy_exit=True, entropy_theta=1e3, entropy_delta=1e3)
    never = _search(tiny_qwen2, entropy_exit=True, entropy_theta=1e-6)
    plain = _search(tiny_qwen2)
    assert at_once[-1].type == never[-1].type == plain[-1].type == "run_finished"
    notes = _notes(at_once)
    assert notes and all(n is not None and "layer 2 of 6" in n for n in notes)
    assert _notes(never) == [None] * len(_notes(never)) and _notes(never)
    assert _notes(plain) == [None] * len(_notes(plain)) and _notes(plain)


@pytest.mark.bundled
def test_bundled_self_judge_with_the_papers_thresholds_exits_at_layer_2_and_scores_near_zero(bundled):
    """The finding, on the real model: with the exit every score is the layer-2 lens's P(yes), about 0.000, and
    the run is told why; without it the scores are the full pass's and differ."""
    exiting = _search(bundled, entropy_exit=True, max_steps=1)
    plain = _search(bundled, max_steps=1)
    assert exiting[-1].type == plain[-1].type == "run_finished"
    steps = [e for e in exiting if e.type == "step_selected"]
    assert steps and all(e.exit_layer == FIRST_LAYER and e.verifier_layers == 30 for e in steps)
    assert all(n is not None for n in _notes(exiting))
    early = [e.score for e in exiting if e.type == "candidate_scored"]
    full = [e.score for e in plain if e.type == "candidate_scored"]
    assert len(early) == len(full) == 4
    assert max(early) < 0.005  # printed as 0.000
    assert min(full) > 0.05 and max(full) - min(full) > 0.01


@pytest.mark.parametrize(("theta", "warned"), [("1000", True), ("0.000001", False)])
def test_run_warns_once_when_the_exit_stops_every_candidate_at_its_earliest_layer(capsys, tmp_path, theta, warned):
    from app.cli import main

    args = ["run", QUESTION, "--model", "synthetic:tiny-qwen2", "--beams", "2", "--width", "2", "--step-tokens", "4",
            "--max-steps", "2", "--verifier", "self-judge", "--entropy-exit", "--entropy-theta", theta,
            "--entropy-delta", "1000", "--no-save"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert out.count("entropy exit: mean layer") == 2  # both steps print their exit figures
    assert err.count("the entropy exit stopped every candidate at layer 2 of 6") == int(warned)
    assert ("give a lower --entropy-theta, or run without --entropy-exit" in err) == warned  # what to do
    assert ("beamwise: warning: " in err) == warned
