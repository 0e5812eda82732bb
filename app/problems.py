"""Problem sets for `beamwise eval`: JSON Lines of {"question": ..., "answer": ...}, checked line by line.

The answer may be GSM8K's worked solution ending in "#### N"; the expected answer is then N. A solution
with a \\boxed{} answer (MATH's style) expects the last box's content.
Every way a file can be wrong raises `ProblemsError` naming the file and line, which the CLI
prints as one line with exit status 2.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from app.options import UsageError
from app.text_files import MARKS, decode_text, not_utf8_byte
from engine.answers import extract_answer
from engine.blank_text import is_blank


class ProblemsError(UsageError):
    """A problems file that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Problem:
    line: int  # 1-based line in the file
    question: str
    answer: str  # the expected final answer (after "####" for GSM8K rows)


def expected_answer(raw: object) -> str:
    """The final answer of a row's "answer": GSM8K's text after '####', a MATH-style solution's last \\boxed{},
    else the value as text. A boxed answer kept whole ('\\boxed{5}') matched no model's answer, not even 5."""
    text = str(raw).strip()
    if "####" in text:
        text = text.rsplit("####", 1)[1].strip()
    elif "\\boxed" in text:
        text = extract_answer(text) or ""  # an empty box was the expected answer as written, matching nothing
    return text


HEAD_BYTES = 8192  # the start of a problems file, looked at for a compressor's mark or a NUL byte before any line
COMPRESSED = {rb"\x1f\x8b": "gzip-compressed", rb"PK\x03\x04": "a zip archive", rb"BZh[1-9]1AY&SY": "bzip2-compressed",
              rb"\xfd7zXZ\x00": "xz-compressed", rb"\x28\xb5\x2f\xfd": "zstd-compressed"}  # by the bytes they open with


def load_problems(path: str | Path, limit: int | None = None) -> list[Problem]:
    """The problems of `path` (the first `limit` when given); blank lines are skipped. The file is read line by
    line, so a large one is not held whole beside its problems, and reading stops at `limit`."""
    path = Path(path)
    if path.is_dir():  # reading it said "cannot read it as text ...; save it as UTF-8" (Windows: "Permission denied")
        raise ProblemsError(f"{path} is a folder; give the problems file (JSON Lines) itself.")
    problems = []
    try:
        with path.open("rb") as file:
            for number, line in _lines(path, file):
                if line.strip():
                    problems.append(_problem(path, number, line))
                if limit and len(problems) == limit:
                    break  # the lines past --limit are not read: a bad row there does not refuse the problems asked for
    except FileNotFoundError:
        raise ProblemsError(f"{path}: no such problems file.") from None
    except OSError as error:
        raise ProblemsError(f"{path}: cannot read it ({error.strerror}).") from None
    if not problems:
        raise ProblemsError(f"{path}: the file has no problems; write one JSON object per line "
                            'with "question" and "answer".')
    return problems


def _lines(path: Path, file: io.BufferedReader) -> Iterator[tuple[int, str]]:
    """Each line of `file` as (its 1-based number, its text), numbered as `str.splitlines` numbers the whole text.
    UTF-8 (a byte-order mark first or not) is decoded a line at a time; UTF-16 and UTF-32, which have their mark,
    whole. A compressed or binary file is refused before its first line, a line that is not UTF-8 at that line."""
    head = file.peek(HEAD_BYTES)[:HEAD_BYTES]  # peek: a pipe (`eval <(zcat p.jsonl.gz)`) cannot seek back
    if head.startswith(MARKS):  # PowerShell 5's `>`: its lines' ends are not the byte 0x0a
        try:
            yield from enumerate(decode_text(file.read()).splitlines(), 1)
        except UnicodeDecodeError as error:
            line = error.object[: error.start].count(b"\n") + 1
            raise ProblemsError(_not_utf8(path, line, error.object[error.start])) from None
        return
    _refuse_binary(path, head)
    number = 0
    for raw in file:  # up to and with each b"\n"; splitlines also ends a line at a lone \r (and U+2028 and the like)
        if b"\0" in raw:
            raise ProblemsError(_binary(path, number + 1))
        try:
            text = raw.decode("utf-8-sig" if number == 0 else "utf-8")
        except UnicodeDecodeError as error:
            raise ProblemsError(_not_utf8(path, number + 1, error.object[error.start])) from None
        for part in text.splitlines() or [""]:  # b"\n" alone is one blank line
            number += 1
            yield number, part


