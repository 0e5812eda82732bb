"""Calibrating RKSC's layer-entropy exit (theta, delta) by percentiles over a calibration run.

`beamwise eval --calibrate` runs the verifier at every layer and records, for each verify pass, each
candidate's logit-lens entropy and lens score after every layer (engine/verifiers/entropy_exit.py,
`LensPass`). Candidate thresholds are percentiles of what the run showed: theta from the 10th, 25th,
50th, 75th and 90th percentiles of all the entropies, delta from the same percentiles of the changes
between neighbouring layers. Each pair is replayed on the recorded passes with the exit's own rule
(every candidate under theta and changed by less than delta, from layer `first_layer` on), and the
pair kept exits earliest while the early scores put the same candidate first as the full pass on at
least `target` of the steps where it exits (a pair that never exits qualifies). With no pair reaching the
target, the fit is the exit turned off (`ExitFit.off`, the strictest pair's agreement in `missed`): saved as
such, `run --entropy-exit` runs every layer and says why. No pair of thresholds could stand for "off": the rule
is a strict `<` on entropies that reach 0.0 exactly (a bf16 one-hot lens), so a saturated lens meets any
positive pair. The fit still carries NEVER as theta and delta, positive numbers the file has always held.

The thresholds are measured in nats of the verifier's own vocabulary and saved on the paper's scale
(a ~150k vocabulary), the scale `--entropy-theta` and `--entropy-delta` are given in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from app.calibrate import percentile
from app.options import UsageError
from engine.exit_note import FIRST_LAYER
from engine.methods.confidence import best_index
from engine.verifiers.entropy_exit import REFERENCE_VOCAB

EXIT_PERCENTILES = (10, 25, 50, 75, 90)
NEVER = 1e-6  # the fallback's theta and delta (paper scale); a saturated lens meets them, so the fit is `off` too


class TooFewLayers(UsageError):
    """The verifier's passes record no change between layers to calibrate delta from (fewer than 3 layers)."""


@dataclass(frozen=True)
class ExitFit:
    """The calibrated exit: thresholds on the paper's scale, in the verifier's nats, and what they did."""

    theta: float  # nats for a ~150k vocabulary, as --entropy-theta takes it
    delta: float
    theta_nats: float  # the same in nats of the calibrated verifier's vocabulary
    delta_nats: float
    vocab: int
    steps: int  # calibration steps with a recorded verifier pass
    layers: int  # the verifier's decoder layers
    mean_layer: float  # mean exit layer over the steps' candidates with these thresholds
    exit_rate: float  # share of steps where some pass exited before the last layer
    agreement: float  # share of those steps where the early scores put the full pass's first candidate first
    missed: float | None = None  # no pair reached the target: the strictest pair's agreement (the exit is off)

    @property
    def off(self) -> bool:
        """No pair reached the target: the exit stays off for this verifier (theta and delta are NEVER)."""
        return self.missed is not None


def exit_layer(entropies: Sequence[Sequence[float]], theta: float, delta: float,
               first_layer: int = FIRST_LAYER) -> int | None:
    """The layer (from 1) a pass with these per-layer entropies ([layer][candidate]) exits at, None for none:
    the exit's rule (engine/verifiers/entropy_exit.py) replayed."""
    for layer in range(max(first_layer, 2), len(entropies) + 1):
        now, before = entropies[layer - 1], entropies[layer - 2]
        if all(e < theta for e in now) and all(abs(e - b) < delta for e, b in zip(now, before, strict=True)):
            return layer
    return None


@dataclass(frozen=True)
class _Replay:
    mean_layer: float
    exit_rate: float
    agreement: float


def _replay(steps: Sequence[Sequence], theta: float, delta: float, first_layer: int) -> _Replay:
    """Each step's passes under (theta, delta): mean exit layer, share of steps that exit, their agreement."""
    layers_run, candidates, fired, agreed = 0, 0, 0, 0
    for passes in steps:
        early, full, exited = [], [], False
        for _, entropies, scores in passes:
            layer = exit_layer(entropies, theta, delta, first_layer)
            exited |= layer is not None
            at = (layer or len(scores)) - 1
            early += scores[at]
            full += scores[-1]
            layers_run += (layer or len(scores)) * len(scores[-1])
            candidates += len(scores[-1])
        if exited:
            fired += 1
            agreed += best_index(early) == best_index(full)
    return _Replay(layers_run / candidates, fired / len(steps), agreed / fired if fired else 1.0)


def calibrate_exit(steps: Sequence[Sequence], target: float = 0.9, first_layer: int = 2) -> ExitFit:
    """The thresholds that exit earliest at `target` agreement or better, from recorded steps (each a
    sequence of (vocab, entropies, scores) passes, as StepSelected.lens_trace carries them)."""
    steps = [passes for passes in steps if passes]
    if not steps:
        raise UsageError("the calibration run recorded no verifier layers; the entropy exit needs the self-judge, "
                         "Math-Shepherd or RLHFlow verifier (--verifier self-judge or --verifier prm).")
    vocab, layers = int(steps[0][0][0]), len(steps[0][0][2])
    entropies = [e for passes in steps for _, per_layer, _ in passes for row in per_layer for e in row]
    changes = [abs(e - b) for passes in steps for _, per_layer, _ in passes
               for now, before in zip(per_layer[1:], per_layer[:-1], strict=False)
               for e, b in zip(now, before, strict=True)]
    if not changes:
        raise TooFewLayers(f"the verifier has too few layers to exit early ({layers}; it needs at least 3)")
    best, strictest = None, None
    for q_theta in EXIT_PERCENTILES:
        for q_delta in EXIT_PERCENTILES:
            theta, delta = max(percentile(entropies, q_theta), 1e-6), max(percentile(changes, q_delta), 1e-6)
            found = (theta, delta, _replay(steps, theta, delta, first_layer))
            if q_theta == q_delta == EXIT_PERCENTILES[0]:
                strictest = found
            if found[2].agreement >= target and (best is None or found[2].mean_layer < best[2].mean_layer):
                best = found
    scale = math.log(vocab) / math.log(REFERENCE_VOCAB)
    missed = None
    if best is None:  # the fallback: the exit off, every layer run on every step
        missed = strictest[2].agreement
        best = (NEVER * scale, NEVER * scale, _Replay(float(layers), 0.0, 1.0))
    theta, delta, replay = best
    return ExitFit(theta / scale, delta / scale, theta, delta, vocab, len(steps), layers, replay.mean_layer,
                   replay.exit_rate, replay.agreement, missed)
