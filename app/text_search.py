"""The sessions' search: a substring of the title, question or answer, whatever its case, script or form.

SQLite's LIKE folds only ASCII letters: 'äpfel' missed 'Äpfel', 'σοφια' missed 'ΣΟΦΙΑ', and an 'é' typed as one
character missed one stored as e and a combining accent. Each text is compared as `search_key` makes it. A text
all in ASCII is left to LIKE (folding it is lowering it); the keys of the others are kept, so only a search's
first pass over the store folds them."""

from __future__ import annotations

import unicodedata

NOT_ASCII = "*[^\x01-\x7f]*"  # a GLOB true for a text with a letter beyond ASCII (SQLite's GLOB reads UTF-8)
KEPT_BYTES = 32 << 20  # texts and keys kept, at most; past it the keys start again (a store of ~6,000 long answers)


def search_key(text: str) -> str:
    """`text` as the search compares it: NFKC (composed accents; full-width letters and digits as plain ones),
    case folded in every script (Ä/ä, Σ/σ/ς, ß/ss), and a Turkish 'İ' (i and a combining dot once folded) as 'i'."""
    return unicodedata.normalize("NFKC", text).casefold().replace("i\u0307", "i")


def needle(search: str) -> str:
    """The search box's text folded as the texts it is compared with."""
    return search_key(search.strip())


class FoldedTexts:
    """SQLite's `holds(CAST(column AS BLOB), wanted)`: 1 when the column's text holds `wanted` (`needle`, in UTF-8).
    Blobs, not text: SQLite hands UTF-8 bytes over without decoding each answer into a str."""

    def __init__(self) -> None:
        self._keys: dict[bytes, bytes] = {}
        self._kept = 0

    def holds(self, text: bytes | None, wanted: bytes) -> int:
        if text is None:
            return 0
        if text.isascii():  # NFKC leaves ASCII as it is, and folding it is lowering it
            return int(wanted in text.lower())
        key = self._keys.get(text)
        if key is None:
            key = search_key(text.decode("utf-8", "replace")).encode("utf-8")
            if self._kept > KEPT_BYTES:
                self._keys.clear()
                self._kept = 0
            self._keys[text] = key
            self._kept += len(text) + len(key)
        return int(wanted in key)
