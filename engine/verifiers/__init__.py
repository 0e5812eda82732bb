"""Verifiers (process reward models) that score each candidate's latest step, and score aggregation.

One file per verifier: `simple` (log-prob, content hash), `self_judge`, and the PRM families
`qwen_prm`, `skywork_prm`, `math_shepherd`, `rlhflow_prm`, all over `path_kv` (the verifier's own
KV, reused step to step). `families` detects and loads a PRM folder; `synthetic_prm` builds tiny ones.
`entropy_exit` is RKSC's layer-entropy exit for the verifiers that read labels through an LM head.
"""

from __future__ import annotations

from engine.errors import NotAPRM
from engine.loaded import Generator
from engine.verifiers import math_shepherd, qwen_prm, rlhflow_prm, skywork_prm
from engine.verifiers.base import PathKey, StepToScore, Verifier, VerifierCost, aggregate
from engine.verifiers.entropy_exit import ExitRule, LayersUnavailable, with_exit
from engine.verifiers.families import load_prm
from engine.verifiers.parts import PRMParts
from engine.verifiers.path_kv import PathVerifier
from engine.verifiers.self_judge import self_judge
from engine.verifiers.simple import ContentHashVerifier, LogProbVerifier

__all__ = [
    "ExitRule", "PathKey", "StepToScore", "Verifier", "VerifierCost", "aggregate", "make_verifier", "prm_verifier",
]

_WIRING = {"qwen-prm": qwen_prm.verifier, "skywork-prm": skywork_prm.verifier,
           "math-shepherd": math_shepherd.verifier, "rlhflow-prm": rlhflow_prm.verifier}
LENS_FAMILIES = ("math-shepherd", "rlhflow-prm")  # read labels through the LM head: the entropy exit applies


def prm_verifier(parts: PRMParts) -> PathVerifier:
    """The verifier of a loaded PRM, by its family."""
    return _WIRING[parts.family](parts)


def make_verifier(name: str, loaded: Generator, verifier_model: str | None = None,
                  exit_rule: ExitRule | None = None) -> Verifier:
    """`loaded` is the generator (self-judge reads it; a PRM goes on its device in its dtype);
    `exit_rule` turns on the layer-entropy exit (LayersUnavailable where the verifier cannot exit)."""
    if loaded.plan_only:
        return ContentHashVerifier()
    if name == "logprob":
        if exit_rule is not None:
            raise LayersUnavailable("the logprob verifier runs no model, so it has no layers to exit from.")
        return LogProbVerifier()
    if name == "self-judge":
        return with_exit(self_judge(loaded), loaded.model.get_output_embeddings(), exit_rule)
    if name == "prm":
        if not verifier_model:
            raise NotAPRM("the prm verifier needs a PRM: none was given.", hint="Pass --verifier-model PATH.")
        parts = load_prm(verifier_model, loaded.device, loaded.dtype)
        return with_exit(prm_verifier(parts), parts.head if parts.family in LENS_FAMILIES else None, exit_rule)
    raise ValueError(f"unknown verifier {name!r}; use logprob, self-judge or prm.")
