"""What the user is told about the layer-entropy exit's scores (engine/verifiers/entropy_exit.py), without torch:
the CLI and the window read it from a step's figures."""

from __future__ import annotations

FIRST_LAYER = 2  # layers counted from 1: the earliest the exit may stop (it needs a previous layer to compare with)

def earliest_exit_note(exit_layer: float | None, layers: int | None, first_layer: int = FIRST_LAYER) -> str | None:
    """What to tell the user about a step whose candidates all stopped at the earliest layer the exit allows
    (StepSelected's `exit_layer`, the mean, and `verifier_layers`), or None for any other step.

    The rule stops where every entropy is under theta and steady. A lens that is already sharp after the first
    layers (a small model with tied embeddings reads its input token back there) meets it at once, before the
    verifier has judged anything: on the bundled SmolLM2-135M the self-judge lens entropy is 0.1 to 4.9 nats at
    every layer against theta 7.25, so every pass stops at layer 2 of 30, where P(yes) is about 0.0002 for every
    candidate, and the run prints score 0.000 throughout (BENCHMARKS.md, Issue 13). That is the paper's rule doing
    what it says, but its scores then say nothing about the steps, so the user is told, with what to do, beside
    the step's exit figures (the CLI's "entropy exit: mean layer ..." line, the window's).
    """
    if exit_layer is None or not layers or exit_layer > first_layer or exit_layer >= layers:
        return None  # the last: a verifier of `first_layer` layers or fewer ran them all, nothing was cut short
    return (f"the entropy exit stopped every candidate at layer {first_layer} of {layers}, the earliest it may: the "
            "verifier's lens entropy was under theta and steady as soon as it was checked, before the verifier had "
            "judged, so these scores may rank by noise.")  # what to do is the caller's: the CLI's and window's differ

