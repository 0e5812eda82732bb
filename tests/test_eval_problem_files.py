"""Problem files as a new user hands them over: a JSON error's column, a compressed or binary file said for what it
is, and a large file read line by line with a word on stderr first."""

from __future__ import annotations

import gzip
import json
import zipfile

import pytest

from app import eval_cli
from app.cli import main
from app.problems import ProblemsError, load_problems
from tests.test_eval_cli import TINY, write

ROW = '{"question": "What is 2+3?", "answer": "5"}'


@pytest.mark.parametrize(("line", "said"), [
    ('{"question": "Q', "not JSON (Unterminated string starting at column 14); the file must be JSON Lines"),
    ('{"question": "Q?", "answer": 5} x', "not JSON (Extra data at column 33)"),
    ("{oops", "not JSON (Expecting property name enclosed in double quotes at column 2)"),
])  # fmt: skip
def test_a_line_that_is_not_json_names_its_column(tmp_path, line, said):
    """It said 'bad.jsonl:2: not JSON (Unterminated string starting at); ...': the sentence cut, no column."""
    with pytest.raises(ProblemsError) as error:
        load_problems(write(tmp_path, ROW, line))
    assert f"p.jsonl:2: {said}" in str(error.value)


@pytest.mark.parametrize(("pack", "what"), [
    (lambda text, path: path.write_bytes(gzip.compress(text.encode())), "gzip-compressed"),
    (lambda text, path: zipfile.ZipFile(path, "w").writestr("p.jsonl", text), "a zip archive"),
])  # fmt: skip
def test_a_compressed_problem_set_is_said_to_be_compressed(tmp_path, pack, what):
    """A .jsonl.gz was 'not UTF-8 (byte 0x8b; the file is in another encoding, such as Latin-1 ...)'."""
    path = tmp_path / "p.jsonl.gz"
    pack(f"{ROW}\n", path)
    with pytest.raises(ProblemsError) as error:
        load_problems(path)
    assert str(error.value) == (f"{path}: the file is {what}, not JSON Lines text; decompress it and give the .jsonl "
                                "file it holds.")


def test_a_file_with_a_nul_byte_is_said_to_be_binary(tmp_path):
    """UTF-16 without its byte-order mark (and any binary file) decoded as UTF-8 and failed as 'not JSON'."""
    path = tmp_path / "p.jsonl"
    path.write_bytes(f"{ROW}\n".encode() + f"{ROW}\n".encode("utf-16-le"))
    with pytest.raises(ProblemsError, match=r"p\.jsonl:2: a NUL byte: the file is binary \(or UTF-16 without its "
                       r"byte-order mark\), not JSON Lines text; give the problems as a \.jsonl file saved as UTF-8"):
        load_problems(path)


def test_utf16_with_its_mark_and_utf8_lines_keep_their_numbers(tmp_path):
    """What the file was read as before: PowerShell's UTF-16, and a lone CR or U+2028 ending a line as splitlines
    ends it (the numbers in every message count lines so)."""
    rows = [json.dumps({"question": f"Q{i}?", "answer": i}) for i in range(3)]
    path = tmp_path / "p.jsonl"
    path.write_bytes(("\r\n".join(rows) + "\r\n").encode("utf-16"))
    assert [(p.line, p.answer) for p in load_problems(path)] == [(1, "0"), (2, "1"), (3, "2")]
    path.write_bytes(f"\ufeff{rows[0]}\r{rows[1]}\n\n{rows[2]}".encode())
    assert [(p.line, p.answer) for p in load_problems(path)] == [(1, "0"), (2, "1"), (4, "2")]


def test_the_file_is_read_only_up_to_the_limit(tmp_path):
    """The whole file was read and decoded before --limit cut it: a Latin-1 byte far below refused the run."""
    path = tmp_path / "p.jsonl"
    path.write_bytes(f"{ROW}\n{ROW}\n".encode() + '{"question": "Café?", "answer": "1"}\n'.encode("latin-1"))
    assert [p.line for p in load_problems(path, limit=2)] == [1, 2]
    with pytest.raises(ProblemsError, match=r"p\.jsonl:3: not UTF-8 text \(byte 0xe9; "):
        load_problems(path)


def test_a_large_problem_set_is_said_before_it_is_read_and_ctrl_c_there_exits_130(tmp_path, capsys, monkeypatch):
    """2,000,000 lines (114 MB) were read for ~22 s before the model loaded, with nothing said."""
    path = write(tmp_path, *[ROW] * 50)
    monkeypatch.setattr(eval_cli, "LARGE_PROBLEMS", path.stat().st_size - 1)

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(eval_cli, "load_problems", interrupted)
    assert main(["eval", str(path), *TINY, "--no-save"]) == 130
    err = capsys.readouterr().err.splitlines()
    assert err == [f"beamwise: reading {path.stat().st_size / 1000:.1f} kB of problems from {path} ...",
                   "beamwise: interrupted"], err


def test_a_small_problem_set_is_read_without_a_word(tmp_path, capsys):
    assert main(["eval", str(write(tmp_path, ROW)), *TINY, "--no-save"]) == 0
    assert "of problems from" not in capsys.readouterr().err
