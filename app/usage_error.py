"""The user's mistake on the command line, in a module of its own: app/options.py raises it and re-exports it, and
modules that app/options.py reaches (the pull's failures, through the models folder) import it from here."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad command-line input: printed as one line, exit status 2."""
