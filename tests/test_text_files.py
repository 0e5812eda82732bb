"""Text a Windows user hands Beamwise: UTF-8 with the byte-order mark Notepad writes, and UTF-16 from
Windows PowerShell 5's `>`, for the question file, the problem set and a session export."""

from __future__ import annotations

import codecs
import json

import pytest

from app.export import export_session, import_session
from app.export.dump import session_dump
from app.options import UsageError
from app.problems import ProblemsError, load_problems
from app.question import read_question
from app.text_files import decode_text
from tests.test_export import sid, store  # noqa: F401 (fixtures)

TEXT = 'Wie viel ist 12·7? {"a": 1}\r\nzweite Zeile'
ENCODINGS = {"utf-8": b"", "utf-8-sig": b"", "utf-16": b"", "utf-16-le": codecs.BOM_UTF16_LE,
             "utf-16-be": codecs.BOM_UTF16_BE, "utf-32": b""}  # the -le/-be codecs write no mark: add it


def encoded(text: str, encoding: str) -> bytes:
    return ENCODINGS[encoding] + text.encode(encoding)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_each_marked_encoding_and_plain_utf8_decode_to_the_same_text(encoding):
    assert decode_text(encoded(TEXT, encoding)) == TEXT


@pytest.mark.parametrize("data", [TEXT.encode("utf-16-le"), TEXT.encode("latin-1"), b"\xff\xfe\x00"])
def test_text_that_is_no_utf8_and_has_no_mark_is_refused(data):
    with pytest.raises(UnicodeDecodeError):
        decode_text(data)


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_a_problem_set_and_a_question_file_saved_by_windows_tools_read_as_utf8_does(tmp_path, encoding):
    problems = tmp_path / "problems.jsonl"
    rows = [{"question": "What is 2+3?", "answer": "5"}, {"question": "Und 12·7?", "answer": "84"}]
    problems.write_bytes(encoded("\r\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\r\n", encoding))
    assert [(p.question, p.answer) for p in load_problems(problems)] == [("What is 2+3?", "5"), ("Und 12·7?", "84")]
    question = tmp_path / "question.txt"
    question.write_bytes(encoded("Und 12·7?", encoding))
    assert read_question(None, str(question)) == "Und 12·7?"


def test_an_unreadable_problem_set_says_to_save_it_as_utf8(tmp_path):
    problems = tmp_path / "problems.jsonl"
    problems.write_bytes('{"question": "Größe?", "answer": "1"}'.encode("cp1252"))
    with pytest.raises(ProblemsError, match="save it as UTF-8"):
        load_problems(problems)
    question = tmp_path / "question.txt"
    question.write_bytes("Größe?".encode("cp1252"))
    with pytest.raises(UsageError, match="save it as UTF-8"):
        read_question(None, str(question))


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_a_session_export_saved_again_by_a_windows_editor_imports_unchanged(store, sid, tmp_path,  # noqa: F811
                                                                             encoding):
    path = export_session(store, sid, "json", tmp_path / "session.json")
    path.write_bytes(encoded(path.read_text(encoding="utf-8").replace("\n", "\r\n"), encoding))
    assert session_dump(store, import_session(store, path)) == session_dump(store, sid)
