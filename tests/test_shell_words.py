"""The command lines Beamwise prints to run again are quoted for the system's shells: POSIX quotes were kept as part
of a Windows path by cmd.exe (`--db 'C:\\Users\\me\\my.db'`), so the printed follow-up failed there."""

from __future__ import annotations

import argparse

import pytest

import app.shell_words
from app.follow_up import again_options
from app.shell_words import quoted


@pytest.mark.parametrize(("word", "windows", "posix"), [
    (r"C:\Users\me\my.db", r"C:\Users\me\my.db", r"'C:\Users\me\my.db'"),
    (r"C:\Users\me\my sessions.db", r'"C:\Users\me\my sessions.db"', r"'C:\Users\me\my sessions.db'"),
    ("synthetic:tiny-llama", "synthetic:tiny-llama", "synthetic:tiny-llama"),
    ('say "hi"', '"say ""hi"""', "'say \"hi\"'"),
    ("", '""', "''"),
    ("a,b", '"a,b"', "a,b"),  # PowerShell passes a,b on as two words
])
def test_a_word_is_quoted_for_each_systems_shells(word, windows, posix):
    assert quoted(word, windows=True) == windows
    assert quoted(word, windows=False) == posix


def test_the_follow_up_line_on_windows_uses_double_quotes(monkeypatch):
    monkeypatch.setattr(app.shell_words, "ON_WINDOWS", True)
    args = argparse.Namespace(db=r"C:\Users\me\my sessions.db", model=r"D:\models\Qwen 7B", backend="local")
    assert again_options(args) == r' --db "C:\Users\me\my sessions.db" --model "D:\models\Qwen 7B"'
