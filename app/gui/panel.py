"""What every panel of the window is: a view of the shared `SessionModel` that redraws what a `Change` names."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from app.session import Change, SessionModel


class Panel(Protocol):
    """The window owns the model; a panel reads it, hears each change, and draws late work on `flush()`."""

    session: SessionModel

    def refresh(self, change: Change) -> None: ...

    def flush(self) -> None: ...


class SessionView:
    """Mixin for a panel's widget: `attach(session)` subscribes `refresh`; `apply`, `apply_many` and `reset`
    fold into the model (the window, tests and benchmarks feed events this way), so every view redraws."""

    session: SessionModel

    def attach(self, session: SessionModel | None) -> None:
        self.session = session if session is not None else SessionModel()
        self.session.subscribe(self.refresh)

    def refresh(self, change: Change) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Draw anything scheduled for later now (the default: nothing is)."""

    def apply(self, event: object) -> None:
        self.session.apply(event)

    def apply_many(self, events: Iterable[object]) -> None:
        self.session.apply_many(events)

    def reset(self) -> None:
        self.session.reset()
