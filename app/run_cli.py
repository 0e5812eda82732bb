"""`beamwise run QUESTION`: a headless search that prints each step, the chosen path and the answer."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from threading import Event
from typing import Any, TextIO

from app import formatting
from app.export.md_escape import without_controls
from app.follow_up import again_options, server_options
from app.gpu_check import emulated_hint
from app.heartbeat import Heartbeat, StepProgress
from app.options import UsageError, configs_from_args
from app.preflight import check_memory
from app.question import read_question
from app.run_output import (
    cancelled_in_json,
    close,
    failures_in_json,
    load_progress,
    note,
    note_if_read,
    reader_left,
    record,
    stream_ended,
    warn,
)
from app.server_options import server_from_args
from app.session.series import prompt_traffic
from app.session.steps import failure_point
from app.session.tree import first_line
from app.threads import numerics_line
from engine import events as ev
from engine.config import speculation_off_note
from engine.errors import BeamwiseError
from engine.exit_note import earliest_exit_note
from engine.text_cut import cut, shorten


def user_errors(kind: type = BeamwiseError) -> set[str]:
    """The names of the errors that say what the user can change: every BeamwiseError (exit 2). A raised one's
    class is imported, so the walk finds it; other failures (out of memory, a fault in Beamwise) exit 1."""
    return {kind.__name__}.union(*(user_errors(sub) for sub in kind.__subclasses__()))


LINE_CHARS = 70  # of a candidate's first line on its row
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl+C (app/cli.py says the same)
READER_LEFT = 141  # 128 + SIGPIPE: the output's reader left (`| head`) and the search stopped, recorded cancelled


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


class ServerProgress(StepProgress):
    """A server run's progress: before its first event it asks the server for its models (it loads no model
    here), and the server reads the question while it writes its first answer."""

    def line(self) -> str:
        """Its own phases' seconds with one decimal, as the wait for the session database's lock says them: said
        as durations are ("9.0 s", then "10 s"), a line at 9.96 s read "10.0 s" and the next "11 s"."""
        if self.phase not in ("loading", "prefill"):
            return super().line()
        doing = "checking the server" if self.phase == "loading" else "waiting for the server's first answer"
        return f"{doing}, {self._clock() - self.since:.1f} s"


def _open_recorder(args: argparse.Namespace, previous: int | None = None):
    """The run's recorder (None with --no-save); `previous` makes it the next turn of that session's conversation."""
    if args.no_save:
        return None
    from app.journal_import import open_session_store, recorder_for

    return recorder_for(open_session_store(args.db, notify=note), notify=warn, previous=previous)


def conversation_of(args: argparse.Namespace) -> tuple[int | None, list[tuple[str, str]]]:
    """With --session ID: the turn a follow-up follows and the conversation's turns so far; else (None, [])."""
    session = getattr(args, "session", None)
    if session is None:
        return None, []
    from app.conversations import follow_up_of
    from app.journal_import import CHECK_DB, open_session_store

    hint = "Ask a question without --session first." if args.db is None else CHECK_DB
    unsaved = getattr(args, "no_save", False)  # the database is only read: nothing is written to it, no upgrade
    with open_session_store(args.db, notify=note, missing=f"there is no session {session} to follow up",
                            missing_hint=hint, read_only=unsaved) as store:  # SessionNotFound names its --db
        previous, history = follow_up_of(store, session)
        row = store.get_session(previous)
        recorded, verifier_model = row.get("cache") or {}, (row.get("search") or {}).get("verifier_model")
    note(f"follow-up: turn {len(history) + 1} of the conversation of session {session}")
    if recorded.get("backend") == "openai" and getattr(args, "backend", "local") != "openai":  # it switched unsaid
        warn(f"session {previous} ran on the server at {recorded.get('endpoint')}; this follow-up runs on "
             f"{args.model} here. To go on there, add {server_options(recorded, verifier_model)}.")
    return previous, history


