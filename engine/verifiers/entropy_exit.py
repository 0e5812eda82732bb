"""RKSC's layer-entropy exit: the verify pass stops at the layer where every candidate's judgement settled.

For verifiers that read label tokens through an LM head (self-judge's yes/no, Math-Shepherd's and
RLHFlow's +/-), the pass runs one decoder layer at a time. From layer `first_layer` on it reads
the logit-lens entropy (LM head over the normed hidden state, whole vocabulary) at each candidate's
readout position and stops at the first layer where every candidate's entropy is under `theta` and
moved by less than `delta` since the previous layer; the scores are then read through the lens at
that layer. The paper's thresholds (8.0 and 3.0 nats) are for a vocabulary of ~150k tokens; both
are scaled by ln(vocabulary) / ln(150,000) for the verifier's own vocabulary.

The verifier keeps its KV from step to step (path_kv.py), so a kept candidate whose pass exited
early has its skipped layers completed in `settle`, before the next step reads them: from the
exit layer's hidden states (kept with the node), not from scratch. Pruned candidates save their
skipped layers; kept ones pay them back. Where the exit does not fire, every layer runs and the
scores and KV are those of the plain pass.

Calibration (`ExitRule.record`, `beamwise eval --calibrate`): every layer runs and each pass keeps
each layer's lens entropy and lens score per candidate (`LensPass`), reported with the step, so
app/calibrate_exit.py can pick theta and delta by percentiles of what the verifier really shows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from engine.errors import GeneratorLayersUnavailable
from engine.exit_note import FIRST_LAYER
from engine.methods.confidence import best_index
from engine.prm_folders import no_lens
from engine.verifiers.layered import LayeredBody, LayersUnavailable

REFERENCE_VOCAB = 150_000  # the vocabulary size the paper's thresholds are stated for

__all__ = ["EntropyExit", "ExitCost", "ExitPass", "ExitRule", "LayersUnavailable", "LensPass",
           "exit_fields", "exit_rule", "layers_refusal", "lens_entropy", "no_lens", "self_judge_refusal", "with_exit"]


@dataclass(frozen=True)
class ExitRule:
    """When the verify pass may stop: entropies under `theta`, changed by less than `delta`, from `first_layer`."""

    theta: float = 8.0
    delta: float = 3.0
    first_layer: int = FIRST_LAYER  # layers counted from 1: the exit is checked after this many layers at the earliest
    audit: bool = False  # run every layer anyway and compare the early scores with the full ones
    record: bool = False  # calibration: never exit; keep every layer's lens entropy and score (LensPass)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.theta) and self.theta > 0 and math.isfinite(self.delta) and self.delta > 0):
            raise ValueError(f"the entropy exit thresholds must be positive numbers (theta {self.theta}, "
                             f"delta {self.delta}); the paper uses 8.0 and 3.0.")
        if self.first_layer < 2:
            raise ValueError(f"the entropy exit needs a previous layer to compare with: first layer 2 or more "
                             f"(got {self.first_layer}).")

    def for_vocab(self, vocab: int) -> tuple[float, float]:
        """(theta, delta) in nats for a vocabulary of `vocab` tokens."""
        scale = math.log(vocab) / math.log(REFERENCE_VOCAB)
        return self.theta * scale, self.delta * scale


def lens_entropy(logits: torch.Tensor) -> torch.Tensor:  # logits [B, V] -> entropy in nats [B]
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


@dataclass(frozen=True)
class ExitPass:
    """One verify pass: the normed hidden state the scores are read from, and how deep it ran."""

    last: torch.Tensor  # [B, H] at each row's last token, at the exit layer (the final one if none)
    layers: int  # decoder layers run; the cache holds KV for these layers only
    hidden: torch.Tensor | None  # [B, T, H] the last layer run's output when later layers were skipped


class LensPass(tuple):
    """One recorded pass (calibration), JSON-ready: (vocabulary, entropies, scores), where entropies[l][b] is
    candidate b's lens entropy in nats after layer l + 1 (every layer but the last) and scores[l][b] its lens
    score after layer l + 1 (every layer)."""

    __slots__ = ()

    def __new__(cls, vocab: int, entropies: list[list[float]], scores: list[list[float]]) -> LensPass:
        return super().__new__(cls, (vocab, entropies, scores))


@dataclass(frozen=True)
class ExitCost:
    """The exit's account for one step (all candidates): layers run against the whole depth."""

    layers: int  # the verifier's decoder layers
    exit_layers: tuple[int, ...]  # layers run for each scored candidate
    layer_tokens: int  # tokens x layers run, completions of kept candidates included
    layer_tokens_full: int  # tokens x layers had every pass run every layer
    # audit: the early and the full scores put the same candidate first. None when not audited, or when no pass of
    # the step exited early: its scores are the full ones, nothing to compare (app/eval_exit.py audits fired steps)
    agrees: bool | None = None
    trace: tuple[LensPass, ...] = ()  # calibration: the step's passes, layer by layer

    def event_fields(self) -> dict:
        """The StepSelected fields of this cost."""
        mean = sum(self.exit_layers) / len(self.exit_layers) if self.exit_layers else None
        return {"exit_layer": mean, "verifier_layers": self.layers, "verifier_layer_tokens": self.layer_tokens,
                "verifier_layer_tokens_full": self.layer_tokens_full, "exit_agrees": self.agrees,
                "lens_trace": self.trace}


