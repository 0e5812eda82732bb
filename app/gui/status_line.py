"""The status bar's fields: model, device, policy, step i/S, the step's idle row-slots, candidate-tokens/s; the
model-load banner; and a once-a-second line saying what the current step is doing (so a long step never looks hung)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PureWindowsPath
from typing import Any

from PySide6.QtCore import QElapsedTimer, QEvent, QObject, Qt, QTimer
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QBoxLayout, QFrame, QHBoxLayout, QLabel, QMainWindow, QProgressBar, QWidget

from app import formatting
from app.eval_exit import ExitTally
from app.gpu_check import emulated_hint
from app.gui.bridge import is_database_wait
from app.gui.hints import first_lines
from app.gui.terms import window_terms
from app.heartbeat import StepProgress
from app.session.model import cancelled_text
from engine import events as ev
from engine.prm_names import FAMILY_LABELS, named_family

HEARTBEAT_MS = 1000
MODEL_WIDTH = 320  # px: a longer model name is shortened in the middle (whole in the tooltip)
VERIFIER_WIDTH = 360  # px: the same for the verifier (a PRM folder by its name alone); the tiny PRMs fit whole
VERIFIER_TIP = "What scores each step; a PRM shows its family and where it was loaded from"
MESSAGE_ROOM_PX = 320  # the bar's own line ("Done: 6 steps, score 0.872, …", the heartbeat) keeps at least this
MESSAGE_PAD_PX = 24  # beside a message's words: the bar's margin before them and a gap after
FIELD_GAP_PX = 8  # what the status bar puts beside each field
BANNER_LINES = 2  # the load banner's words above the tree
BANNER_SIDE_BY_SIDE_PX = 560  # narrower, the banner's bar goes under its words
BAR_PX = 240  # the banner's bar beside the words
PROMPT_TIP = "Prompt tokens: loaded from the prefix cache (cached) and computed by this run"
IDLE_TIP = ("The last step's idle row-slots: decode slots of rows whose step had ended while the group's longest "
            "row ran on (stragglers' waste). With speculative extension (FlashTTS) such rows decode their "
            "children's next steps instead: 'idle A of B' is after speculation (A) and before it (B = A + the tokens "
            "speculated).")


class LoadBanner(QFrame):
    """Model loading (and the first start's one-time conversion) in full words above the tree, with its bar: beside
    the words on a wide window, under them on a narrow one, and the words in at most BANNER_LINES lines (whole in
    the tooltip). Beside a 240 px bar at the window's smallest they wrapped to seven lines, widened the window to
    915 px and cut off the tree's bottom."""

    def __init__(self) -> None:
        super().__init__()
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setMinimumHeight(BANNER_LINES * self.label.fontMetrics().lineSpacing())
        self.bar = QProgressBar()
        self.row = QBoxLayout(QBoxLayout.Direction.LeftToRight, self)
        self.row.setContentsMargins(8, 4, 8, 4)
        self.row.addWidget(self.label, 1)
        self.row.addWidget(self.bar)
        self._message = ""
        self.hide()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        wide = self.width() >= BANNER_SIDE_BY_SIDE_PX
        direction = QBoxLayout.Direction.LeftToRight if wide else QBoxLayout.Direction.TopToBottom
        if self.row.direction() != direction:
            self.row.setDirection(direction)
        self.bar.setMinimumWidth(BAR_PX if wide else 0)
        width = self.label.contentsRect().width()
        shown = first_lines(self._message, self.label.font(), width, BANNER_LINES) if self.isVisible() else None
        self.label.setText(shown or self._message)
        self.setToolTip(self._message if shown and shown != self._message else "")

    def show_stage(self, message: str, fraction: float) -> None:
        self._message = message  # shown by _fit, cut to BANNER_LINES
        if fraction < 0:
            self.bar.setRange(0, 0)  # busy: a stage of unknown length
        else:
            self.bar.setRange(0, 100)
            self.bar.setValue(round(fraction * 100))
        self.show()
        self._fit()


class StatusLine:
    """Status bar fields: model, device, policy, step i/S, candidate-tokens/s, and the load progress."""

    def __init__(self, window: QMainWindow) -> None:
        bar = self.bar = window.statusBar()
        self._tokens, self._max_steps, self._clock = 0, 0, QElapsedTimer()
        self.model, self.device, self.policy = QLabel("model: -"), QLabel("device: -"), QLabel("policy: -")
        self.verifier = QLabel("verifier: -")
        self.verifier.setToolTip(VERIFIER_TIP)
        self.step, self.speed = QLabel("step -"), QLabel("- cand-tok/s")
        self.idle = QLabel()  # the last step's idle row-slots and speculated tokens, shown once a step reports them
        self.idle.setToolTip(IDLE_TIP)
        self.idle.hide()
        self.exit, self._exit = QLabel(), ExitTally()  # the layer-entropy exit, shown while a run has it on
        self.exit.setToolTip("RKSC's layer-entropy exit: the mean verifier layer the steps' candidates stopped at, "
                             "and the share of the verifier's layer work (tokens x layers) saved, kept candidates' "
                             "completed layers paid back")
        self.exit.hide()
        self.prompt = QLabel("prompt: -")
        self.prompt.setToolTip(PROMPT_TIP)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setMaximumWidth(220)
        self.progress.setTextVisible(True)
        self.progress.hide()
        self.banner = LoadBanner()  # the window places it above the tree: the status bar would clip its words
        self.live = StepProgress()
        self._beat = QTimer(window)
        self._beat.setInterval(HEARTBEAT_MS)
        self._beat.timeout.connect(self._heartbeat)
        self._quiet = QElapsedTimer()
        bar.addPermanentWidget(self.progress)
        self.fields = (self.model, self.verifier, self.device, self.policy, self.prompt, self.step, self.idle,
                       self.exit, self.speed)  # in the bar's order
        self._by_worth = (self.step, self.policy, self.speed, self.model, self.device, self.verifier, self.exit,
                          self.prompt, self.idle)  # who keeps a place on a narrow window first: the verifier, last
        # here, was dropped at the default 1400 px whenever a PRM was named (the README says the bar names it); the
        # exit, shown only while a run has it on, lost its place at 1400 px to "idle 0 slots" below it; the policy,
        # last, was dropped at 1400 px by a long prompt field, and which policy the run used is what Beamwise is for
        self._slots = {field: _slot(field) for field in self.fields}
        for field in self.fields:
            bar.addPermanentWidget(self._slots[field])
        self._fitter = _OnResize(bar, self.fit)
        bar.messageChanged.connect(self.fit)  # a longer message takes room from the least telling fields
        self.speed.setToolTip("Candidate tokens generated per second (all beams together)")
        self.device.setToolTip("Where the KV cache lives; without CUDA a budgeted CPU pool emulates the GPU")

    def fit(self, *_args: object) -> None:
        """Show the fields that fit beside the bar's line (the message's words, at least MESSAGE_ROOM_PX), the
        most telling first; the rest step aside rather than run over the line, which the window's 400-600 px
        messages did at every size when the line kept only MESSAGE_ROOM_PX. A field's own show/hide (idle, exit)
        is its label's; room is its slot's, so the two never fight."""
        message = self.bar.currentMessage()
        words = self.bar.fontMetrics().horizontalAdvance(message) + MESSAGE_PAD_PX if message else 0
        room = self.bar.width() - max(MESSAGE_ROOM_PX, words)
        self.bar.setToolTip(message if words > self.bar.width() else "")  # wider than the window: whole here
        if not self.progress.isHidden():
            room -= self.progress.sizeHint().width() + FIELD_GAP_PX
        for field in self._by_worth:
            need = field.sizeHint().width() + FIELD_GAP_PX
            fits = not field.isHidden() and need <= room
            room -= need if fits else 0
            self._slots[field].setVisible(fits)

    def shown_fields(self) -> list[QLabel]:
        """The fields a user sees now, in the bar's order."""
        return [f for f in self.fields if not f.isHidden() and self._slots[f].isVisibleTo(self.bar)]

    def loading(self, message: str, fraction: float) -> None:
        self.progress.show()
        if fraction < 0:
            self.progress.setRange(0, 0)  # busy: a stage of unknown length
        else:
            self.progress.setRange(0, 100)
            self.progress.setValue(round(fraction * 100))
        room = self.progress.maximumWidth() - self.progress.fontMetrics().horizontalAdvance(" 100%") - 16
        self.progress.setFormat(self.progress.fontMetrics().elidedText(message, Qt.TextElideMode.ElideRight, room)
                                + " %p%")  # cut to the bar: 40 characters ran over it in two lines
        self.progress.setToolTip(message)
        self.banner.show_stage(message, fraction)
        if self._beat.isActive() and is_database_wait(message):  # a wait between the search's events (not a load
            # stage): decided by the stage itself, as a server run loads no model (it said "loading the model")
            self.live.wait(message)  # the heartbeat says it until the search speaks again, the banner shows its bar
            self.progress.hide()  # and the line gets the room the bar's copy here took (it ran over the line)
            self.bar.showMessage(message)
        self.fit()

    def loaded(self, name: str | None, device: str | None) -> None:
        self.progress.hide()
        self.banner.hide()
        text = f"model: {name or 'not loaded'}"
        self.model.setText(self.model.fontMetrics().elidedText(text, Qt.TextElideMode.ElideMiddle, MODEL_WIDTH))
        self.model.setToolTip(text if self.model.text() != text else "")
        if device:
            self.device.setText(f"device: {device}")
        self.fit()

    def show_device_hint(self, hint: str | None) -> None:
        """On the emulated GPU although an NVIDIA GPU is present: a mark on the device field, the fix in its tooltip
        (the status bar's own line is the step's heartbeat)."""
        default = "Where the KV cache lives; without CUDA a budgeted CPU pool emulates the GPU"
        self.device.setToolTip(default if hint is None else f"{default}.\n\nThis machine has an NVIDIA GPU: {hint}")
        text = self.device.text().removesuffix(" ⚠")
        self.device.setText(text if hint is None else f"{text} ⚠")
        self.fit()  # the mark widens the field

    def begin(self, max_steps: int) -> None:
        """A search request starts: step 0/S, no speed yet, and none of the last run's figures (a load stopped
        by Esc left the previous session's prompt, idle slots and policy beside the new model)."""
        self._clear_run_fields()
        self._tokens, self._max_steps = 0, max_steps
        self.step.setText(f"step 0/{max_steps}")
        self.bar.showMessage("Running…")
        self.live = StepProgress()
        self._quiet.start()
        self._beat.start()
        self.fit()

    def reset(self) -> None:
        """Before a recorded session is shown: nothing of the previous run stays (a stale speed, a step)."""
        self._beat.stop()
        self._tokens, self._max_steps = 0, 0
        self._clear_run_fields()
        self.step.setText("step -")
        self.bar.clearMessage()
        self.fit()

    def _clear_run_fields(self) -> None:
        """The fields a run fills in, back to "-": speed, policy, verifier, prompt, idle slots, exit."""
        self.speed.setText("- cand-tok/s")
        self.policy.setText("policy: -")
        self.policy.setToolTip("")
        self._show_verifier("-")
        self._show_exit(None)
        self.idle.hide()
        self.prompt.setText("prompt: -")
        self.prompt.setToolTip(PROMPT_TIP)  # not the last run's cached and computed counts

    def stop_asked(self, doing: str = "stopping") -> str | None:
        """A stop (or a close, `doing`) before the first step: the heartbeat says what it waits for until the run
        ends (a second after Esc it said "reading the question, 1.8 s" again, for the minute a chunk took); that
        line, or None within a step, where the stop comes at the next token."""
        return self.live.line() if self._beat.isActive() and self.live.stop_asked("…", doing) else None

    def stop_heartbeat(self) -> None:
        self._beat.stop()

    def _heartbeat(self) -> None:
        """Once a second without an event: say what the step is doing (events themselves say the rest)."""
        if self._quiet.isValid() and self._quiet.elapsed() >= HEARTBEAT_MS - 50 and self.live.phase != "done":
            self.bar.showMessage(self.live.line())

    def apply(self, event: Any, live: bool) -> None:
        """Follow the run: policy, step i/S, candidate-tokens/s (measured live; recorded when replayed)."""
        if live:
            waited = self.live.waiting
            self.live.apply(event)
            self._quiet.start()
            if waited:  # the wait is over: the search spoke
                self.progress.hide()
                self.banner.hide()
                if self.bar.currentMessage() == self.live.waiting_for:  # not what came meanwhile (a journal's note)
                    self.bar.showMessage("Running…")
        if isinstance(event, ev.RunStarted):
            self._clock.start()
            self._tokens = 0
            self._max_steps = int(event.search.get("max_steps", self._max_steps))
            self.loaded(event.model, event.device)
            self.policy.setText(f"policy: {event.policy}")
            self.policy.setToolTip("")
            self._show_verifier(event.verifier)
            self.step.setText(f"step 0/{self._max_steps}")
            self._show_exit(None)
            self.idle.hide()
            self.show_device_hint(emulated_hint() if event.emulated and live else None)
        elif isinstance(event, ev.PrefillDone):
            self.prompt.setText(prompt_text(event))
            self.prompt.setToolTip(f"{PROMPT_TIP}: {event.cached_tokens} cached, {event.computed_tokens} computed")
            if event.prefix_disk_problem:
                said = formatting.prefix_disk_text(event.prefix_disk_problem)
                self.bar.showMessage(formatting.sentence(said), 15000)
        elif isinstance(event, ev.PolicyChanged):
            self.policy.setText(f"policy: {event.policy} (was {event.previous})")
            self.policy.setToolTip(policy_change_text(event))
            self.bar.showMessage(policy_change_text(event), 15000)
        elif isinstance(event, ev.StepStarted):
            self.step.setText(f"step {event.step}/{self._max_steps}")
        elif isinstance(event, ev.TransferStats):
            self.idle.setText(formatting.idle_text(event, detail=False))
            made, lent = event.speculative_tokens, event.speculative_lent_runs
            rows = f", {lent} of its runs in other beams' rows" if lent else ""
            self.idle.setToolTip(IDLE_TIP + (f"\n\nThe last step: {made} tokens speculated{rows}." if made else ""))
            self.idle.show()
        elif isinstance(event, ev.StepSelected) and event.exit_layer is not None:
            self._show_exit(self._exit + ExitTally.of_steps([event]))
        elif isinstance(event, ev.CandidateText):
            self._tokens += event.tokens
            if live and self._clock.isValid() and self._clock.elapsed() > 0:
                self.speed.setText(f"{self._tokens / (self._clock.elapsed() / 1000):.1f} cand-tok/s")
        elif isinstance(event, ev.RunFinished):
            self.speed.setText(f"{event.tokens_per_second:.1f} cand-tok/s")
            self.speed.setToolTip(formatting.goodput_text(event) + formatting.speculation_text(event, "\n"))
            # short enough to show beside the fields on a 1400-px window; what speculation did is in the speed's tooltip
            self.bar.showMessage(f"Done: {formatting.steps(event.steps)}, score {formatting.score(event.score)}, "
                                 f"goodput {event.goodput:.1f} tok/s", 15000)
        elif isinstance(event, ev.RunCancelled):  # the step it was in is dropped: the count ends at the last kept
            self.step.setText(f"step {event.step}/{self._max_steps}")
            self.bar.showMessage(f"{cancelled_text(event)}.", 15000)
        elif isinstance(event, ev.RunFailed):
            self.speed.setText("- cand-tok/s")  # a failed run has no speed to show
            self.bar.showMessage(f"Failed: {window_terms(event.message)[:120]}", 15000)
        if event.type in ev.TERMINAL_TYPES:
            self._beat.stop()
        if isinstance(event, ev.RunStarted | ev.PrefillDone | ev.PolicyChanged | ev.TransferStats | ev.StepSelected
                      | ev.RunFinished | ev.RunFailed):  # a field came, went or grew (the speed: once a step is enough)
            self.fit()

    def _show_verifier(self, name: str) -> None:
        """The verifier as the run names it, a PRM folder by its folder's name and cut in the middle past
        VERIFIER_WIDTH; the whole name, its path too, in the tooltip."""
        text = f"verifier: {short_verifier(name)}"
        shown = self.verifier.fontMetrics().elidedText(text, Qt.TextElideMode.ElideMiddle, VERIFIER_WIDTH)
        self.verifier.setText(shown)
        self.verifier.setToolTip(VERIFIER_TIP if shown == f"verifier: {name}" else f"{VERIFIER_TIP}\n\n{name}")

    def _show_exit(self, tally: ExitTally | None) -> None:
        """The exit's figures over the run's steps so far; None: a new run, hidden until a step exits."""
        self._exit = tally or ExitTally()
        self.exit.setText(f"exit: {self._exit.text()}")
        self.exit.setVisible(tally is not None)


def _slot(field: QLabel) -> QWidget:
    """A place in the status bar holding one field: hidden when the bar has no room for it."""
    slot = QWidget()
    row = QHBoxLayout(slot)
    row.setContentsMargins(0, 0, 0, 0)
    row.addWidget(field)
    return slot


class _OnResize(QObject):
    """Calls `react()` each time `watched` is resized."""

    def __init__(self, watched: QWidget, react: Callable[[], None]) -> None:
        super().__init__(watched)
        self._react = react
        watched.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize:
            self._react()
        return False


def policy_change_text(event: ev.PolicyChanged) -> str:
    """What `auto` did when free GPU memory fell mid-run, in one line."""
    return (f"Step {event.step}: free GPU memory fell below what {event.previous} needs; "
            f"{formatting.size(event.moved_bytes)} of KV moved to the CPU, going on with {event.policy}.")  # fmt: skip


def short_verifier(name: str) -> str:
    """A PRM's `FAMILY (FOLDER)` (or `FAMILY (FAMILY:FOLDER)`) as `FAMILY (its folder's name)`: a whole path took the
    status bar's room; other names (logprob, self-judge, `FAMILY (synthetic:NAME)`) as they are."""
    label, _, rest = name.partition(" (")
    if label not in FAMILY_LABELS.values() or not rest.endswith(")"):
        return name
    source = named_family(rest[:-1])[1]
    if source.startswith("synthetic:"):
        return name
    return f"{label} ({PureWindowsPath(source).name or source})"  # also a Windows path (at / and at a backslash)


def prompt_text(event: ev.PrefillDone) -> str:
    """The status field of a prefill: its tokens, and how many came from the prefix cache (the rest, computed,
    is in its tooltip: the status bar's fields leave the run's messages room only when they are short)."""
    if not event.cached_tokens:
        return f"prompt: {event.prompt_tokens} tok"
    return f"prompt: {event.prompt_tokens} tok ({event.cached_tokens} cached)"
