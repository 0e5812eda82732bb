"""`beamwise gui`: build the application and the window, load the model, optionally run and screenshot.

The window's modules import neither torch nor transformers (seconds): the window paints first, and they load in
the background after it (app/gui/engine_import.py), the load banner saying so. A test holds this.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

from PySide6.QtCore import QDeadlineTimer, QEventLoop, QSettings, Qt, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox, QWidget

from app.db_path import db_file
from app.exit_options import given_thresholds
from app.gui import palette as pal
from app.gui import settings as saved
from app.gui.bridge import SearchBridge
from app.gui.loop_monitor import LoopGapMonitor
from app.gui.main_window import MainWindow
from app.journal_import import open_session_store
from app.models_folder import MARKER, kept_as_given
from app.options import configs_from_args, search_parser, typed_options
from app.question import checked_argument, empty_message
from app.store import SessionStore
from app.store_errors import StoreDamaged
from app.store_file import move_aside
from engine import events as ev
from engine.blank_text import is_blank
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.errors import BeamwiseError, ConfigError, ModelLoadError

Configs = tuple[ModelSpec, SearchConfig, CacheConfig]
PLAN_WAIT_MS = 15_000  # a screenshot waits this long at most for the plan bar after the run
EXPOSE_WAIT_MS = 300  # at most, for the window manager to map the window before its first paint
WHY_NO_TAB = {"sessions": "the session database could not be opened (said above)"}  # --panel's tab not built


# The options whose dest is not the name of the config field they set (the rest are: --beams sets beams).
FIELD_OF_OPTION = {"model": "source", "kv_budget": "kv_budget_bytes", "no_inter_beam": "inter_beam",
                   "no_prefetch": "balanced_prefetch", "prefix_cache_ram": "prefix_cache_ram_bytes",
                   "prefix_cache_disk": "prefix_cache_disk_bytes"}


def explicit_configs(args: argparse.Namespace, base: Configs, typed: Configs | None = None,
                     given: Collection[str] | None = None) -> Configs:
    """`base` (the remembered settings) with only the options the user actually typed applied on top; `typed`:
    the configs `args` gave already (built again, their notes on stderr, a damaged thresholds file, came twice);
    `given`: the dests of the options typed (`command_line_options`), each applied whatever its value. Where the
    remembered settings cannot go with a typed one (a PRM on the CPU, and `--verifier self-judge`), that config is
    the command line's alone."""
    typed = typed or configs_from_args(args)
    merged = []
    for mine, command_line, names in zip(base, typed, _typed_fields(typed, given), strict=True):
        try:
            merged.append(dataclasses.replace(mine, **{name: getattr(command_line, name) for name in names}))
        except ConfigError as error:
            print(f"beamwise: the remembered settings do not go with the options given ({error.user_message()}): "
                  "the options' defaults stand for the rest.", file=sys.stderr)
            merged.append(command_line)
    return merged[0], merged[1], merged[2]


def _typed_fields(typed: Configs, given: Collection[str] | None) -> list[list[str]]:
    """Per config, the fields the typed options set: those of the options in `given`; without it (what was typed is
    not known) those that differ from their defaults, and an option typed with its default value is lost to the
    remembered one (`--beams 4` ran the remembered 2)."""
    if given is not None:
        fields = {FIELD_OF_OPTION.get(dest, dest) for dest in given}
        return [[f.name for f in dataclasses.fields(config) if f.name in fields] for config in typed]
    defaults = configs_from_args(search_parser().parse_args([]))
    return [[f.name for f in dataclasses.fields(config) if getattr(config, f.name) != getattr(default, f.name)]
            for config, default in zip(typed, defaults, strict=True)]


def command_line_options(args: argparse.Namespace) -> frozenset[str] | None:
    """The dests of the model, search and cache options typed after `gui` (app/cli.py keeps the command line as
    `args.argv`); None for `args` built otherwise (tests, a caller in this process): what was typed is not known."""
    argv = getattr(args, "argv", None)
    return typed_options(argv[1:]) if argv and argv[0] == "gui" else None


def store_or_problem(path: str | None, *, ask: bool) -> tuple[Any, str]:
    """(the SessionStore at `path`, or the default one, and "") or (None, why it cannot be opened). With `ask`, a
    damaged database is moved aside for a fresh one when the user agrees."""
    notify = lambda text: print(f"beamwise: {text}", file=sys.stderr)  # noqa: E731 - journals imported on open
    try:
        db = db_file(path)  # `--db ""` is refused as empty, as `run` refuses it (it opened the default database)
        return open_session_store(db, notify=notify), ""
    except StoreDamaged as error:
        question = (f"{error.user_message()}\n\nMove it aside (it is kept as a .damaged file) "
                    "and start a fresh session database?")
        if ask and QMessageBox.question(None, "Session database damaged", question) == QMessageBox.StandardButton.Yes:
            try:
                move_aside(db)
                return open_session_store(db, notify=notify), ""
            except BeamwiseError as again:
                return None, again.user_message()
        return None, error.user_message()
    except BeamwiseError as error:
        return None, error.user_message()


