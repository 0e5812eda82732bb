"""Progress inside a step: what the run is doing now, said once a second so a long step never looks hung.

`StepProgress` folds the engine's existing events (no new ones: step started, group scheduled,
candidate text, candidate scored) into one line; `Heartbeat` prints that line from a daemon thread
every second while the search is silent. The window reads the same `StepProgress` from a QTimer.
No event says how far a group's decoding has got: a group's candidates and tokens are counted when it ends,
so a step decoded as one group (in_device's) shows them only at its end, its clock moving meanwhile.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import app.formatting as fmt

# What a stop asked before the first step waits for, after "stopping" (`beamwise run` says it too) or "closing".
STOP_AFTER_CHUNK = "after the chunk of the question being read"
STOP_BEFORE_START = "before the search starts: nothing will be recorded"  # a model loads, a server is asked


class StepProgress:
    """The current step's progress, from events; `line(now)` says it for a person."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.phase = "loading"
        self.step = 0
        self.candidates = 0  # expected this step (beams x width, from the kept beams)
        self.generated = 0
        self.scored = 0
        self.groups = 0  # groups whose candidates are all written
        self.tokens = 0
        self.remote = False  # a server's search, which says its group before its requests (engine/remote_search.py)
        self._unwritten: set[int] = set()  # the candidates of a server's group not yet written
        self.width = 1
        self.first = 1
        self.since = clock()
        self.waiting_for = ""  # what the run waits on outside the search, while `phase` is "waiting"
        self._held: str | None = None  # the phase the wait holds up (its clock runs on)
        self._database_wait: tuple[float, float] | None = None  # (since, busy timeout) of a wait for the database
        self._stopping: tuple[str, str] | None = None  # (doing, then) of a stop asked before the first step

    @property
    def waiting(self) -> bool:
        return self._held is not None

    def wait(self, what: str) -> None:
        """The run waits on something outside the search (the session database, locked by another program):
        `line()` is `what` (which says for how long) until the next event puts back the phase the wait held up.
        The heartbeat went on saying "loading the model" for the database's 5 s busy timeout."""
        if self._held is None:
            self._held = self.phase
        self._database_wait = None
        self.phase, self.waiting_for = "waiting", what

    def wait_for_database(self, limit_s: float) -> None:
        """A write to the session database may wait up to `limit_s` for another program's lock: `line()` says so,
        with the seconds waited (`beamwise run` said "reading the question, 2.0 s" while its start waited 5 s)."""
        self.wait(database_wait_line(0.0, limit_s))
        self._database_wait = (self._clock(), limit_s)

    def stop_asked(self, then: str = "", doing: str = "stopping") -> bool:
        """A stop (or a close, `doing`) came before the first step: until the run ends, `line()` says what the stop
        waits for, `then` after its words. The model reading the question stops only after the chunk being read
        (no stop point inside it: a minute with a long chunk), and the heartbeat went back to "reading the
        question, 1.8 s" a second after the window said it stops. Within a step the stop comes at the next token:
        False, and the line is left as it is."""
        if (self._held or self.phase) not in ("loading", "prefill"):
            return False
        self._stopping = (doing, then)
        return True

    def resume(self) -> None:
        """The wait is over before the search spoke: the phase it held up is back."""
        if self._held is not None:
            self.phase, self._held, self._database_wait = self._held, None, None

    def apply(self, event: Any) -> None:
        self.resume()  # the search spoke: whatever held it up is over
        kind = event.type
        if kind == "run_started":
            self.width = int(event.search.get("width", 1))
            self.first = int(event.search.get("beams", 1)) * self.width  # the prompt expands beams x width
            self.remote = getattr(event, "device", "").startswith("remote")  # REMOTE_DEVICE
            self._begin("prefill")
        elif kind == "step_started":
            self.step, self.generated, self.scored, self.groups, self.tokens = event.step, 0, 0, 0, 0
            self.candidates = len(event.beams) * self.width if event.beams else self.first
            self._unwritten = set()
            self._begin("decoding")
        elif kind == "group_scheduled":
            self._group_said(event)
        elif kind == "candidate_text":
            self.generated += 1
            self.tokens += event.tokens
            self._written(event.id)
            if self.generated >= self.candidates:
                self.phase = "scoring"
        elif kind == "candidate_scored":
            self.scored += 1
            self.phase = "scoring"
        elif kind in ("run_finished", "run_failed", "run_cancelled"):
            self.phase = "done"

    def _group_said(self, event: Any) -> None:
        """The engine says a group once it is decoded (engine/search.py: its text follows), a server's search
        before its requests go out: done only once its candidates are written (it said "1 group(s) done" first)."""
        if self.remote:
            self._unwritten |= set(event.candidates)
        else:
            self.groups += 1

    def _written(self, candidate: int) -> None:
        if candidate in self._unwritten:
            self._unwritten.discard(candidate)
            self.groups += not self._unwritten

    def _begin(self, phase: str) -> None:
        self.phase, self.since = phase, self._clock()

    def took(self) -> str:
        """How long the current phase has run, for a person ('12 s')."""
        return fmt.seconds(self._clock() - self.since)

    def line(self) -> str:
        """'step 3: decoding, 12 s, 2 group(s) done, 8/16 candidates written (120 tokens)'."""
        if self.phase == "waiting":
            wait = self._database_wait
            return self.waiting_for if wait is None else database_wait_line(self._clock() - wait[0], wait[1])
        if self._stopping is not None and self.phase in ("loading", "prefill"):
            doing, then = self._stopping
            said = STOP_AFTER_CHUNK if self.phase == "prefill" else STOP_BEFORE_START
            return f"{doing} {said}{then}"
        took = self.took()
        if self.phase in ("loading", "prefill"):
            return f"{'loading the model' if self.phase == 'loading' else 'reading the question'}, {took}"
        done = f"{self.generated}/{self.candidates} candidates written ({self.tokens} tokens)"
        if self.phase == "scoring":
            done = f"{self.scored}/{self.candidates} candidates scored"
        return f"step {self.step}: {self.phase}, {took}, {self.groups} group(s) done, {done}"


def database_wait_line(waited_s: float, limit_s: float) -> str:
    """The heartbeat's line while a write waits for the session database's lock (the window says the same)."""
    most = f" of at most {limit_s:g} s" if limit_s > 0 else ""
    return f"waiting for the session database, {waited_s:.1f} s{most}: another program holds it locked"


class Heartbeat:
    """Calls `say(progress.line())` every `interval` seconds in which no event arrived, until stopped."""

    def __init__(self, progress: StepProgress, say: Callable[[str], None], interval: float = 1.0) -> None:
        self.progress, self._say, self.interval = progress, say, interval
        self._stop = threading.Event()
        self._quiet_since = time.monotonic()
        self._thread = threading.Thread(target=self._beat, name="beamwise-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * self.interval)

    def saw(self, event: Any) -> None:
        """An event arrived: fold it in; the search spoke, so the next beat waits a whole interval."""
        self.progress.apply(event)
        self._quiet_since = time.monotonic()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            if time.monotonic() - self._quiet_since >= self.interval and self.progress.phase != "done":
                self._say(self.progress.line())
