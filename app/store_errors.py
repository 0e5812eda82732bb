"""What can be wrong with the session database, each said in words that say what to do."""

from __future__ import annotations

from engine.errors import BeamwiseError


class StoreError(BeamwiseError):
    """The session database cannot be used as it is."""


class StoreLocked(StoreError):
    """Another Beamwise process holds the database's write lock for longer than the wait."""

    hint = ("Close the other program or Beamwise window, or wait for its run to finish, then try again; "
            "nothing was changed.")


class StoreReadOnly(StoreError):
    """The database can be read but not written (its folder or the file is read-only)."""

    hint = "Make the folder writable, or pass --db with a file in a folder you can write to."


class StoreFull(StoreError):
    """The disk (or the file system's quota) holding the database has no room for the rows."""

    hint = "Free some disk space (or pass --db with a file on another drive); nothing of this write was kept."


class StoreDamaged(StoreError):
    """The file is not a SQLite database, or its pages are malformed."""


class StoreUnreadable(StoreError):
    """The file is there but cannot be opened to be read (its permissions; on Windows, a program holding it open):
    not damage, so never moved aside."""

    hint = ("Check the file's permissions (your user must be able to read it), or close the program that holds it "
            "open, then try again.")


class NotADatabase(StoreError):
    """The file is no SQLite database at all (an export, notes): a wrong --db, not damage, so never moved aside."""

    hint = "Check the --db path: pass the session database, or a new file name to start one; this file was not changed."


class StoreTooNew(StoreError):
    """The database was written by a newer Beamwise with a schema this one does not know."""

    hint = "Update Beamwise, or pass --db with another file to keep using this version."


class RowsRefused(StoreError):
    """Rows that break a constraint of the schema (a repeated step, say): the data is at fault, not the file."""


class SessionNotFound(StoreError):
    """No session has this id."""

    hint = "Run `beamwise sessions list` to see the ids."