@dataclass
class _Tally:
    exit_layers: list[int] = field(default_factory=list)
    layer_tokens: int = 0
    layer_tokens_full: int = 0
    early: list[float] = field(default_factory=list)  # audit: scores the exit decided on
    full: list[float] = field(default_factory=list)  # audit: the same candidates' full-depth scores
    fired: bool = False
    trace: list[LensPass] = field(default_factory=list)  # calibration


class EntropyExit:
    """The exit for one verifier: its body run layer by layer, its LM head as the lens, its readout."""

    def __init__(self, body: LayeredBody, lm_head: torch.nn.Module,
                 readout: Callable[[torch.Tensor], torch.Tensor], rule: ExitRule) -> None:
        self.body, self.lm_head, self.readout, self.rule = body, lm_head, readout, rule
        self.theta, self.delta = rule.for_vocab(int(lm_head.weight.shape[0]))
        self.tally = _Tally()

    def run(self, ids: torch.Tensor, cache: DynamicCache, start: int, lengths: torch.Tensor) -> ExitPass:
        """Run `ids` ([B, T], right-padded, real lengths `lengths`) after `start` cached tokens."""
        body, rows, last = self.body, torch.arange(ids.shape[0], device=ids.device), lengths - 1
        hidden = body.embed(ids)  # [B, T, H]
        at = body.positions(hidden, cache, start)
        previous, early, entropies, scores = None, None, [], []
        for index in range(body.count - 1):  # after the last layer there is nothing left to skip
            hidden = body.layer(index, hidden, at, cache)
            lens = body.norm(hidden[rows, last])  # [B, H]
            entropy = lens_entropy(self.lm_head(lens))  # [B]
            if self.rule.record:
                entropies.append(entropy.tolist())
                scores.append(self.readout(lens).float().tolist())
            elif early is None and index + 1 >= self.rule.first_layer and self._settled(entropy, previous):
                early = ExitPass(lens, index + 1, hidden)
                if not self.rule.audit:
                    return self._count(early, lengths)
            previous = entropy
        hidden = body.layer(body.count - 1, hidden, at, cache)
        full = ExitPass(body.norm(hidden[rows, last]), body.count, None)
        if self.rule.record:
            scores.append(self.readout(full.last).float().tolist())
            self.tally.trace.append(LensPass(int(self.lm_head.weight.shape[0]), entropies, scores))
        if early is None:
            return self._count(full, lengths)
        self._audit(early.last, full.last)
        self._count(full, lengths, decided=early.layers)
        return ExitPass(early.last, body.count, None)  # decided early, every layer's KV held

    def complete(self, hidden: torch.Tensor, cache: DynamicCache, start: int, first: int) -> None:
        """Run layers `first`.. (0-based) on `hidden` ([1, T, H], the output of layer `first` - 1),
        appending their KV to `cache` (which holds the parent path at every layer)."""
        at = self.body.positions(hidden, cache, start)
        for index in range(first, self.body.count):
            hidden = self.body.layer(index, hidden, at, cache)
        self.tally.layer_tokens += hidden.shape[1] * (self.body.count - first)

    def settle(self) -> ExitCost:
        """The step's account, and a fresh one for the next step."""
        t, self.tally = self.tally, _Tally()
        agrees = best_index(t.early) == best_index(t.full) if t.fired else None
        return ExitCost(self.body.count, tuple(t.exit_layers), t.layer_tokens, t.layer_tokens_full, agrees,
                        tuple(t.trace))

    def _settled(self, entropy: torch.Tensor, previous: torch.Tensor | None) -> bool:
        if previous is None:
            return False
        return bool((entropy < self.theta).all() and ((entropy - previous).abs() < self.delta).all())

    def _audit(self, early: torch.Tensor, full: torch.Tensor) -> None:
        self.tally.fired = True
        self.tally.early += self.readout(early).float().tolist()
        self.tally.full += self.readout(full).float().tolist()

    def _count(self, passed: ExitPass, lengths: torch.Tensor, decided: int | None = None) -> ExitPass:
        """Account for a pass; `decided`: the layer an audited pass would have exited at."""
        tokens = int(lengths.sum())
        self.tally.exit_layers += [decided or passed.layers] * len(lengths)
        self.tally.layer_tokens += tokens * passed.layers
        self.tally.layer_tokens_full += tokens * self.body.count
        if self.rule.audit and decided is None:  # an audited pass that never exited: its early scores are the full
            # ones, compared beside the candidates of the step's passes that did exit (`settle`: only if one did)
            scores = self.readout(passed.last).float().tolist()
            self.tally.early += scores
            self.tally.full += scores
        return passed


