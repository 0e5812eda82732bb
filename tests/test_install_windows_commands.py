"""The Windows commands README.md and BENCHMARKS.md show run Beamwise with the .venv's Python.

`py -3.11 -m app.cli ...` runs the system Python 3.11 (the launcher with an explicit version ignores an active
venv), which has no torch; `py docs\\screenshots.py` the launcher's default unless the .venv is activated (the
README never says to). Only the set-up itself
(`py -3.11 packaging\\bootstrap.py`, which must run on a system Python) and making another venv (`py -3.11 -m venv`)
are the system Python's. And a text for PowerShell sets a variable the PowerShell way: cmd's `set X=...` there
is PowerShell's Set-Variable, which leaves the environment as it was."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BENCHMARKS = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")

# `py -3.11 -m MODULE` and `py [-3.11] SCRIPT.py`
LAUNCHER = re.compile(r"(?<![\w.\\/-])py(?: -\d(?:\.\d+)? (-m \S+)| (?:-\d(?:\.\d+)? )?(\S+\.py))")
THE_SYSTEM_PYTHONS = {"packaging\\bootstrap.py", "-m venv"}


def launched(text: str) -> list[str]:
    return [match.group(0) for match in LAUNCHER.finditer(text)
            if (match.group(1) or match.group(2)) not in THE_SYSTEM_PYTHONS]


def test_the_readme_runs_beamwise_code_with_the_venvs_python() -> None:
    assert launched(README) == []
    assert "py -3.11 packaging\\bootstrap.py run" in README  # the set-up command stays the system Python's


def test_benchmarks_runs_modules_with_the_venvs_python() -> None:
    assert [command for command in launched(BENCHMARKS) if " -m " in command] == []


def test_powershell_texts_set_variables_the_powershell_way() -> None:
    for paragraph in README.split("\n\n"):
        if "PowerShell" in paragraph:
            assert re.findall(r"`set \w+=", paragraph) == [], paragraph