@contextmanager
def _ctrl_c_cancels(stop: Event, started: Callable[[], bool] = lambda: True,
                    before_step_1: Callable[[], bool] = lambda: False, recorded: bool = True,
                    reading: Callable[[str], object] | None = None, on_server: bool = False) -> Iterator[None]:
    """The first Ctrl+C stops the search within its step, at the next token; the steps chosen before it are kept
    and the run is recorded as cancelled (not `recorded`, --no-save: nothing is, and the line says so). A second
    one quits. Before the search has `started` (a server being checked), there is nothing to keep, and the line
    says so; `before_step_1` (the model reading the question, a server asked for the first step) there is no step
    to drop or keep either, and `reading` (a local run's StepProgress.stop_asked) is told the stop came, so the
    heartbeat says it waits for the chunk of the question being read (it went on saying "reading the question" for
    the half minute a chunk took); it is given what the line ends with. `on_server`: before step 1, step 1's
    requests are with the server (engine/remote_search.py asks for step 1 before its StepStarted), so the line
    says step 1 is waiting for it, where it said that no step had begun."""
    def on_sigint(signum, frame):
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        if not started():
            kept = "the search has not begun, so nothing will be recorded"
        elif before_step_1():
            ends = ("step 1 is waiting for the server; the run ends without it" if on_server else
                    "no step has begun yet: the run ends before step 1")
            kept = ends + (" and is recorded cancelled" if recorded else " and nothing is recorded (--no-save)")
            if reading is not None:
                reading(" (Ctrl+C again to quit now)")  # StepProgress.stop_asked: the window's line too
        else:
            kept = "the step in progress is dropped, the steps chosen so far are kept" + (
                "" if recorded else " on the screen; nothing is recorded (--no-save)")
        print(f"beamwise: stopping: {kept} (Ctrl+C again to quit now)", file=sys.stderr, flush=True)

    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread: leave Ctrl+C as it is
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run_command(args: argparse.Namespace) -> int:
    """Exit 0 on an answer, 2 on the user's input (question, model, settings), 1 on other failures."""
    from engine.models import load_model
    from engine.search import run

    with failures_in_json(args.json):
        question = read_question(args.question, args.question_file)
        model_spec, search, cache = configs_from_args(args)
        server = server_from_args(args)
        if server is not None and server.prm_endpoint and search.verifier != "prm":  # it used to be ignored
            raise UsageError(f"--verifier-endpoint names a PRM server, but the verifier is {search.verifier}: add "
                             "--verifier prm and --verifier-model NAME (the PRM's served name) to score the steps "
                             "with it, or leave --verifier-endpoint out.")
        previous, history = conversation_of(args)  # a bad --db or --session is said before the model loads
        recorder = _open_recorder(args, previous)
    if server is not None:
        from engine import remote_search

        return _drive(args, recorder, lambda stop: remote_search.run(question, server, search, should_stop=stop,
                                                                     history=history), ServerProgress())
    try:
        with failures_in_json(args.json):
            loaded = load_model(model_spec, device=cache.device, progress=load_progress)  # "auto": CUDA if any
            check_memory(loaded, question, search, cache, history=history)  # before anything is allocated
    except KeyboardInterrupt as interrupt:  # said here, once: raised on, app/cli.py said "interrupted" after it
        close(recorder)
        if args.json:
            cancelled_in_json(interrupt)
        note("interrupted while the model loaded, before the search began: nothing was recorded")
        return INTERRUPTED
    except BaseException:
        close(recorder)
        raise
    return _drive(args, recorder, lambda stop: run(question, loaded, search, cache, should_stop=stop, history=history))


