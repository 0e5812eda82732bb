"""The start-up splash: shown before torch, transformers and the window load, with one line on what is loading.

Importing the window pulls in torch and transformers (seconds on a cold disk); until the window's first paint a
user who double-clicked the app saw nothing. This module imports only Qt, so the splash paints at once.
A plain frameless widget, not QSplashScreen: on a platform that never reports it exposed (offscreen, as in the
tests and screenshots) QSplashScreen's show() waits a whole second.
"""

from __future__ import annotations

from PySide6.QtCore import QDeadlineTimer, QEventLoop, Qt
from PySide6.QtGui import QFont, QPainter, QPaintEvent
from PySide6.QtWidgets import QApplication, QWidget

SIZE = (440, 150)
EXPOSE_WAIT_MS = 300  # at most, for the window manager to map the splash before the GUI thread blocks


class StartupSplash(QWidget):
    """`say(text)` shows what loads now and paints it before returning (the caller then blocks in an import);
    `finish()` closes the splash once the window is shown."""

    def __init__(self) -> None:
        super().__init__(None, Qt.WindowType.SplashScreen | Qt.WindowType.FramelessWindowHint)
        self.setWindowTitle("Beamwise")
        self.setFixedSize(*SIZE)
        self.message = ""
        self.paints = 0  # counted, for the tests
        if (screen := QApplication.primaryScreen()) is not None:
            self.move(screen.availableGeometry().center() - self.rect().center())
        self.show()
        self._paint_now()

    def say(self, text: str) -> None:
        self.message = text
        self._paint_now()

    def finish(self) -> None:
        self.close()
        self.deleteLater()

    def _paint_now(self) -> None:
        """Paint before returning: the GUI thread blocks next, and a splash mapped later would stay blank."""
        deadline = QDeadlineTimer(EXPOSE_WAIT_MS)
        while not self._exposed() and not deadline.hasExpired():
            QApplication.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents, 10)
        self.repaint()
        QApplication.processEvents()

    def _exposed(self) -> bool:
        handle = self.windowHandle()
        return handle is not None and handle.isExposed()

    def paintEvent(self, event: QPaintEvent) -> None:
        self.paints += 1
        palette = self.palette()
        painter = QPainter(self)
        painter.fillRect(self.rect(), palette.window())
        painter.setPen(palette.mid().color())
        painter.drawRect(self.rect().adjusted(0, 0, -1, -1))
        title = QFont(self.font())
        title.setPointSizeF(title.pointSizeF() * 2.2)
        title.setBold(True)
        painter.setFont(title)
        painter.setPen(palette.windowText().color())
        painter.drawText(self.rect().adjusted(0, 0, 0, -40), Qt.AlignmentFlag.AlignCenter, "Beamwise")
        painter.setFont(self.font())
        painter.drawText(self.rect().adjusted(12, 0, -12, -14),
                         Qt.AlignmentFlag.AlignBottom | Qt.AlignmentFlag.AlignHCenter, self.message)
        painter.end()