def window_store(db: str | None, *, interactive: bool) -> tuple[Any, str] | None:
    """(the window's session store, or None and why not), or None when `db`, a --db the user typed, cannot be opened:
    that is an error, said as `beamwise run` says it (exit 2), not a window that saves nothing. The default
    database unusable still opens the window, which says it saves nothing (first a dialog, or stderr headless)."""
    store, problem = store_or_problem(db, ask=interactive and db is None)
    if problem and db is not None:
        print(f"beamwise: error: {problem}", file=sys.stderr)
        return None
    if problem:
        _warn(interactive, "Sessions will not be saved", problem)
    return store, problem


def _warn(ask: bool, title: str, text: str) -> None:
    if ask:
        QMessageBox.warning(None, title, text)
    else:
        print(f"beamwise: {title}: {text}", file=sys.stderr)


def say_missing_panel(panel: str | None, window: MainWindow) -> None:
    """Say on stderr, before the run, that the tab --panel asked for is not in the window (the Sessions tab is
    not built without a session database): the picture showed the Settings tab, and nothing said why."""
    if panel is None or panel in window.docks:
        return
    why = WHY_NO_TAB.get(panel, "this window has no such tab")
    print(f"beamwise: --panel {panel}: the {panel.capitalize()} tab is not shown because {why}; the screenshot "
          "shows the Settings tab instead.", file=sys.stderr)


class Screenshot:
    """When the run ends: fit the tree, paint, save the window as PNG, quit with 0 (or 2 if it failed).

    The run's own failures are said in the command line's words (the engine's, naming the options), not the
    window's (its controls' labels, "Choose another model under Settings > Model"): no picture of the window is
    saved then, and the options are what a user of `gui --screenshot` changes."""

    def __init__(self, app: QApplication, window: MainWindow, path: Path, panel: str | None = None) -> None:
        self.app, self.window, self.path, self.panel = app, window, path, panel
        window.error_reported.connect(self.on_error)
        window.run_ended.connect(self.on_run_ended)
        self.gaps = LoopGapMonitor(window)  # BENCHMARKS.md: the window must stay responsive during a run
        self.gaps.start()
        self.loading_gap_ms: float | None = None
        self.saved = False
        self.failure = ("", "")  # the run's failure: the window's title for it, the engine's message
        window.bridge.event_emitted.connect(self.on_event)
        window.bridge.load_failed.connect(lambda message: self.note_failure(message=message))
        say_missing_panel(panel, window)

    def on_event(self, event: Any) -> None:
        if isinstance(event, ev.RunStarted):  # the model is loaded: from here on it is the search
            self.loading_gap_ms = self.gaps.largest_gap_ms
            self.gaps.start()

    def on_error(self, title: str, text: str) -> None:
        """What the window reports: said at once, but a running search's failure waits for the run's end, which
        says it with the engine's message (`on_run_ended`)."""
        if self.window.running:
            self.note_failure(title=title)
        else:
            print(f"beamwise: {title}: {text}", file=sys.stderr)

    def note_failure(self, *, title: str = "", message: str = "") -> None:
        """Keep what the window titles the run's failure, and the engine's own message for it (a model's load)."""
        self.failure = (title or self.failure[0], message or self.failure[1])

    def on_run_ended(self, terminal: Any) -> None:
        self.gaps.stop()
        if not isinstance(terminal, ev.RunFinished):
            self.say_failure(terminal)
            self.app.exit(2)
            return
        loading = "" if self.loading_gap_ms is None else f"; while loading the model: {self.loading_gap_ms:.1f} ms"
        print(f"beamwise: largest GUI event-loop gap during the search: {self.gaps.largest_gap_ms:.1f} ms "
              f"({self.gaps.ticks} timer ticks){loading}")
        # The plan bar is part of the picture: a short run ends before its debounce has planned anything, and
        # the picture showed "Planning memory…". Plan now, and save once it shows (or after PLAN_WAIT_MS).
        self.window.plan_bar.planned.connect(lambda plan: QTimer.singleShot(50, self.save))
        self.window.plan_bar.refresh_now()
        QTimer.singleShot(PLAN_WAIT_MS, self.save)

    def say_failure(self, terminal: Any) -> None:
        """The run that ended without an answer: what went wrong, and no event-loop gap (it measures a search that
        answered, beside its picture: a model that did not load or a refused run printed one "during the search")."""
        title, message = self.failure
        if isinstance(terminal, ev.RunFailed):
            message = terminal.message
        if title and message:
            print(f"beamwise: {title}: {message}", file=sys.stderr)
        what = "was stopped" if isinstance(terminal, ev.RunCancelled) else "failed"
        print(f"beamwise: error: the run {what}; no screenshot was saved.", file=sys.stderr)

    def save(self) -> None:
        if self.saved:
            return
        self.saved = True
        self.app.processEvents()
        tree = self.window.panels.tree
        best = self.window.session.tree.best_id
        if best is not None:
            tree.select_node(best)  # the details panel then shows the answer's last step
        tree.show_readable()  # the whole tree when its text reads at that size, else the chosen path's end
        if self.panel in self.window.docks:
            self.window.docks[self.panel].raise_()
        self.app.processEvents()
        try:  # its folder was there before the run (screenshot_problem): one removed since is not made again
            saved_ok = self.window.grab().save(str(self.path), "PNG")
        except OSError:
            saved_ok = False
        if not saved_ok:
            print(f"beamwise: error: could not write the screenshot {self.path}; "
                  "check that the folder is writable.", file=sys.stderr)
            self.app.exit(2)
            return
        print(f"beamwise: screenshot saved to {self.path}")
        self.app.exit(0)


