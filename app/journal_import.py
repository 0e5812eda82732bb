"""Opening the session database: the store, then every finished run journal of it replayed in, one transaction each.

Every command and the window open the database through `open_session_store`, so a run that
was journalled while the database was busy appears whole the next time anything opens it.
A journal is deleted only after its session committed; one that is still being written (its
process is alive and has not closed it) is left alone. Several processes may open the database
at once (the window, `beamwise run`, `beamwise eval`): an import takes its journal inside its own
write transaction, so each journal becomes exactly one session, however many processes try.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path

from app.db_path import db_file
from app.export.checks import event_problem
from app.formatting import steps
from app.journal import (
    SUFFIX,
    Journal,
    JournalError,
    folders_for,
    journal_db,
    journal_folders,
    journals_of,
    read_journal,
    saved_when,
)
from app.models_folder import data_folder
from app.processes import alive_since
from app.recorder import LockSeen, SessionRecorder
from app.store import SessionStore
from app.store_errors import RowsRefused, StoreError, StoreLocked
from app.store_file import writable
from engine import events as ev

Notify = Callable[[str], None]
TAKEN = ".importing"  # a journal being imported: renamed inside its transaction, deleted once that committed
CHECK_DB = "Check the --db path, or leave --db out for the default database."


def open_session_store(path: Path | str | None = None, *, notify: Notify | None = None, missing: str | None = None,
                       missing_hint: str = CHECK_DB, lock: LockSeen | None = None,
                       read_only: bool = False) -> SessionStore:
    """`SessionStore(path)`, its pages read once if it may be written (a damaged file is refused before a run, not
    at its first write), then the journals waiting for it imported (a busy database leaves them for later).

    `missing` is what it means to the caller that there is no database at `path` (the default one when None):
    given, such a path is refused with a StoreError ("... so `missing`.", `missing_hint`) instead of opened, since
    opening makes an empty database there: a mistyped --db then read as a database with no sessions.
    `lock` learns of a lock the import met, so the runs recorded next do not wait for it again (app/recorder.py).
    `read_only` opens it to be read only (`SessionStore`): nothing is written, and no journal is imported."""
    if missing is not None:
        where = db_file(path)  # a name the file system cannot hold is refused in words
        if not where.exists():
            raise StoreError(f"there is no session database at {where}, so {missing}.", hint=missing_hint)
    store = SessionStore(path, read_only=read_only)
    try:
        if not store.read_only:
            store.check_pages()
        import_journals(store, notify=notify, lock=lock)
    except BaseException:
        store.close()
        raise
    return store


def journal_folders_of(store: SessionStore) -> list[Path]:
    """Where a run recorded into `store` keeps its journal if the database is busy or full, best first."""
    assert store.path is not None
    return journal_folders(store.path, data_folder())


def recorder_for(store: SessionStore, notify: Notify, previous: int | None = None,
                 title: str | None = None, lock: LockSeen | None = None) -> SessionRecorder:
    """A recorder that journals instead of failing when the database is busy (file databases only);
    `previous` makes the run the next turn of that session's conversation; `lock` is shared by the runs of one
    process (an eval's) so that a lock one met is not waited for again by the next (app/recorder.py)."""
    folder = None if store.path is None else (lambda: journal_folders_of(store))
    return SessionRecorder(store, title=title, journal_folder=folder, notify=notify, previous=previous, lock=lock)


def import_journals(store: SessionStore, *, only: Path | None = None, notify: Notify | None = None,
                    lock: LockSeen | None = None) -> list[int]:
    """Replay the finished journals of this database; returns the session ids written. A journal's own problem
    leaves it in place, said, and the next one is imported; the database's (busy, read-only, full) stops them all."""
    say = notify or (lambda _text: None)
    if only is None and store.path is not None and store.read_only and not writable(store.path):
        _say_waiting(store, say)
    if store.path is None or store.read_only:
        return []
    written: list[int] = []
    if only is None:
        _settle_taken(store, str(store.path.resolve()))
    for path in [only] if only is not None else journals_of(store.path, data_folder()):
        try:
            session_id = _import_one(store, path, only, say)
        except StoreError as error:  # busy, read-only, full or damaged: the database, not the journal; try later
            if lock is not None and isinstance(error, StoreLocked):
                lock.saw()
            if only is None:  # with `only`, the caller says what happens to its own run's journal
                say(f"the run journal {path} was not imported yet ({str(error).rstrip('.')}); it stays until the "
                    "database can be written.")
            break
        if session_id is not None:
            written.append(session_id)
    return written


def _say_waiting(store: SessionStore, say: Notify) -> None:
    """Name the journals that wait for a database that can only be read, and what must change for them to be saved:
    a read-only database is opened to be read only and imports none, and `sessions list` read it without the runs
    they keep, not a word said, after the run had promised they would be saved the next time it was opened."""
    assert store.path is not None
    target = str(store.path.resolve())
    waiting = [path for path in journals_of(store.path, data_folder()) if journal_db(path) == target]
    if not waiting:
        return
    runs = "1 run" if len(waiting) == 1 else f"{len(waiting)} runs"
    kept = "the journal" if len(waiting) == 1 else "the journals"
    shown = ", ".join(map(str, waiting[:3])) + (f" and {len(waiting) - 3} more beside them" if len(waiting) > 3 else "")
    say(f"{runs} kept in {kept} {shown} {saved_when(store.path, True, many=len(waiting) > 1)}.")


def import_runs(store: SessionStore, paths: Sequence[Path], notify: Notify, lock: LockSeen | None = None) -> list[Path]:
    """Replay these journals of this process's runs (closed), oldest first: the ones still waiting, from the first
    the database did not take (another program's lock is remembered in `lock`, as `import_journals` does), or [].
    A journal that cannot be imported for its own sake is said and left in place, not waited on."""
    for index, path in enumerate(paths):
        try:
            _import_one(store, path, path, notify)
        except StoreError as error:
            if lock is not None and isinstance(error, StoreLocked):
                lock.saw()
            return [p for p in paths[index:] if p.exists()]
    return []


def _import_one(store: SessionStore, path: Path, only: Path | None, say: Notify) -> int | None:
    """The session the journal at `path` was imported as; None when it is another database's, still being written,
    empty (deleted), gone, or cannot be imported (said, and left in place). The database's errors are raised."""
    try:
        journal = read_journal(path)
    except JournalError as error:
        if path.exists():  # gone: another process imported it since the folder was read
            say(error.user_message())
        return None
    if journal.header.db != str(store.path.resolve()) or (path != only and _still_written(journal)):
        return None
    if not journal.events:  # the writer died before its first event: nothing to keep
        path.unlink(missing_ok=True)
        return None
    problem = _first_problem(journal)
    if problem is not None:  # damaged, or written by a newer Beamwise: never a reason to stop opening the store
        say(f"the run journal {path} was not imported: {problem}. It was left in place: a newer Beamwise may "
            "import it; otherwise delete it.")
        return None
    session_id = _replayed(store, journal, say)
    if session_id is not None:  # None: another process imported it while this one waited for the lock
        say(f"saved the run journal {path.name} into {store.path} as session {session_id} "
            f"({steps(_steps(journal))}).")
    return session_id


def _replayed(store: SessionStore, journal: Journal, say: Notify) -> int | None:
    """`replay(store, journal)`; a journal that cannot be imported is said, left in place, and None. Each event
    was read already (`_first_problem`): what fails here is the run they make, the folders, or Beamwise itself,
    and none of them stops the store from opening. A StoreError (the database's) is raised."""
    path = journal.path
    try:
        return replay(store, journal)
    except RowsRefused as error:  # the journal's rows, not the database: the next one may import
        say(f"the run journal {path} was not imported: {str(error).rstrip('.')}. It was left in place; delete "
            "it, or keep it for a report.")
    except StoreError:
        raise
    except OSError as error:  # its folder does not let it be renamed or deleted: importing it would repeat
        say(f"the run journal {path} was not imported: it cannot be moved ({error.strerror or error}). It was "
            "left in place; make its folder writable.")
    except (ValueError, KeyError) as error:  # events that do not make a run (out of order, a candidate never
        # generated): the recorder's and the tree's refusals; its transaction rolled back
        say(f"the run journal {path} was not imported: its events do not make a session this Beamwise can show "
            f"({type(error).__name__}: {str(error).rstrip('.')}). It was left in place; delete it, or keep it "
            "for a report.")
    except Exception as error:  # a fault in Beamwise, not the journal's: said as one, and the store still opens
        say(f"the run journal {path} was not imported: a fault in Beamwise stopped its import "
            f"({type(error).__name__}: {str(error).rstrip('.')}). It was left in place; keep it for a report.")
    return None


def _first_problem(journal: Journal) -> str | None:
    """Why the journal's first unreadable event cannot be imported, or None when every event can."""
    for number, (_, data) in enumerate(journal.events, 1):
        problem = event_problem(data)
        if problem is not None:
            return f"its event {number} is not one this Beamwise can show ({problem})"
    return None


def _still_written(journal: Journal) -> bool:
    header = journal.header
    return not journal.closed and (header.host != socket.gethostname() or alive_since(header.pid, header.created))


def _steps(journal: Journal) -> int:
    return sum(1 for _, data in journal.events if data.get("type") == ev.StepSelected.type)


def _settle_taken(store: SessionStore, target: str) -> None:
    """Journals an import renamed aside and did not delete: one whose import committed is deleted; one whose
    importer was killed before its commit (the session rolled back) is put back, to be imported. Decided under
    the write lock, when no import is between its rename and its commit."""
    taken = [p for folder in folders_for(store.path, data_folder()) if folder.is_dir()
             for p in sorted(folder.glob(f"*{SUFFIX}{TAKEN}")) if p.is_file()]
    if not taken:
        return
    try:
        with store.transaction() as conn:
            for path in taken:
                try:
                    journal = read_journal(path)
                except JournalError:
                    continue  # not readable as a journal: left as it is
                if journal.header.db != target or not path.exists():
                    continue
                counts = conn.execute("SELECT COUNT(e.session_id) FROM sessions s LEFT JOIN events e ON "
                                      "e.session_id = s.id WHERE s.created = ? GROUP BY s.id",
                                      (journal.header.created,)).fetchall()
                if any(count == len(journal.events) for (count,) in counts):  # its whole run is in: committed
                    path.unlink(missing_ok=True)
                else:
                    path.replace(path.with_name(path.name.removesuffix(TAKEN)))
    except (StoreError, OSError):
        pass  # busy, read-only or a folder that cannot be written: the next opening settles them


def replay(store: SessionStore, journal: Journal) -> int | None:
    """One transaction: the partial session the run wrote before the lock (if any) replaced by the whole run,
    and the journal deleted. None when the journal was gone once the transaction began: another process
    imported it (two processes that read it before either wrote would otherwise both have saved it).

    The journal is renamed aside inside the transaction, so the next importer, which waits for this one's
    lock, finds it gone; a transaction that fails puts it back."""
    aside = journal.path.with_name(journal.path.name + TAKEN)
    try:
        with store.transaction() as conn:
            if not journal.path.exists():
                return None
            session_id = _replay_rows(store, conn, journal)
            journal.path.replace(aside)
    except BaseException:
        if aside.exists() and not journal.path.exists():
            aside.replace(journal.path)
        raise
    aside.unlink(missing_ok=True)
    return session_id


def _replay_rows(store: SessionStore, conn, journal: Journal) -> int:
    """Inside `replay`'s transaction: write the journal's run as a session; returns its id."""
    header = journal.header
    now = [0.0]
    keep_id = None
    if header.session_id is not None:
        row = conn.execute("SELECT created FROM sessions WHERE id = ?", (header.session_id,)).fetchone()
        if row is not None and row[0] == header.created:
            keep_id = header.session_id
            for table in ("events", "steps", "candidates", "sessions"):
                column = "id" if table == "sessions" else "session_id"
                conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (keep_id,))
    previous = header.previous_id  # a follow-up: linked again, also when its partial row was replaced
    if previous is not None and conn.execute("SELECT 1 FROM sessions WHERE id = ?", (previous,)).fetchone() is None:
        previous = None  # the turn it followed was deleted meanwhile: it starts a conversation of its own
    if previous is not None and keep_id is not None and keep_id in _earlier_turns(conn, previous):
        raise ValueError(f"its session {keep_id} would follow session {previous}, a later turn of its own "
                         "conversation")
    recorder = SessionRecorder(store, title=header.title, created=header.created, session_id=keep_id,
                               clock=lambda: now[0], transaction=lambda: nullcontext(conn), previous=previous)
    for seconds, data in journal.events:
        now[0] = seconds
        recorder.write(ev.from_dict(data))
    recorder.close()
    assert recorder.session_id is not None
    return recorder.session_id


def _earlier_turns(conn, session_id: int) -> set[int]:
    """`session_id` and every turn it follows (a damaged database's loop ends where it closes)."""
    seen: set[int] = set()
    at: int | None = session_id
    while at is not None and at not in seen:
        seen.add(at)
        row = conn.execute("SELECT previous_id FROM sessions WHERE id = ?", (at,)).fetchone()
        at = row[0] if row is not None else None
    return seen
