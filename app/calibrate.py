"""Calibrating RKSC's verify-skip thresholds by percentiles over a calibration run's steps.

Each step of the run reports its highest candidate confidence, that candidate's lead over the
next, and whether the verifier ranked the same candidate first. Candidate thresholds are the
percentiles (50th..95th) of the observed confidences and gaps; the pair kept skips the most steps
while the verifier agrees on at least `target` of the steps it would skip. A pair that skips no step
agrees on none: it is no candidate, and its agreement is None, not 100% (a high confidence percentile
with a high gap percentile can miss every step, and was saved as "skip 0%, verifier agrees on 100%").
The highest thresholds (tau_conf 1, r_gap 0.999), which skip next to nothing, are the fallback: where no
percentile pair reaches the target, the verifier keeps ranking every step rather than skip where it was
seen to disagree, and the pair that came closest (the best agreement among those that skipped a step) is
kept beside it, so eval and the window say what was missed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from app.early_exit import Thresholds
from app.options import UsageError

PERCENTILES = (50, 60, 70, 80, 90, 95)
HIGHEST = (1.0, 0.999)  # the highest tau_conf and r_gap Thresholds takes


@dataclass(frozen=True)
class StepStat:
    confidence: float
    gap: float
    agrees: bool


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile `q` (0..100) of non-empty `values`."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def calibrate(stats: Sequence[StepStat], target: float = 0.9) -> Thresholds:
    """The thresholds that skip the most calibration steps at `target` agreement or better.

    With no pair reaching the target, the highest thresholds (only steps the model is certain of skip, the fewest
    any thresholds skip), with the closest pair's skip rate and agreement; even where those miss the target too
    (`skip_text` then says so): the strictest percentile pair, returned there before, skipped more steps where the
    verifier was seen to disagree.
    """
    if not stats:
        raise UsageError("the calibration run produced no scored steps; use more problems or more steps.")
    taus = [percentile([s.confidence for s in stats], q) for q in PERCENTILES]
    gaps = [percentile([s.gap for s in stats], q) for q in PERCENTILES]
    found = [_measured(stats, max(min(tau, 1.0), 1e-6), min(gap, 0.999)) for tau in taus for gap in gaps]
    reached = [t for t in found if t.agreement is not None and t.agreement >= target]
    if reached:  # the first of equals, the loosest percentiles
        return replace(max(reached, key=lambda t: t.skip_rate), target_agreement=target)
    return replace(_measured(stats, *HIGHEST), **_closest(found), target_agreement=target)


def _closest(found: Sequence[Thresholds]) -> dict:
    """The fallback's `missed_*` fields: the skip rate and agreement of the pair that skipped some step with the
    best agreement (None where no pair skipped one)."""
    skipping = [t for t in found if t.agreement is not None]
    if not skipping:
        return {}
    closest = max(skipping, key=lambda t: (t.agreement, t.skip_rate))
    return {"missed_skip_rate": closest.skip_rate, "missed_agreement": closest.agreement}


def _measured(stats: Sequence[StepStat], tau: float, gap: float) -> Thresholds:
    """The thresholds with the share of steps they skip and the verifier's agreement on those (None: none)."""
    skipped = [s for s in stats if s.confidence >= tau and s.gap >= gap]
    agreement = sum(s.agrees for s in skipped) / len(skipped) if skipped else None
    return Thresholds(tau, gap, len(stats), len(skipped) / len(stats), agreement)