def main(args: argparse.Namespace) -> int:
    """Open the window; with --question run it; with --screenshot save a PNG after the run and exit."""
    screenshot = Path(args.screenshot) if getattr(args, "screenshot", None) else None
    if screenshot is not None and args.question is None:
        print("beamwise: error: --screenshot needs --question (the run to take a picture of).", file=sys.stderr)
        return 2
    if args.question is not None:
        checked_argument(args.question, file_option=False)  # Qt's box dropped the bytes that are not UTF-8, unsaid
    if screenshot is not None and is_blank(args.question):
        print(f"beamwise: error: {empty_message(command='gui')}", file=sys.stderr)  # as `beamwise run ""` says it
        return 2
    if screenshot is not None and (problem := screenshot_problem(screenshot)):
        print(f"beamwise: error: cannot save the screenshot to {screenshot}: {problem}", file=sys.stderr)
        return 2
    typed = configs_from_args(args)  # a ValueError here reaches the CLI as a one-line error, before any window
    if getattr(args, "backend", "local") != "openai" and (missing := missing_model(args.model)) is not None:
        print(f"beamwise: error: {missing}", file=sys.stderr)
        return 2
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setOrganizationName(saved.ORGANIZATION)
    app.setApplicationName(saved.APPLICATION)
    opened = window_store(getattr(args, "db", None), interactive=screenshot is None)  # its dialogs: before the window
    if opened is None:
        return 2
    store, problem = opened
    # A screenshot run must neither use nor overwrite the user's remembered settings and layout.
    scratch = tempfile.TemporaryDirectory() if screenshot else None
    settings = (QSettings(str(Path(scratch.name) / "beamwise.ini"), QSettings.Format.IniFormat) if scratch
                else saved.default_settings())
    window = _build_window(args, settings, store, interactive=screenshot is None, typed=typed, store_problem=problem)
    follow_theme(app, window, getattr(args, "theme", "system"))
    try:
        window.show()
        paint_now(window)
        if not window.isVisible():  # closed as it first painted: app.exec() would wait, windowless, for ever
            return 0
        window.import_engine()  # after the first paint: the import holds the GIL in long stretches
        shooter = (Screenshot(app, window, screenshot, getattr(args, "panel", None))  # noqa: F841 - kept alive
                   if screenshot is not None else None)
        if getattr(args, "collapse_pruned", False):
            window.panels.tree.set_collapse_pruned(True)
        if args.question:
            window.question.setPlainText(args.question)
            QTimer.singleShot(0, lambda: _start(window, app, exit_on_refusal=screenshot is not None))
        else:
            window.load_model()
        return app.exec()
    finally:
        window.close()
        if window.store is not None:
            window.store.close()
        window.deleteLater()
        if scratch is not None:
            scratch.cleanup()


def follow_theme(app: QApplication, window: MainWindow, theme: str) -> None:
    """Light or dark as asked; with "system", as the OS says now and whenever it switches."""
    if theme != "system":
        window.apply_theme(theme == "dark")
        return
    window.apply_theme(pal.system_prefers_dark())
    app.styleHints().colorSchemeChanged.connect(lambda scheme: window.apply_theme(scheme == Qt.ColorScheme.Dark))


