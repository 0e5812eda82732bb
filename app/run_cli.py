"""`beamwise run QUESTION`: a headless search that prints each step, the chosen path and the answer."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from app.options import DEFAULT_QUESTION, UsageError, configs_from_args
from engine import events as ev

USER_ERRORS = {"InvalidPrompt", "KVBudgetTooSmall", "ModelLoadError", "NotAPRM", "PRMHeadMissing"}


class Printer:
    """Human-readable progress on stdout; load progress on stderr."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.texts: dict[int, str] = {}

    def __call__(self, event) -> None:
        p = self._print
        if event.type == "run_started":
            p(f"model {event.model} on {event.device}; policy {event.policy}, KV budget {event.kv_budget_bytes:,} B")
            p(f"verifier {event.verifier}")
        elif event.type == "prefill_done":
            p(f"prompt: {event.prompt_tokens} tokens, prefill {event.seconds:.2f} s")
        elif event.type == "step_started":
            p(f"\n== step {event.step} (expanding {', '.join(map(str, event.beams)) or 'the prompt'})")
        elif event.type == "candidate_scored":
            self.texts[event.id] = event.text
            parent = "-" if event.parent is None else event.parent
            first = next((line for line in event.text.splitlines() if line.strip()), "").strip()[:70]
            done = " [finished]" if event.finished else ""
            scores = f"score {event.score:.3f} path {event.aggregate:.3f}"
            p(f"  #{event.id:<4} parent {parent:<4} {scores}  {first!r}{done}")
        elif event.type == "transfer_stats":
            traffic = f"H2D {event.step_h2d_bytes:,} B, D2H {event.step_d2h_bytes:,} B"
            where = " (emulated GPU)" if event.emulated else ""
            p(f"  KV traffic{where}: {traffic} in {event.groups} group(s)")
        elif event.type == "step_selected":
            p(f"  kept {list(event.kept)}; pruned {list(event.pruned)}")
            if event.verifier_tokens_full:
                full = f"{event.verifier_tokens_full:,} to rescore every path"
                p(f"  verifier ran {event.verifier_tokens:,} tokens ({full})")
        elif event.type == "run_finished":
            p(f"\nchosen path: {' -> '.join(map(str, event.path))} (score {event.score:.3f})")
            p(f"{event.candidate_tokens} candidate tokens in {event.seconds:.1f} s ({event.tokens_per_second:.1f}/s)")
            p(f"\nanswer:\n{event.answer}")
        elif event.type == "run_cancelled":
            p(f"\ncancelled after step {event.step}")
        elif event.type == "run_failed":
            print(f"beamwise: error: {event.message}", file=sys.stderr)

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)


def _progress(stage: str, fraction: float | None) -> None:
    share = f" {fraction:.0%}" if fraction is not None else ""
    print(f"[model] {stage}{share}", file=sys.stderr, flush=True)


def _open_recorder(args: argparse.Namespace):
    if args.no_save:
        return None
    from app.recorder import SessionRecorder
    from app.store import SessionStore

    return SessionRecorder(SessionStore(args.db))


def run_command(args: argparse.Namespace) -> int:
    """Exit 0 on an answer, 2 on the user's input (question, model, settings), 1 on other failures."""
    from engine.models import load_model
    from engine.search import run

    question = DEFAULT_QUESTION if args.question is None else args.question
    if not question.strip():
        raise UsageError('the question is empty; pass a question in quotes, e.g. beamwise run "What is 12*7?"')
    model_spec, search, cache = configs_from_args(args)
    loaded = load_model(model_spec, device=cache.device, progress=_progress)  # "auto": CUDA when there is one
    recorder = _open_recorder(args)
    show = (lambda e: print(json.dumps(ev.to_dict(e)), flush=True)) if args.json else Printer(sys.stdout)
    status = 1
    try:
        for event in run(question, loaded, search, cache):
            if recorder is not None and (recorder.session_id is not None or event.type == "run_started"):
                _record(recorder, event)  # a run that failed before it started has nothing to record
            show(event)
            if event.type == "run_finished":
                status = 0
            elif event.type == "run_failed":
                if args.json:
                    print(f"beamwise: error: {event.message}", file=sys.stderr)
                status = 2 if event.error in USER_ERRORS else 1
    finally:
        if recorder is not None:
            recorder.close()
    return status


def _record(recorder, event) -> None:
    """A busy database does not stop the search: the recorder keeps the step and retries on its next write."""
    from app.store import StoreLocked

    try:
        recorder.write(event)
    except StoreLocked as error:
        print(f"beamwise: warning: {error.user_message()} (the step is kept and saved on the next write)",
              file=sys.stderr)
