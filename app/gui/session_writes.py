"""The Sessions panel's writes (rename, delete): made without freezing the window while another process holds the
session database's write lock."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QWidget

from app.gui.background import run_in_background
from app.store import SessionStore
from app.store_errors import StoreLocked
from engine.errors import BeamwiseError

QUICK_WAIT_S = 0.1  # a rename or delete waits this long for the lock on the GUI thread, then in a worker thread
StoreWrite = Callable[[SessionStore], object]  # a rename or delete, made through the store it is given


class SessionWrites:
    """One write at a time for `owner` (the panel): `waiting` names the one that waits for the database, if any.

    `store()` is the store to write to now; `say(text or None)` shows or clears the owner's line about the wait;
    `changed()` is called when `waiting` changes (the owner turns its buttons off or on)."""

    def __init__(self, owner: QWidget, store: Callable[[], SessionStore], say: Callable[[str | None], None],
                 changed: Callable[[], None]) -> None:
        self._owner, self._store, self._say, self._changed = owner, store, say, changed
        self._quick: SessionStore | None = None  # the file once more, for writes that barely wait (`write`)
        self.waiting: tuple[str, int] | None = None  # ("rename" or "delete", session id) waiting for the database

    def write(self, what: tuple[str, int], change: StoreWrite, done: Callable[[], None],
              failed: Callable[[Exception], None]) -> bool:
        """Make `change` without freezing the window. First at once, on a connection that waits at most QUICK_WAIT_S
        for a lock: usually done (`done()` called) before this returns True. If another program or Beamwise holds
        the database's write lock, it waits for it (the store's busy timeout) in a worker thread on a connection of
        its own (the shared store's would hold the store's lock that long, and every read of the window with it),
        the buttons off and a line saying so meanwhile; `done()` or `failed(error)` on the GUI thread after."""
        try:
            store = self._store()
        except BeamwiseError as error:
            failed(error)
            return False
        try:
            change(self._quick_store(store))
        except StoreLocked:
            pass  # another process is writing: wait for it below, off the GUI thread
        except (BeamwiseError, ValueError) as error:
            failed(error)
            return False
        else:
            done()
            return True
        self.waiting = what
        self._changed()
        self._say(f"{'Saving the new title' if what[0] == 'rename' else 'Deleting the session'}: another "
                  "program or Beamwise process is writing to the session database; waiting up to "
                  f"{store.busy_timeout:g} s for it…")
        checked = self._pages_checked(store)
        run_in_background(self._owner, f"beamwise-{what[0]}", lambda: (_waited(store, change, checked),),
                          lambda error: self._written(error, done, failed))
        return False

    def still_waiting(self) -> bool:
        """A rename or delete is waiting for the database: say so instead of starting another."""
        if self.waiting is not None:
            self._say(f"Still waiting for the session database to {self.waiting[0]} session {self.waiting[1]}; "
                      "try again once it is done.")
        return self.waiting is not None

    def _quick_store(self, store: SessionStore) -> SessionStore:
        """`store`'s file opened once more, waiting QUICK_WAIT_S at most for a lock: unnoticed, and long enough for
        the window's own recorder to commit a step (an in-memory store is private: itself). Its pages are not read
        again when `store` read them (the window's store did when it opened): a quick_check of every page on the
        GUI thread froze the window at the first rename or delete (0.2 s for 315 MB, seconds from a cold disk)."""
        if store.path is None:
            return store
        if self._quick is None or self._quick.path != store.path:
            if self._quick is not None:
                self._quick.close()
            self._quick = SessionStore(store.path, busy_timeout=QUICK_WAIT_S, pages_checked=store.pages_checked)
            self._owner.destroyed.connect(self._quick.close)
        return self._quick

    def _pages_checked(self, store: SessionStore) -> bool:
        """`store`'s file had its pages read, by `store` or by the quick store over it."""
        quick = self._quick
        return store.pages_checked or (quick is not None and quick.path == store.path and quick.pages_checked)

    def _written(self, error: Exception | None, done: Callable[[], None],
                 failed: Callable[[Exception], None]) -> None:
        self.waiting = None
        self._say(None)
        self._changed()
        if error is None:
            done()
        else:
            failed(error)


def _waited(store: SessionStore, change: StoreWrite, pages_checked: bool) -> Exception | None:
    """In a worker thread: `change` through a connection of its own to `store`'s file that waits for the write
    lock as long as `store` would (its pages read first unless `pages_checked`); its error as data (an exception
    left in the thread would never reach the panel, whose buttons would stay off)."""
    try:
        if store.path is None:
            change(store)
        else:
            with SessionStore(store.path, busy_timeout=store.busy_timeout, pages_checked=pages_checked) as own:
                change(own)
    except Exception as error:
        return error
    return None