def _drive(args: argparse.Namespace, recorder, events, progress: StepProgress | None = None) -> int:
    """Show and record the events of `events(should_stop)`; the exit status of the run."""
    show = (lambda e: print(json.dumps(ev.to_dict(e)), flush=True)) if args.json else Printer(sys.stdout)
    status, stop, last_step, started, begun = 1, Event(), 0, Event(), 0  # begun: the last step started
    ended = False  # an end event (finished, failed, cancelled) was shown
    answered = False  # the run finished with an answer (a chosen path of no text has none to follow up)
    recorded_end = False  # an end event was recorded (its line may not have been shown)
    beat = Heartbeat(progress or StepProgress(), lambda line: print(f"  ... {line}", file=sys.stderr, flush=True))
    try:
        with _ctrl_c_cancels(stop, started.is_set, lambda: begun == 0, recorder is not None,
                             None if progress else beat.progress.stop_asked, progress is not None), beat:
            for event in events(stop.is_set):
                beat.saw(event)
                if event.type == "run_started":
                    started.set()
                last_step = event.step if event.type == "step_selected" else last_step
                begun = event.step if event.type == "step_started" else begun
                with _database_wait(beat.progress, recorder, event):
                    record(recorder, event)
                recorded_end = recorded_end or event.type in _END_EVENTS
                answered = answered or (event.type == "run_finished" and bool(event.answer))
                status = _status(event, status, args.json)
                show(event)
                ended = ended or event.type in _END_EVENTS
    except BrokenPipeError:  # `beamwise run ... | head`: the reader of the output left, so the search stops
        reader_left(sys.stdout)
        if not recorded_end:  # it was left `running`, later called `interrupted`, and the command exited 0 unsaid
            record(recorder, ev.RunCancelled(step=last_step))
            status = READER_LEFT
            when = f"after step {last_step}" if last_step else "before its first step was chosen"
            note_if_read(f"the output's reader closed it (a pipe such as `| head`), so the search stopped {when}")
    except KeyboardInterrupt as interrupt:  # the second Ctrl+C
        cancelled = ev.RunCancelled(step=last_step)  # the same name the window records
        record(recorder, cancelled)
        if not ended:  # shown too: the stream's last line was the step_started it quit in (README, "JSON Lines")
            show(cancelled)
        stream_ended(interrupt)
        if _say_recorded(recorder, 130, last_step, started.is_set()):
            return 130  # its line is the last: app/cli.py's "interrupted" after it said nothing more
        raise
    finally:
        saved_as = close(recorder)
    try:
        _say_recorded(recorder, status, last_step, started.is_set(), begun, again_options(args) if answered else None,
                      saved_as)
    except BrokenPipeError:  # standard error's reader left too (`2>&1 | head`): the status still says what happened
        reader_left(sys.stderr)
    return status


@contextmanager
def _database_wait(progress: StepProgress, recorder, event) -> Iterator[None]:
    """Around recording `event`: a write that may wait for another program's lock on the session database is said
    as that wait by the heartbeat (after a silent second, so an unlocked write, a few ms, says nothing)."""
    if recorder is None or not recorder.writes_database(event):
        yield
        return
    progress.wait_for_database(recorder.store.busy_timeout)
    try:
        yield
    finally:
        progress.resume()


def _say_recorded(recorder, status: int, last_step: int, started: bool = True, begun: int = 0,
                  again: str | None = "", saved_as: int | None = None) -> bool:
    """The last line on stderr names the session a finished, cancelled or failed run was recorded as (a journalled
    run's warning names its journal instead, unless its journal was saved at the run's end as session `saved_as`:
    that run's line is a recorded run's too, follow-up and all), or says that a run stopped before it began (a
    server still being checked) was not recorded: before, it said nothing, after a line that said the steps so far
    were kept. A failed run's line (it said nothing, its error the last line) says the step it failed at, `begun`.
    `again`: the options a follow-up repeats (a server's: without them it ran on the local model); None when the run
    finished without an answer (a chosen path of no text), which no follow-up can go after. Whether a line was
    said."""
    if status == 130 and not started:
        note("stopped before the search began: nothing was recorded")
        return True
    session_id = None if recorder is None else saved_as if recorder.journal_path is not None else recorder.session_id
    if session_id is None:
        return False
    if status == 0 and again is None:  # the follow-up it offered was refused: "finished without an answer"
        note(f"recorded as session {session_id}; its chosen path has no text (the model ended it at once), so there "
             "is no answer to follow up: ask the question again, with another --seed or more --beams")
    elif status == 0:
        note(f"recorded as session {session_id}; ask a follow-up with: beamwise run --session {session_id}{again} "
             '"..."')
    elif status in (INTERRUPTED, READER_LEFT):
        note(f"recorded as session {session_id}, cancelled after step {last_step}")
    else:
        note(f"recorded as session {session_id} (failed {failure_point(begun, last_step)})")
    return True


_END_EVENTS = (ev.RunFinished.type, ev.RunFailed.type, ev.RunCancelled.type)


def _status(event, status: int, json_lines: bool) -> int:
    if event.type == "run_finished":
        return 0
    if event.type == "run_cancelled":
        return 130
    if event.type == "run_failed":
        if json_lines:
            print(f"beamwise: error: {event.message}", file=sys.stderr)
        return 2 if event.error in user_errors() else 1
    return status
