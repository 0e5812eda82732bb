"""Verifiers (process reward models) that score each candidate's latest step, and score aggregation.

One file per verifier: `simple` (log-prob, content hash), `self_judge`, and the PRM families
`qwen_prm`, `skywork_prm`, `math_shepherd`, `rlhflow_prm`, all over `path_kv` (the verifier's own
KV, reused step to step). `families` loads a PRM folder (`engine.prm_folders` detects one without torch);
`synthetic_prm` builds tiny ones.
`entropy_exit` is RKSC's layer-entropy exit for the verifiers that read labels through an LM head.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerBase

from engine.errors import NotAPRM
from engine.loaded import Generator
from engine.prm_folders import exit_refusal, prm_family
from engine.prm_names import LENS_FAMILIES
from engine.verifiers import math_shepherd, qwen_prm, rlhflow_prm, skywork_prm
from engine.verifiers.base import PathKey, StepToScore, Verifier, VerifierCost, VerifierMemory, aggregate
from engine.verifiers.entropy_exit import ExitRule, LayersUnavailable, with_exit
from engine.verifiers.families import load_prm, load_prm_tokenizer
from engine.verifiers.fit import check_pair_fits
from engine.verifiers.parts import PRMParts
from engine.verifiers.path_kv import Layout, PathVerifier
from engine.verifiers.reading import reads_per_token
from engine.verifiers.self_judge import JudgeLayout, self_judge
from engine.verifiers.simple import ContentHashVerifier, LogProbVerifier

__all__ = [
    "LENS_FAMILIES", "ExitRule", "PathKey", "StepToScore", "Verifier", "VerifierCost", "VerifierMemory", "aggregate",
    "exit_refusal", "make_verifier", "prm_family", "prm_verifier", "verifier_layout",
]

# Each PRM family's module: its `verifier(parts)` wires a loaded PRM, its `LAYOUT` lays a path out from the
# tokenizer alone (what a plan reads without weights).
_FAMILIES = {"qwen-prm": qwen_prm, "skywork-prm": skywork_prm, "math-shepherd": math_shepherd,
             "rlhflow-prm": rlhflow_prm}


def prm_verifier(parts: PRMParts) -> PathVerifier:
    """The verifier of a loaded PRM, by its family."""
    return _FAMILIES[parts.family].verifier(parts)


def verifier_layout(name: str, generator: PreTrainedTokenizerBase, verifier_model: str | None) -> Layout | None:
    """How the verifier `name` will lay a path out (the layout its run builds), from tokenizers alone: a plan
    counts what the verifier reads with it. `generator`: the generator's tokenizer (self-judge reads with it);
    None for a verifier that reads no text. Raises what loading the PRM's tokenizer raises."""
    if name == "self-judge":
        return JudgeLayout(generator)
    if name == "prm" and verifier_model:
        return _FAMILIES[prm_family(verifier_model)].LAYOUT(load_prm_tokenizer(verifier_model))
    return None


def make_verifier(name: str, loaded: Generator, verifier_model: str | None = None, device: str = "auto",
                  exit_rule: ExitRule | None = None) -> Verifier:
    """`loaded` is the generator (self-judge reads it). A PRM goes on its device in its dtype, or with
    `device="cpu"` on the CPU in float32, its KV then outside the device's KV budget; `exit_rule` turns
    on the layer-entropy exit (LayersUnavailable where the verifier cannot exit)."""
    if loaded.plan_only:
        return ContentHashVerifier()
    if name == "logprob":
        if exit_rule is not None:
            raise LayersUnavailable("the logprob verifier runs no model, so it has no layers to exit from.")
        return LogProbVerifier()
    if name == "self-judge":
        judge = self_judge(loaded)
        judge.reads_per_token = reads_per_token(loaded.tokenizer, loaded.tokenizer, "self-judge")
        return with_exit(judge, loaded.model.get_output_embeddings(), exit_rule)
    if name == "prm":
        if not verifier_model:
            raise NotAPRM("the prm verifier needs a PRM: none was given.", hint="Pass --verifier-model PATH.")
        on_cpu = device == "cpu"
        where, dtype = (torch.device("cpu"), torch.float32) if on_cpu else (loaded.device, loaded.dtype)
        check_pair_fits(loaded.model, verifier_model, where, dtype)
        parts = load_prm(verifier_model, where, dtype)
        verifier = with_exit(prm_verifier(parts), parts.head if parts.family in LENS_FAMILIES else None, exit_rule)
        verifier.on_device_budget = not on_cpu
        if not on_cpu:  # its share of the device budget holds a path of the generator's longest steps
            verifier.reads_per_token = reads_per_token(loaded.tokenizer, parts.tokenizer, verifier_model)
        return verifier
    raise ValueError(f"unknown verifier {name!r}; use logprob, self-judge or prm.")