def missing_model(source: str | None) -> str | None:
    """`beamwise run`'s refusal of a model path that does not exist (engine/models.py's words and hint), or None:
    said before the window, as a mistyped name is (app/options.py). The window found it only once torch and the
    loader had come (seconds), then said the run failed. Names the loader resolves (bundled, synthetic:NAME) are
    its own; a .gguf in a folder a pull left unfinished is said by the loader, which says so."""
    if source is None or kept_as_given(source):
        return None
    path = Path(source).expanduser()
    gguf = source.lower().endswith(".gguf")
    try:
        if path.exists() or (gguf and (path.parent / MARKER).exists()):
            return None
    except OSError:  # a name too long for the file system, say: the loader says why
        return None
    what = f"GGUF file {path}" if gguf else f"model path {path}"
    return ModelLoadError(f"{what} does not exist.").user_message()


def screenshot_problem(path: Path) -> str | None:
    """Why no screenshot can be saved at `path`, said before the window and the run, or None. Its folder must exist,
    as `sessions export -o` and `--db` ask: a typo in the path made a new folder tree. A file already there is
    replaced (a picture remade, as docs/screenshots.py does)."""
    folder = path.parent
    try:
        if not folder.exists():
            return f"the folder {folder} does not exist. Create the folder first or choose another one."
        problem = unwritable(path)
    except OSError as error:  # a name too long for the file system, say
        problem = error.strerror or str(error)
    return None if problem is None else f"{problem}; choose a file in a folder you can write to."


def unwritable(path: Path) -> str | None:
    """Why a file cannot be written at `path` (checked before the run, so a long run is not wasted), or None."""
    if path.is_dir():
        return "it is a folder"
    folder = next((p for p in (path.parent, *path.parent.parents) if p.exists()), None)
    if folder is None or not folder.is_dir():
        return f"{folder} is not a folder"
    if path.exists() and not _can_write(path):
        return f"{path} is not writable"
    return None if _can_write(folder) else f"{folder} is not writable"


def _can_write(path: Path) -> bool:
    """Tried, as `--json` paths are (app/json_out.py): a file made and removed in a folder, a file opened to append
    (left as it was). os.access says yes to root everywhere, /proc included, and the run then ended in "could not
    write the screenshot"."""
    try:
        if path.is_dir():
            handle, probe = tempfile.mkstemp(prefix=".beamwise-", suffix=".part", dir=path)
            os.close(handle)
            os.unlink(probe)
        else:
            path.open("ab").close()
    except OSError:
        return False
    return True


def _start(window: MainWindow, app: QApplication, *, exit_on_refusal: bool) -> None:
    if not window.start_run() and exit_on_refusal:
        why = window.statusBar().currentMessage() or "check the question and the settings"  # what the window says
        print(f"beamwise: error: the run could not start: {why}", file=sys.stderr)
        app.exit(2)


def paint_now(window: QWidget) -> None:
    """Paint `window` before returning, once the window manager has mapped it (or after EXPOSE_WAIT_MS: offscreen
    never says so): what comes next, the engine's import and the model load, then shares the GIL with a window
    already on screen rather than with its first paint."""
    deadline = QDeadlineTimer(EXPOSE_WAIT_MS)
    while not _exposed(window) and not deadline.hasExpired():
        QApplication.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents, 10)
    window.repaint()
    QApplication.processEvents()


def _exposed(window: QWidget) -> bool:
    handle = window.windowHandle()
    return handle is not None and handle.isExposed()


def _build_window(args: argparse.Namespace, settings: QSettings, store: Any, *, interactive: bool,
                  typed: Configs | None = None, store_problem: str = "") -> MainWindow:
    """The window over `store` (None: it runs without saving, `store_problem` says why); `typed`: the configs
    `args` gave, when built."""
    factory = None
    if store is not None:
        path = store.path
        factory = lambda: SessionStore(path)  # noqa: E731 - the worker thread opens its own connection
    bridge = SearchBridge(store_factory=factory)
    window = MainWindow(bridge, settings=settings, store=store, dialogs=interactive, store_problem=store_problem)
    base = saved.load_configs(settings) or (ModelSpec(), SearchConfig(), CacheConfig(prefix_cache=True))
    window.controls.set_configs(*explicit_configs(args, base, typed, command_line_options(args)),
                                given=given_thresholds(args))  # typed thresholds win over the calibrated ones
    if not interactive:
        window.resize(1400, 900)
    return window
