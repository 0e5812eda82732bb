"""How `beamwise run` shows a search on the terminal: one line per step's candidates, the chosen path, the answer,
and where the KV went (stdout; the model's load on stderr)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO

from app import formatting
from app.export.md_escape import without_controls
from app.gpu_check import emulated_hint
from app.run_output import warn
from app.session.series import prompt_traffic
from app.session.tree import first_line
from app.threads import numerics_line
from engine import events as ev
from engine.config import speculation_off_note
from engine.exit_note import earliest_exit_note
from engine.text_cut import cut, shorten

LINE_CHARS = 70  # of a candidate's first line on its row


class Printer:
    """Human-readable progress on stdout; load progress on stderr. One method per event type (`_PRINTERS`); the
    types it does not show print nothing."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.remote = False
        self.started = False
        self.first_traffic = True
        self.context_full: set[int] = set()  # candidates whose paths filled the model's context
        self.exit_noted = False  # the entropy exit's earliest-layer warning was given
        self.auditing = False  # --audit-early-exit (RunStarted's search)
        self.audited: list[bool] = []  # --audit-early-exit: per audited step, whether the exit picked as the full pass

    def __call__(self, event) -> None:
        self.started = self.started or event.type == "run_started"
        if event.type == "run_started":
            self.auditing = bool(event.search.get("audit_early_exit"))
        show = _PRINTERS.get(event.type)
        if show is not None:
            show(self, event)

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _on_run_started(self, event: ev.RunStarted) -> None:
        p = self._print
        if event.device.startswith("remote"):
            self.remote = True
            p(f"model {event.model} at {event.cache.get('endpoint')} ({event.device})")
            p(f"verifier {event.verifier}; method {event.search.get('method', 'beam')}")
            return
        p(f"model {event.model} on {event.device}; policy {event.policy}, KV budget {_budget_text(event)}")
        if event.emulated and (hint := emulated_hint()):
            print(f"beamwise: note: running on the emulated GPU: {hint}", file=sys.stderr)
        on_cpu = " (on the CPU, its KV in CPU memory)" if event.search.get("verifier_device") == "cpu" else ""
        p(f"verifier {event.verifier}{on_cpu}; method {event.search.get('method', 'beam')}")
        if event.numerics:  # what an exact rerun of this seed must match (README, "Reproducing a run")
            p(numerics_line(event.search.get("seed"), event.numerics))
        if event.verifier_kv_budget_bytes:
            p(f"verifier KV budget {event.verifier_kv_budget_bytes:,} B (its share of the device KV budget)")
        if event.every_step_kv_budget_bytes:
            print(f"beamwise: note: {formatting.every_step_text(event.every_step_kv_budget_bytes)}", file=sys.stderr)
        if off := speculation_off_note(event.cache.get("policy", event.policy), event.policy,
                                       bool(event.cache.get("speculative"))):  # fmt: skip
            print(f"beamwise: note: {off}", file=sys.stderr)

    def _on_prefill_done(self, event: ev.PrefillDone) -> None:
        if self.remote:  # what the server cached and how long its prefill took, it does not say
            counted = f"{event.prompt_tokens} tokens" if event.prompt_tokens else "its tokens not counted by the server"
            self._print(f"prompt: {counted} (sent to the server)")
            return
        self._print(f"prompt: {event.prompt_tokens} tokens ({event.cached_tokens} cached, {event.computed_tokens} "
                    f"computed), prefill {event.seconds:.2f} s")
        if event.prefix_disk_problem:
            print(f"beamwise: note: {formatting.prefix_disk_text(event.prefix_disk_problem)}", file=sys.stderr)

    def _on_step_started(self, event: ev.StepStarted) -> None:
        self._print(f"\n== step {event.step} (expanding {', '.join(map(str, event.beams)) or 'the prompt'})")

    def _on_candidate_text(self, event: ev.CandidateText) -> None:
        if event.context_full:
            self.context_full.add(event.id)

    def _on_candidate_scored(self, event: ev.CandidateScored) -> None:
        parent = "-" if event.parent is None else event.parent
        line = first_line(event.text)  # cut marked, as the exports mark theirs: the path looked shorter than it was
        first = shorten(line, LINE_CHARS) if line == event.text.strip() else cut(line, LINE_CHARS - 1) + "…"
        done = (" [context full]" if event.id in self.context_full else " [finished]") if event.finished else ""
        scores = f"score {event.score:.3f} path {event.aggregate:.3f}"
        self._print(f"  #{event.id:<4} parent {parent:<4} {scores}  {first!r}{done}")

    def _on_policy_changed(self, event: ev.PolicyChanged) -> None:
        self._print(f"  free device memory fell below what {event.previous} needs: {event.moved_bytes:,} B of KV "
                    f"moved to the host, going on with {event.policy}")

    def _on_group_retried(self, event: ev.GroupRetried) -> None:
        self._print(f"  out of device memory: candidates {list(event.candidates)} run again ({event.reason})")

    def _on_transfer_stats(self, event: ev.TransferStats) -> None:
        if self.remote:
            return  # the server holds the KV: no traffic to show
        p = self._print
        traffic = f"H2D {event.step_h2d_bytes:,} B, D2H {event.step_d2h_bytes:,} B"
        where = " (emulated GPU)" if event.emulated else ""
        before, self.first_traffic = prompt_traffic(event) if self.first_traffic else (0, 0), False
        if any(before):  # counted in the totals, not in step 1's own figures
            p(f"  KV traffic of the question before step 1{where}: H2D {before[0]:,} B, D2H {before[1]:,} B")
        p(f"  KV traffic{where}: {traffic} in {event.groups} group(s)")
        if event.idle_row_slots or event.speculative_tokens:  # stragglers' waste, and what speculation filled
            p(f"  decode: {event.forwards} forward call(s), {formatting.idle_text(event)}")

    def _on_memory_snapshot(self, event: ev.MemorySnapshot) -> None:
        if event.verifier_budget_bytes:
            self._print(f"  verifier KV: {event.verifier_device_bytes:,} B on the device, "
                        f"{event.verifier_host_bytes:,} B on the host; H2D {event.verifier_h2d_bytes:,} B, "
                        f"D2H {event.verifier_d2h_bytes:,} B")

    def _on_step_selected(self, event: ev.StepSelected) -> None:
        p = self._print
        p(f"  kept {list(event.kept)}; pruned {list(event.pruned)}")
        if event.speculative_discarded:
            p(f"  {event.speculative_discarded} speculated token(s) of pruned candidates freed")
        if event.verify_skipped:
            audit = self._audit(event.verifier_agrees, "the verifier")  # it ran anyway: would it have agreed?
            p(f"  verifier skipped: confidence {event.confidence:.3f}, lead {event.confidence_gap:.3f}{audit}")
        if event.verifier_tokens_full:
            full = f"{event.verifier_tokens_full:,} to rescore every path"
            p(f"  verifier ran {event.verifier_tokens:,} tokens ({full})")
        if event.exit_layer is not None:
            saved = 1 - event.verifier_layer_tokens / max(event.verifier_layer_tokens_full, 1)
            counted = " (the audit's full pass counted)" if self.auditing else ""  # it read 0% and did not say why
            audit = self._audit(event.exit_agrees, "the full pass")
            p(f"  entropy exit: mean layer {event.exit_layer:.1f} of {event.verifier_layers}, "
              f"{saved:.0%} of the verifier's layer work saved{counted}{audit}")
            self._exit_note(event)

    def _audit(self, agrees: bool | None, full: str) -> str:
        """--audit-early-exit's word on a step it audited (`agrees` None: not audited), counted for the totals."""
        if agrees is None or not self.auditing:
            return ""
        self.audited.append(agrees)
        return f"; audit: {full} puts {'the same' if agrees else 'another'} child first"

    def _exit_note(self, event: ev.StepSelected) -> None:
        """Once a run: the exit stopped every candidate at its earliest layer, so the scores may say nothing."""
        said = earliest_exit_note(event.exit_layer, event.verifier_layers)
        if said is not None and not self.exit_noted:
            self.exit_noted = True
            warn(f"{said} Calibrate theta and delta for this verifier (beamwise eval PROBLEMS --calibrate with the "
                 "same --model and --verifier), give a lower --entropy-theta, or run without --entropy-exit.")

    def _on_run_finished(self, event: ev.RunFinished) -> None:
        p = self._print
        if event.context_full:
            p(f"\n{formatting.context_full_text(event)}")
        p(f"\nchosen path: {' -> '.join(map(str, event.path))} (score {event.score:.3f})")
        p(f"{event.candidate_tokens} candidate tokens in {event.seconds:.1f} s ({event.tokens_per_second:.1f}/s)")
        p(f"goodput {event.goodput:.1f} tokens/s (each kept beam's path tokens per second of its completion time)"
          f"{formatting.speculation_text(event, '; ')}")
        if self.audited:  # README: the audit reports how often the early exit would have put another child first
            p(f"audit: the early exit put another child first in {self.audited.count(False)} of "
              f"{len(self.audited)} audited step(s)")
        if event.prefix_kept_d2h_bytes:
            p(f"prefix cache: kept blocks copied to the host, D2H {event.prefix_kept_d2h_bytes:,} B")
        p(f"\nanswer:\n{without_controls(event.answer)}")  # as `sessions show`: no byte drives the terminal

    def _on_run_cancelled(self, event: ev.RunCancelled) -> None:
        self._print(f"\ncancelled after step {event.step}" if self.started else "\ncancelled before the search began")

    def _on_run_failed(self, event: ev.RunFailed) -> None:
        print(f"beamwise: error: {event.message}", file=sys.stderr)
        if event.details:  # a fault in Beamwise: what its report needs
            print(f"\ndetails for the report:\n{event.details.rstrip()}", file=sys.stderr)


_PRINTERS: dict[str, Callable[[Printer, Any], None]] = {
    ev.RunStarted.type: Printer._on_run_started,
    ev.PrefillDone.type: Printer._on_prefill_done,
    ev.StepStarted.type: Printer._on_step_started,
    ev.CandidateText.type: Printer._on_candidate_text,
    ev.CandidateScored.type: Printer._on_candidate_scored,
    ev.PolicyChanged.type: Printer._on_policy_changed,
    ev.GroupRetried.type: Printer._on_group_retried,
    ev.TransferStats.type: Printer._on_transfer_stats,
    ev.MemorySnapshot.type: Printer._on_memory_snapshot,
    ev.StepSelected.type: Printer._on_step_selected,
    ev.RunFinished.type: Printer._on_run_finished,
    ev.RunCancelled.type: Printer._on_run_cancelled,
    ev.RunFailed.type: Printer._on_run_failed,
}


def _budget_text(started: ev.RunStarted) -> str:
    """--kv-budget's exact bytes (and the generator's part where a verifier keeps KV)."""
    return formatting.kv_budget(started.kv_budget_bytes, started.verifier_kv_budget_bytes,
                                started.cache.get("kv_budget_bytes"), show=lambda b: f"{b:,} B")