def _refuse_binary(path: Path, head: bytes) -> None:
    """A gzip (or other compressed) file, or one with a NUL byte, refused for what it is: a gzip file was said to
    be 'not UTF-8 (byte 0x8b; the file is in another encoding, such as Latin-1 ...)'."""
    what = next((what for magic, what in COMPRESSED.items() if re.match(magic, head)), None)
    if what is not None:
        raise ProblemsError(f"{path}: the file is {what}, not JSON Lines text; decompress it and give the .jsonl "
                            "file it holds.")
    if b"\0" in head:
        raise ProblemsError(_binary(path, head[: head.index(b"\0")].count(b"\n") + 1))


def _binary(path: Path, line: int) -> str:
    """No text a user writes holds a NUL byte; UTF-16 without its byte-order mark does, at every other byte."""
    return (f"{path}:{line}: a NUL byte: the file is binary (or UTF-16 without its byte-order mark), not JSON Lines "
            "text; give the problems as a .jsonl file saved as UTF-8.")


def _not_utf8(path: Path, line: int, byte: int) -> str:
    """Where the first byte that is not UTF-8 is: a Latin-1 'é' deep in a long file was 'position 48213'."""
    return f"{path}:{line}: {not_utf8_byte(byte)}."


def _kind_problem(question: object, answer: object) -> str | None:
    """A question is text; an answer is text or a finite number. Anything else would be compared as its
    Python spelling ('nan', "['4']"), which no model's answer can ever match."""
    if not isinstance(question, str):
        return f'the "question" must be text, got {type(question).__name__}.'
    if isinstance(answer, list):  # the reader compares an answer of several numbers written as text
        return 'the "answer" must be text or a number, got a list; write several numbers as text: "(2, 5)".'
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        return f'the "answer" must be text or a number, got {type(answer).__name__}.'
    if isinstance(answer, float) and not math.isfinite(answer):
        return f'the "answer" {answer} is not a finite number; write the expected answer.'
    return None


def _keys_of(row: dict) -> str:
    """The row's other keys, where the user may see what to rename (MATH's 'problem' and 'solution', 'Question')."""
    others = [str(k) for k in row if k not in ("question", "answer")]
    return f" (its other keys: {', '.join(others[:6])})" if others else ""


def _problem(path: Path, number: int, line: str) -> Problem:
    where = f"{path}:{number}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        said = error.msg.removesuffix(" at")  # "Unterminated string starting at", which the column ends
        raise ProblemsError(f"{where}: not JSON ({said} at column {error.colno}); the file must be JSON Lines, "
                            "one object per line.") from None
    if isinstance(row, list):  # a .json file of one array of problems: "got list" did not say what to write instead
        raise ProblemsError(f'{where}: a JSON array, not an object; the file must be JSON Lines, one '
                            '{"question": ..., "answer": ...} object per line.')
    if not isinstance(row, dict):
        raise ProblemsError(f'{where}: expected an object with "question" and "answer", got {type(row).__name__}.')
    missing = [k for k in ("question", "answer") if row.get(k) is None or is_blank(str(row[k]))]  # 0 is an answer
    if missing:
        raise ProblemsError(f"{where}: the row has no {' and no '.join(missing)}{_keys_of(row)}.")
    wrong = _kind_problem(row["question"], row["answer"])
    if wrong:
        raise ProblemsError(f"{where}: {wrong}")
    answer = expected_answer(row["answer"])
    if not answer:
        raise ProblemsError(f'{where}: the answer is empty after "####" or in its \\boxed{{}}.')
    return Problem(number, str(row["question"]).strip(), answer)
