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
from engine.verifiers.base import PathKey, StepToScore, Verifier, VerifierCost, VerifierMemory, aggregate
from engine.verifiers.entropy_exit import ExitRule, LayersUnavailable, with_exit
from engine.verifiers.families import FAMILY_MODULES, load_prm, load_prm_tokenizer, prm_layout
from engine.verifiers.fit import check_pair_fits
from engine.verifiers.parts import PRMParts
from engine.verifiers.path_kv import Layout, PathVerifier
from engine.verifiers.reading import reads_per_token
from engine.verifiers.self_judge import JudgeLayout, self_judge
from engine.verifiers.simple import ContentHashVerifier, LogProbVerifier

__all__ = [
    "LENS_FAMILIES", "ExitRule", "PRMParts", "PathKey", "StepToScore", "Verifier", "VerifierCost", "VerifierMemory",
    "aggregate", "exit_refusal", "load_verifier_prm", "make_verifier", "prepare_verifier", "prm_family",
    "prm_placement", "prm_verifier", "verifier_layout",
]

def prm_verifier(parts: PRMParts) -> PathVerifier:
    """The verifier of a loaded PRM, by its family."""
    return FAMILY_MODULES[parts.family].verifier(parts)


def verifier_layout(name: str, generator: PreTrainedTokenizerBase, verifier_model: str | None) -> Layout | None:
    """How the verifier `name` will lay a path out (the layout its run builds), from tokenizers alone: a plan
    counts what the verifier reads with it. `generator`: the generator's tokenizer (self-judge reads with it);
    None for a verifier that reads no text. Raises what loading the PRM's tokenizer raises, and what its run refuses
    in that tokenizer (`prm_layout`): `plan` and eval's pre-check read the run's refusal here."""
    if name == "self-judge":
        return JudgeLayout(generator)
    if name == "prm" and verifier_model:
        return prm_layout(prm_family(verifier_model), load_prm_tokenizer(verifier_model))
    return None


def prm_placement(loaded: Generator, device: str = "auto") -> tuple[torch.device, torch.dtype]:
    """Where a PRM runs and in which dtype: the generator's device and dtype, or with `device="cpu"` the CPU
    in float32."""
    return (torch.device("cpu"), torch.float32) if device == "cpu" else (loaded.device, loaded.dtype)


def load_verifier_prm(loaded: Generator, verifier_model: str, device: str = "auto") -> PRMParts:
    """The PRM's weights as `make_verifier` places them, refused first where they do not fit beside the generator;
    on the device, how it reads the generator's tokens is measured too (reading.py, once a process).
    A caller that runs many searches with one PRM (`beamwise eval`) loads it once and passes it to each run
    (`make_verifier`'s `prm`): the weights never change, and each run still wires a fresh verifier around them."""
    where, dtype = prm_placement(loaded, device)
    check_pair_fits(loaded.model, verifier_model, where, dtype)
    parts = load_prm(verifier_model, where, dtype)
    if device != "cpu":  # as make_verifier reads it (0.4 s for SmolLM2's vocabulary), not in a run's time
        reads_per_token(loaded.tokenizer, parts.tokenizer, verifier_model)
    return parts


def prepare_verifier(name: str, loaded: Generator, verifier_model: str | None = None,
                     device: str = "auto") -> PRMParts | None:
    """What every run with this verifier shares, made before the first: a PRM's weights (`make_verifier`'s `prm`;
    None for the other verifiers) and how the verifier reads the generator's tokens. A caller that times many runs
    (`beamwise eval`) calls it first, so no run's time holds a one-time cost. Raises what loading the PRM raises."""
    if loaded.plan_only:
        return None
    if name == "self-judge":
        reads_per_token(loaded.tokenizer, loaded.tokenizer, "self-judge")  # as make_verifier reads it
    if name == "prm" and verifier_model:
        return load_verifier_prm(loaded, verifier_model, device)
    return None


def make_verifier(name: str, loaded: Generator, verifier_model: str | None = None, device: str = "auto",
                  exit_rule: ExitRule | None = None, prm: PRMParts | None = None) -> Verifier:
    """`loaded` is the generator (self-judge reads it). A PRM goes on its device in its dtype, or with
    `device="cpu"` on the CPU in float32, its KV then outside the device's KV budget; `exit_rule` turns
    on the layer-entropy exit (LayersUnavailable where the verifier cannot exit). `prm`: the weights of
    `verifier_model` already loaded by `load_verifier_prm` with the same `device`, used instead of loading
    them; the verifier made around them is new (its KV, counters and exit state start empty), so a run
    scores as one that loaded the PRM itself."""
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
        parts = _placed(prm, loaded, device) if prm is not None else load_verifier_prm(loaded, verifier_model, device)
        verifier = with_exit(prm_verifier(parts), parts.head if parts.family in LENS_FAMILIES else None, exit_rule)
        verifier.on_device_budget = not on_cpu
        if not on_cpu:  # its share of the device budget holds a path of the generator's longest steps
            verifier.reads_per_token = reads_per_token(loaded.tokenizer, parts.tokenizer, verifier_model)
        return verifier
    raise ValueError(f"unknown verifier {name!r}; use logprob, self-judge or prm.")


def _placed(prm: PRMParts, loaded: Generator, device: str) -> PRMParts:
    """`prm` when it sits where `make_verifier` would load it for `device`; a PRM loaded elsewhere or in
    another dtype would score differently from a run that loaded it itself."""
    where, dtype = prm_placement(loaded, device)
    held = next(prm.body.parameters()).dtype
    if torch.device(prm.device) != torch.device(where) or held != dtype:
        raise ValueError(f"the PRM passed in is on {prm.device} in {held}; this run's verifier device {device!r} "
                         f"places it on {where} in {dtype}. Load it with load_verifier_prm for these settings.")
    return prm
