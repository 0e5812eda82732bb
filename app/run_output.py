"""What `beamwise run` and `beamwise eval` share around a search: their stderr lines and the recording of a run."""

from __future__ import annotations

import errno
import io
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


def load_progress(stage: str, fraction: float | None) -> None:
    """The model load's progress, a line per stage ('[model] weights 40%')."""
    share = f" {fraction:.0%}" if fraction is not None else ""
    print(f"[model] {stage}{share}", file=sys.stderr, flush=True)


def warn(text: str) -> None:
    print(f"beamwise: warning: {text}", file=sys.stderr, flush=True)


def note(text: str) -> None:
    print(f"beamwise: {text}", file=sys.stderr, flush=True)


def reader_left(stream: TextIO) -> None:
    """`stream` (standard output or error) to the null device once its reader left (`| head`, `2>&1 | head`) or it
    has no room left (`output_refused`), so that the prints and the exit's flush after it do not fail again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    except (OSError, ValueError, AttributeError):  # no file descriptor under it (a test's captured stream)
        if stream is sys.stdout:
            sys.stdout = Nowhere()
        elif stream is sys.stderr:
            sys.stderr = Nowhere()


def note_if_read(text: str) -> None:
    """`note(text)`, unless standard error's reader left too (`2>&1 | head`): then nothing more is said there."""
    try:
        note(text)
    except BrokenPipeError:
        reader_left(sys.stderr)


# A full disk or device, a quota, a file size limit (errno has no EDQUOT on every system).
NO_ROOM = frozenset({errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)})


def output_refused(error: BaseException) -> bool:
    """Whether `error` is standard output refusing a write for want of room (`> /dev/full`, a full disk or quota):
    a print raises it bare, an OSError that names no file, where the files Beamwise writes itself name theirs or
    say their own error (an export's -o, a --json file). It was said as an internal error, with a traceback."""
    return isinstance(error, OSError) and error.errno in NO_ROOM and error.filename is None


def output_refused_text(error: OSError, what: str = "the command") -> str:
    """What `output_refused` is said as, on stderr and as a run's recorded reason (`what`: "the search")."""
    return (f"cannot write standard output ({error.strerror or error}); {what} did not finish. Free space on the "
            "disk it goes to, or send it elsewhere (a file on another disk, or a pipe).")


def say_output_refused(error: OSError, what: str = "the command") -> None:
    """`output_refused_text` as the user's error, once standard output takes nothing more (`reader_left`): what it
    still held would fail the exit's flush, which Python says as "Exception ignored", exit status 120."""
    reader_left(sys.stdout)
    print(f"beamwise: error: {output_refused_text(error, what)}", file=sys.stderr, flush=True)


class Nowhere(io.TextIOBase):
    """A text stream that takes every write and keeps nothing."""

    def write(self, text: str) -> int:
        return len(text)


@contextmanager
def failures_in_json(json_lines: bool) -> Iterator[None]:
    """With `run --json`, a failure before the search starts (the question file, the options, --session, the model's
    load, the memory check) is the stream's one line, a run_failed, as a failure the engine meets before RunStarted
    is: every stream a run prints ends with its end event. It is raised on, so stderr and the exit status say it
    as before (app/cli.py `main`)."""
    from engine.errors import BeamwiseError
    from engine.events import RunFailed, to_dict

    try:
        yield
    except Exception as error:  # the user's (UsageError, BeamwiseError) or a fault's: the stream ends either way
        if json_lines:
            message = error.user_message() if isinstance(error, BeamwiseError) else str(error)
            print(json.dumps(to_dict(RunFailed(type(error).__name__, message))), flush=True)
        raise


def cancelled_in_json(interrupt: KeyboardInterrupt) -> None:
    """A `run --json` that a Ctrl+C quits before its run started (the imports, the option checks, the model's load:
    it printed nothing) ends its stream with a run_cancelled line, once: `_drive` marks an interrupt whose stream
    has its end already (`stream_ended`)."""
    from engine.events import RunCancelled, to_dict

    if getattr(interrupt, "stream_ended", False):
        return
    interrupt.stream_ended = True  # type: ignore[attr-defined]
    print(json.dumps(to_dict(RunCancelled(step=0))), flush=True)


def stream_ended(interrupt: KeyboardInterrupt) -> None:
    """Mark `interrupt` as met after its stream's end event: `cancelled_in_json` adds none."""
    interrupt.stream_ended = True  # type: ignore[attr-defined]


def record(recorder, event) -> None:
    """A busy database does not stop the search: the recorder moves the run to a journal and says so once."""
    if recorder is None or recorder.finished or (recorder.session_id is None and not recorder.journal
                                                  and event.type != "run_started"):
        return  # not recording, or a run that failed before it started: nothing to record
    recorder.write(event)


def refused_before_start(events: list) -> bool:
    """Whether a run's events are a failure before it started (a question past the model's context, a PRM that does
    not load): its RunFailed alone, which `record` keeps nowhere as there is no run to record, in `run` and `eval`
    alike (README: "nothing is recorded")."""
    return [event.type for event in events] == ["run_failed"]


def close(recorder) -> int | None:
    """Close the recording and its database; the session a journalled run was saved as at its end (`end_recording`)."""
    if recorder is None:
        return None
    saved_as = end_recording(recorder)
    recorder.store.close()
    return saved_as


def end_recording(recorder) -> int | None:
    """Close one run's recording; a journalled run is imported at once if the database is free again (the store
    stays open: `beamwise eval` records every problem's run into one), and the session it was saved as is returned
    (None: not journalled, or not saved yet). A journal gone by then was imported by another Beamwise process that
    opened the database first."""
    from app.journal import saved_when
    from app.journal_import import import_journals

    recorder.close()
    path = recorder.journal_path
    if path is None:
        return None
    written = import_journals(recorder.store, only=path, notify=note)
    if not written and path.exists():
        read_only = recorder.read_only_database or recorder.store.read_only
        why = "it can only be read" if read_only else "busy, read-only or its disk full"
        warn(f"the session database {recorder.store.path} still cannot be written ({why}); this run is kept whole "
             f"in the journal {path} and {saved_when(recorder.store.path, read_only)}.")
    return written[0] if written else None
