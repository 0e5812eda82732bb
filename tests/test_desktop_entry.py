"""packaging/install-desktop-entry.sh in an unpacked folder of any name: the entry it writes starts that folder's
beamwise-gui and shows its icon, read as the Desktop Entry specification says; a failed run leaves no entry."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(os.name == "nt" or shutil.which("sh") is None, reason="the Linux menu entry")
NAMES = ["R&D apps", "a|b", "100%", "$HOME", 'say "hi"', "back`tick`", "back\\slash", "it's", "plain",
         "all & | % $ \" ` \\ ' of them"]
STRING_ESCAPES = {"s": " ", "n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def unescape_string(value: str) -> str:
    """A value of type string: `\\s \\n \\t \\r \\\\` (the specification's only escapes)."""
    return re.sub(r"\\(.)", lambda match: STRING_ESCAPES[match.group(1)], value)


def exec_arguments(value: str) -> list[str]:
    """The Exec key's arguments: the string escapes, then %% for %, then the quoting rules (inside double
    quotes a backslash escapes " ` $ \\)."""
    text, arguments, word, quoted, index = unescape_string(value), [], None, False, 0
    while index < len(text):
        char = text[index]
        if char == "%":
            assert text[index + 1] == "%", f"a field code in {text!r}"
            word, index = (word or "") + "%", index + 2
            continue
        if quoted and char == "\\":
            assert text[index + 1] in "\"`$\\", f"a bad escape in {text!r}"
            word, index = word + text[index + 1], index + 2
            continue
        if char == '"':
            quoted, word = not quoted, word or ""
        elif quoted and char in "`$":
            raise AssertionError(f"{char!r} unescaped inside quotes in {text!r}")
        elif char == " " and not quoted:
            if word is not None:
                arguments.append(word)
            word = None
        else:
            assert quoted or char not in "\"`$\\'><~|&;*?#()", f"{char!r} unquoted in {text!r}"
            word = (word or "") + char
        index += 1
    assert not quoted, f"an open quote in {text!r}"
    return [*arguments, *([word] if word is not None else [])]


def unpacked(tmp_path: Path, name: str) -> Path:
    """The folder as the tarball unpacks it, inside a folder called `name`."""
    app = tmp_path / name / "Beamwise"
    app.mkdir(parents=True)
    for file in ("install-desktop-entry.sh", "beamwise.desktop.in", "beamwise.png"):
        shutil.copy2(ROOT / "packaging" / file, app / file)
    return app


def install(app: Path, data: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(app / "install-desktop-entry.sh")], env=dict(os.environ, XDG_DATA_HOME=str(data)),
                          capture_output=True, text=True, timeout=60)


def entry(data: Path) -> dict[str, str]:
    lines = (data / "applications" / "beamwise.desktop").read_text(encoding="utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


@pytest.mark.parametrize("name", NAMES)
def test_any_folder_name_gives_an_entry_that_starts_it(tmp_path: Path, name: str) -> None:
    app = unpacked(tmp_path, name)
    result = install(app, tmp_path / "data")
    assert result.returncode == 0, result.stderr
    written = entry(tmp_path / "data")
    assert exec_arguments(written["Exec"]) == [str(app / "beamwise-gui")]
    assert unescape_string(written["Icon"]) == str(app / "beamwise.png")
    assert written["Name"] == "Beamwise" and written["Terminal"] == "false"
    assert sorted(os.listdir(tmp_path / "data" / "applications")) == ["beamwise.desktop"]  # no temporary file left


@pytest.mark.skipif(shutil.which("gio") is None, reason="GLib's gio reads and launches the entry")
@pytest.mark.parametrize("name", [name for name in NAMES if "%" not in name])  # GLib: see the script's note
def test_glib_launches_the_program_the_entry_names(tmp_path: Path, name: str) -> None:
    app = unpacked(tmp_path, name)
    started = tmp_path / "started"
    (app / "beamwise-gui").write_text(f'#!/bin/sh\nprintf "%s" "$0" > "{started}"\n', encoding="utf-8")
    (app / "beamwise-gui").chmod(0o755)
    assert install(app, tmp_path / "data").returncode == 0
    launched = subprocess.run(["gio", "launch", str(tmp_path / "data" / "applications" / "beamwise.desktop")],
                              capture_output=True, text=True, timeout=60)
    assert launched.returncode == 0, launched.stderr
    deadline = time.monotonic() + 30  # gio starts the program and returns; wait for it to write
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.read_text(encoding="utf-8") == str(app / "beamwise-gui")


def test_a_failed_run_leaves_no_entry_behind(tmp_path: Path) -> None:
    app = unpacked(tmp_path, "a|b")
    (app / "beamwise.desktop.in").unlink()  # the template missing: the script cannot write the entry
    result = install(app, tmp_path / "data")
    assert result.returncode != 0
    assert os.listdir(tmp_path / "data" / "applications") == []  # not even an empty beamwise.desktop


def test_a_failed_run_keeps_the_entry_already_there(tmp_path: Path) -> None:
    app = unpacked(tmp_path, "R&D apps")
    assert install(app, tmp_path / "data").returncode == 0
    before = (tmp_path / "data" / "applications" / "beamwise.desktop").read_bytes()
    (app / "beamwise.desktop.in").unlink()
    assert install(app, tmp_path / "data").returncode != 0
    assert (tmp_path / "data" / "applications" / "beamwise.desktop").read_bytes() == before
