"""A yes/no question on the terminal, for the commands that delete (`sessions delete`, `models remove`)."""

from __future__ import annotations


def confirmed(question: str) -> bool:
    """Whether the user answers y to `question`; Ctrl+D (end of input; Ctrl+Z, Enter on Windows) is a no, as Enter
    is (it raised EOFError, a traceback)."""
    try:
        reply = input(question)
    except EOFError:
        print()  # the prompt's line ends before the answer is said
        return False
    return reply.strip().lower() in ("y", "yes")
