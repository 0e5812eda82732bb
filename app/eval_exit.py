"""The layer-entropy exit's figures in `beamwise eval` and the window: exit layers, layer work saved, audits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class ExitTally:
    """The exit over some steps (one run's, or a method's runs added up)."""

    steps: int = 0  # steps whose verifier pass ran with the exit on
    layer_sum: float = 0.0  # the sum of those steps' mean exit layers
    layers: int = 0  # the verifier's decoder layers
    layer_tokens: int = 0  # tokens x layers the verifier ran (completions included)
    layer_tokens_full: int = 0  # tokens x layers with no exit
    audited: int = 0  # steps where the exit fired and --audit-early-exit ran the full pass too
    disagreed: int = 0  # of those, steps where the full pass would have put another child first

    @classmethod
    def of_steps(cls, selected: Sequence) -> ExitTally:
        """From a run's `step_selected` events. A calibration's steps (their passes recorded in `lens_trace`) ran
        every layer with no exit: counted, they showed "verifier work saved 0.0%" for an exit that never ran."""
        selected = [e for e in selected if not e.lens_trace]
        exited = [e for e in selected if e.exit_layer is not None]
        audited = [e for e in exited if e.exit_agrees is not None]
        return cls(len(exited), sum(e.exit_layer for e in exited), max((e.verifier_layers or 0 for e in exited),
                                                                       default=0),
                   sum(e.verifier_layer_tokens for e in selected), sum(e.verifier_layer_tokens_full for e in selected),
                   len(audited), sum(not e.exit_agrees for e in audited))

    def __add__(self, other: ExitTally) -> ExitTally:
        values = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        return ExitTally(**{**values, "layers": max(self.layers, other.layers)})

    @property
    def mean_layer(self) -> float | None:
        return self.layer_sum / self.steps if self.steps else None

    @property
    def saved(self) -> float | None:
        """Share of the verifier's layer work the exit saved, kept candidates' completions paid back."""
        return 1 - self.layer_tokens / self.layer_tokens_full if self.layer_tokens_full else None

    @property
    def disagreement(self) -> float | None:
        return self.disagreed / self.audited if self.audited else None


    def text(self) -> str:
        """'layer 2 of 30 · 73% saved' (the window's words, short enough for a 300 px dock and the status bar; the
        share is of the verifier's layer work, said in their tooltips), 'layer 2.5 of 30' with no saving known, ''
        before any step. A whole mean shows no '.0'."""
        if self.mean_layer is None:
            return ""
        saved = "" if self.saved is None else f" · {self.saved:.0%} saved"
        return f"layer {self.mean_layer:.1f}".removesuffix(".0") + f" of {self.layers}{saved}"
