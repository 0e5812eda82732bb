"""What a file given as a session database holds: SQLite data, whole or damaged (a damaged one is moved aside),
or something else (text, an export, binary data), which is never called damaged."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
SCHEMA_TEXT = b"CREATE TABLE"  # in the schema table's rows of every database with a table
SCHEMA_READ = 1 << 20  # bytes of a file without SQLite's header read at a time: page 1, then the schema's text


def foreign_file(path: Path) -> str | None:
    """What the file at `path` holds ("text", "binary data", ...) when it is no SQLite database at all (its first
    bytes are not SQLite's header, and no page 1 of one follows them), or None: a SQLite file (whole or damaged),
    an empty file (SQLite makes one a database), or no regular file (reading a FIFO would wait for a writer)."""
    if not path.is_file():
        return None
    try:
        with path.open("rb") as handle:
            head = handle.read(512)
            if SQLITE_HEADER.startswith(head[:16]) or damaged_header(head):  # also empty, or cut off in its header
                return None
            data = head + handle.read(SCHEMA_READ - len(head))
            if damaged_page_one(data) and holds_schema_text(data, handle):
                return None
    except OSError:  # missing or unreadable: SQLite says why when it opens it
        return None
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] in (b"{", b"["):
        return "JSON (a session export?)"
    if text[:1] == b"<":
        return "HTML or XML"
    if any(byte < 0x09 or 0x0E <= byte < 0x20 for byte in head):  # NUL and other controls decode as UTF-8
        return "binary data"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.start < len(head) - 3:  # not only a letter cut off at the end of the bytes read
            return "binary data"
    return "text"


def damaged_header(head: bytes) -> bool:
    """The first page of a SQLite database whose first 16 bytes were overwritten or wiped: the fixed bytes of its
    header that follow them (file format versions 1 or 2, payload fractions 64/32/32) are there, or the first
    100 bytes are all zero (a zeroed first page). A damaged database, to be moved aside, not another program's
    file (it was called 'binary data' or 'text', and then no command could move it aside)."""
    if len(head) >= 100 and not any(head[:100]):
        return True
    return len(head) >= 24 and head[18] in (1, 2) and head[19] in (1, 2) and head[21:24] == b"\x40\x20\x20"


def damaged_page_one(data: bytes) -> bool:
    """The start of a SQLite database whose whole file header (its first 100 bytes) was overwritten: page 1's
    b-tree header that follows it is whole (the page type of the schema table, interior 5 or leaf 13, at most 60
    fragmented bytes, and 1 or more cell pointers that end before the cell content and point into it). Random
    bytes, a PNG or a text file fail it; `holds_schema_text` tells the few that pass from a database."""
    if len(data) < 108 or data[100] not in (0x05, 0x0D) or data[107] > 60:
        return False
    cells = int.from_bytes(data[103:105], "big")
    content = int.from_bytes(data[105:107], "big") or 65536  # 0 stands for 65536 (a page of 64 KiB)
    start = 100 + (12 if data[100] == 0x05 else 8)
    end = start + 2 * cells
    if cells < 1 or end > content or end > len(data):
        return False
    return all(content <= int.from_bytes(data[i:i + 2], "big") for i in range(start, end, 2))


def holds_schema_text(data: bytes, rest: BinaryIO) -> bool:
    """Whether the file holds the schema's "CREATE TABLE" text: `data`, its first bytes, or what `rest` (the file,
    read on from there) still holds. A page 1 that is an interior page (its schema grew past one page) keeps the
    schema's rows on pages anywhere in the file, 3 MB into one whose tables were made after its data: the file is
    read SCHEMA_READ bytes at a time, never whole, each search overlapping the last by the text's length less one
    (a text across two reads)."""
    overlap = len(SCHEMA_TEXT) - 1
    kept = b""
    while data:
        joined = kept + data
        if SCHEMA_TEXT in joined:
            return True
        kept, data = joined[-overlap:], rest.read(SCHEMA_READ)
    return False
