"""`beamwise run QUESTION`: a headless search that prints each step, the chosen path and the answer."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from threading import Event

from app.follow_up import again_options, model_switch, server_options
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
    output_refused,
    output_refused_text,
    reader_left,
    record,
    say_output_refused,
    stream_ended,
    warn,
)
from app.run_printer import Printer
from app.server_options import server_from_args
from app.session.steps import failure_point
from engine import events as ev
from engine.errors import BeamwiseError


def user_errors(kind: type = BeamwiseError) -> set[str]:
    """The names of the errors that say what the user can change: every BeamwiseError (exit 2). A raised one's
    class is imported, so the walk finds it; other failures (out of memory, a fault in Beamwise) exit 1."""
    return {kind.__name__}.union(*(user_errors(sub) for sub in kind.__subclasses__()))


INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl+C (app/cli.py says the same)
READER_LEFT = 141  # 128 + SIGPIPE: the output's reader left (`| head`) and the search stopped, recorded cancelled
OUTPUT_REFUSED = 2  # the output had no room (`> /dev/full`, a full disk): the user's to fix, the run recorded failed


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
    elif recorded.get("backend") != "openai" and getattr(args, "backend", "local") != "openai":
        if (switched := model_switch(previous, row.get("model"), args.model)) is not None:
            note(switched)
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
    refused = False  # standard output refused a write for want of room: the exit status is OUTPUT_REFUSED
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
    except OSError as error:  # `beamwise run ... > /dev/full`: no room for the output, so the search stops
        if not output_refused(error):
            raise
        _output_full(recorder, error, recorded_end)
        refused = True
        if not recorded_end:  # else the last line says the end that was recorded
            status = OUTPUT_REFUSED
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
    return OUTPUT_REFUSED if refused else status


def _output_full(recorder, error: OSError, recorded_end: bool) -> None:
    """Standard output has no room for the run's lines: the run is recorded failed with the reason, which `sessions
    show` says (it was left `running`, later called `interrupted` with none, and its follow-up was refused), unless
    its end was recorded already (only its last lines were lost); the reason is said on stderr."""
    what = "the command" if recorded_end else "the search"
    if not recorded_end:
        record(recorder, ev.RunFailed(type(error).__name__, output_refused_text(error, what)))
    say_output_refused(error, what)


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
