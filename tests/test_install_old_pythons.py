"""`python3 packaging/bootstrap.py run` under a Python older than 3.11 says so in one line, as the README promises,
whichever Python it is: 2.7 and 3.0 to 3.7 failed with a SyntaxError (f-strings, `:=`) before the version check
could run. bootstrap.py now holds only that check, in syntax every Python from 2.7 on reads, and loads the set-up
(packaging/venv_setup.py) after it."""

from __future__ import annotations

import ast
import glob
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOTSTRAP = ROOT / "packaging" / "bootstrap.py"


def old_pythons() -> list[str]:
    """The interpreters older than 3.11 that pyenv holds here (none on most machines: the tests then skip)."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = []
    for python in sorted(glob.glob(os.path.join(root, "versions", "*", "bin", "python"))):
        version = Path(python).parents[1].name.split(".")
        if version[0].isdigit() and version[1].isdigit() and (int(version[0]), int(version[1])) < (3, 11):
            found.append(python)
    return found


def test_bootstrap_uses_no_syntax_newer_than_python_3_4() -> None:
    source = BOOTSTRAP.read_text(encoding="utf-8")
    tree = ast.parse(source, feature_version=(3, 4))  # refuses f-strings and `:=`
    annotated = [node for node in ast.walk(tree) if isinstance(node, ast.AnnAssign)
                 or (isinstance(node, ast.arg) and node.annotation is not None)
                 or (isinstance(node, ast.FunctionDef) and node.returns is not None)]
    assert annotated == []
    assert [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "__future__"] == []


@pytest.mark.parametrize("python", old_pythons() or [pytest.param(None, marks=pytest.mark.skip(
    reason="no Python older than 3.11 under ~/.pyenv/versions"))])
def test_an_old_python_is_refused_in_one_line(python: str, tmp_path: Path) -> None:
    version = Path(python).parents[1].name
    result = subprocess.run([python, str(BOOTSTRAP), "run", "--version"], capture_output=True, text=True,
                            cwd=tmp_path, timeout=60)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (f"bootstrap: Beamwise needs Python 3.11 or newer; this is {version}: run it with "
                             "python3.11 (Windows: py -3.11)\n")
