"""Text files a user hands Beamwise (a question, a problem set, a session export): UTF-8, with or without the
byte-order mark Windows editors write, or UTF-16 or UTF-32 with their mark (Windows PowerShell 5's `>` writes
UTF-16)."""

from __future__ import annotations

import codecs
from pathlib import Path

_MARKED = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),  # before UTF-16: FF FE starts both
           (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
MARKS = tuple(mark for mark, _ in _MARKED)  # the byte-order marks read here


def decode_text(data: bytes) -> str:
    """`data` as text, without its byte-order mark; UnicodeDecodeError when it is none of these encodings."""
    for mark, encoding in _MARKED:
        if data.startswith(mark):
            return data.decode(encoding)
    return data.decode("utf-8-sig")


def read_text(path: Path) -> str:
    """The text of the file at `path` (OSError and UnicodeDecodeError as reading and decoding raise them)."""
    return decode_text(path.read_bytes())


def not_utf8(error: UnicodeDecodeError) -> str:
    """What a file that `decode_text` refused is, and what to do: "not UTF-8 text (byte 0xe4 at offset 118; ...);
    save it as UTF-8" (Python's own "'utf-8' codec can't decode byte 0xe4 in position 118: invalid continuation
    byte" says neither)."""
    data = error.object
    at = f"0x{data[error.start]:02x} at offset {error.start}" if error.start < len(data) else None
    return not_utf8_byte(at)


def not_utf8_byte(byte: str | int | None) -> str:
    """The words of every refusal of text that is not UTF-8 (a question, a problem set, a session export), `byte`
    the first bad one (a number, or said with where it is), None for a file cut short inside a letter."""
    said = "its end" if byte is None else f"byte 0x{byte:02x}" if isinstance(byte, int) else f"byte {byte}"
    return (f"not UTF-8 text ({said}; the file is in another encoding, such as Latin-1 or Windows-1252); "
            "save it as UTF-8")