def exit_rule(search) -> ExitRule | None:
    """The exit's rule of a SearchConfig, or None when the exit is off (a recording rule when calibrating)."""
    if search.calibrate_exit:
        return ExitRule(search.entropy_theta, search.entropy_delta, record=True)
    if not search.entropy_exit:
        return None
    return ExitRule(search.entropy_theta, search.entropy_delta, audit=search.audit_early_exit)


def exit_fields(cost) -> dict:
    """The StepSelected fields of a step's VerifierCost (none when the verifier has no exit)."""
    return cost.exit.event_fields() if cost.exit is not None else {}



def with_exit(verifier, lm_head: torch.nn.Module | None, rule: ExitRule | None):
    """`verifier` (a PathVerifier) with the exit `rule` attached, or as it is when `rule` is None.

    A recording rule (calibration) on a verifier without a lens leaves it as it is: the run goes on and
    records nothing to calibrate from.
    """
    if rule is None:
        return verifier
    refusal = no_lens(verifier.name) if lm_head is None else layers_refusal(verifier.name, verifier.body)
    if refusal is not None:
        if rule.record:
            return verifier
        raise refusal
    verifier.exit = EntropyExit(LayeredBody(verifier.body), lm_head, verifier.readout, rule)
    return verifier


def layers_refusal(name: str, body: torch.nn.Module) -> LayersUnavailable | None:
    """Why the `name` verifier's `body` cannot run layer by layer, None when it can; self-judge's body is the
    generator's own, so its refusal advises another generator or verifier (GeneratorLayersUnavailable)."""
    try:
        LayeredBody.of(body, name)
    except LayersUnavailable as error:
        return GeneratorLayersUnavailable(str(error)) if name == "self-judge" else error
    return None


def self_judge_refusal(loaded) -> LayersUnavailable | None:
    """Why the self-judge verifier cannot exit on `loaded` (a LoadedModel), read from the loaded generator before
    any run (`beamwise eval` checks once, not in each run): the body it runs is the generator's base model, as
    self_judge.py builds it."""
    return layers_refusal("self-judge", loaded.model.base_model)
