"""One download of the Models page, run in a QThread: `model_pull.pull` with the window's words (Hub, Pull)."""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Signal, Slot

import app.formatting as fmt
from app.model_pull import PullCancelled, PullError, PullProgress, pull
from app.pull_failures import WINDOW_WORDS


class PullWorker(QObject):
    """Runs one `model_pull.pull` in a QThread; its outcome arrives as a signal on the GUI thread. Progress does not:
    the download also reports from a plain Python thread (the clock beside a transfer), and a signal emitted there
    would make Qt adopt a thread that ends right after. So the worker keeps only the latest report, and the page
    takes it on a timer (`take_report`)."""

    finished = Signal(str)  # the folder
    failed = Signal(str)  # what to do
    cancelled = Signal(str)

    def __init__(self, repo: str, filename: str | None, endpoint: str, revision: str = "main") -> None:
        super().__init__()
        self.repo, self.filename, self.endpoint, self.revision = repo, filename, endpoint, revision
        self.cancel = threading.Event()
        self._latest: tuple[int, int, str] | None = None  # bytes done, in all, "40% 1.2 MB of …"

    @Slot()
    def run(self) -> None:
        try:
            folder = pull(self.repo, filename=self.filename, endpoint=self.endpoint, revision=self.revision,
                          report=self._report, cancel=self.cancel, words=WINDOW_WORDS)
        except PullCancelled as stopped:
            self.cancelled.emit(str(stopped))
        except PullError as error:
            self.failed.emit(str(error))
        except Exception as error:  # a bug must not kill the thread silently
            self.failed.emit(f"the download stopped with an error ({type(error).__name__}: {error}).")
        else:
            self.finished.emit(str(folder))

    def _report(self, progress: PullProgress) -> None:
        self._latest = (progress.done, progress.total, progress.line())  # one assignment: safe from any thread

    def take_report(self) -> tuple[int, int, str] | None:
        """The latest progress not yet taken, or None."""
        latest, self._latest = self._latest, None
        return latest


def as_sentence(message: str) -> str:
    """A pull's message as a sentence, its first word capitalised only when it is a plain word: one that opens with
    a repository id or an address ("tiny/gen", "http://…") keeps its case, as the hub spells it."""
    first = message.split(" ", 1)[0]
    return fmt.sentence(message) if first.isalpha() else message
