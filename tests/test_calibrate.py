"""Verify-skip calibration: percentile thresholds that skip the most steps at the target agreement."""

from __future__ import annotations

import pytest

from app.calibrate import StepStat, calibrate, percentile
from app.early_exit import Thresholds, load_thresholds, save_thresholds
from engine.methods.confidence import decisiveness, step_confidence


def test_percentile_interpolates():
    assert percentile([0.0, 1.0], 50) == 0.5
    assert percentile([3.0, 1.0, 2.0], 100) == 3.0


def test_calibration_keeps_the_verifier_in_agreement():
    decisive = [StepStat(0.95, 0.5, True)] * 6
    murky = [StepStat(0.5, 0.05, False)] * 6
    found = calibrate(decisive + murky, target=0.9)
    assert found.agreement >= 0.9 and found.skip_rate == pytest.approx(0.5)
    assert found.tau_conf > 0.5


def test_with_no_percentile_pair_in_agreement_the_verifier_keeps_every_step():
    """One disagreeing step made every percentile its own value: the saved thresholds skipped 100% of steps at 0%
    agreement, below --target-agreement, and run --verify-skip then skipped the verifier where it disagreed."""
    found = calibrate([StepStat(0.4, 0.1, False)], target=0.9)
    assert (found.tau_conf, found.r_gap) == (1.0, 0.999)
    assert found.skip_rate == 0.0 and found.agreement is None  # it skips no step: no agreement to state
    murky = [StepStat(0.3 + i / 100, 0.05, i % 2 == 0) for i in range(20)]
    assert calibrate(murky, target=0.9).skip_rate == 0.0


def test_no_steps_is_a_clear_error():
    with pytest.raises(ValueError, match="no scored steps"):
        calibrate([])


def test_thresholds_file_round_trip_and_a_broken_file_is_ignored(tmp_path):
    path = tmp_path / "early_exit.json"
    save_thresholds(Thresholds(0.8, 0.2, 10, 0.3, 0.95), path)
    assert load_thresholds(path) == Thresholds(0.8, 0.2, 10, 0.3, 0.95)
    path.write_text("{not json", encoding="utf-8")
    assert load_thresholds(path) is None


def test_gate_needs_both_confidence_and_gap():
    assert step_confidence([0.0, 0.0]) == 1.0 and step_confidence([]) == 0.0
    assert step_confidence([-5.0, -5.0], top1=[0.9, 0.7]) == pytest.approx(0.8)  # top-1 wins over the sampled
    assert decisiveness([0.95, 0.5], 0.9, 0.1).skip
    assert not decisiveness([0.95, 0.9], 0.9, 0.1).skip  # no clear lead
    assert not decisiveness([0.85, 0.1], 0.9, 0.1).skip  # not confident enough
    assert decisiveness([0.95], 0.9, 0.5).gap == 0.95


def test_a_pair_that_skips_no_step_is_not_kept_over_the_documented_fallback():
    """A high confidence percentile with a high gap percentile skipped no step, so its "verifier agrees on 100%"
    was of nothing; it was kept over tau_conf 1 / r_gap 0.999 (which skips no more) and saved as tau_conf 0.65,
    r_gap 0.51, "skip 0% of 4 steps, verifier agrees on 100%"."""
    stats = [StepStat(0.9, 0.5, False), StepStat(0.8, 0.1, False), StepStat(0.5, 0.6, True), StepStat(0.3, 0.05, True)]
    found = calibrate(stats, target=0.9)
    assert (found.tau_conf, found.r_gap, found.skip_rate) == (1.0, 0.999, 0.0)


def test_where_even_the_highest_thresholds_disagree_they_are_kept_and_said_below_the_target():
    """The strictest percentile pair was saved there, skipping more steps where the verifier disagreed, and was
    said as "skips 5% of 100 steps, verifier agrees on 20%" with no word of the target missed."""
    from app.early_exit import skip_text

    certain = [StepStat(1.0, 1.0, False)] * 3
    mixed = [StepStat(0.5 + i / 200, 0.1 + i / 200, i % 3 == 0) for i in range(97)]
    found = calibrate(certain + mixed, target=0.9)
    assert (found.tau_conf, found.r_gap) == (1.0, 0.999)
    assert found.skip_rate == 0.03 and found.agreement == 0.0
    said = skip_text(found)
    assert said.startswith("no threshold pair reached 90% agreement on 100 steps")
    assert said.endswith("only steps the model is certain of skip (3%, verifier agrees on 0%)")
