"""The one-folder app: `packaging/build.py` builds it, and the built program starts, finds the bundled model and
takes a screenshot of a run headless. Minutes long, so it runs only with `pytest -m packaging`."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.packaging
EXE = ".exe" if os.name == "nt" else ""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """dist/ of a fresh build (PyInstaller must be installed: pip install -e .[packaging])."""
    dist = tmp_path_factory.mktemp("dist")
    work = tmp_path_factory.mktemp("work")
    result = subprocess.run([sys.executable, str(ROOT / "packaging" / "build.py"), "--dist", str(dist),
                             "--work", str(work)], cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return dist


def frozen_env(home: Path) -> dict[str, str]:
    """A user with nothing yet: empty data and cache folders, no display, no network."""
    return dict(os.environ, QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                BEAMWISE_DATA_DIR=str(home / "data"), BEAMWISE_CACHE_DIR=str(home / "cache"),
                PYTHONPATH="")  # the frozen app must not lean on this checkout


def test_built_app_finds_the_bundled_model(built: Path, tmp_path: Path) -> None:
    program = built / "Beamwise" / f"beamwise{EXE}"
    result = subprocess.run([str(program), "models", "list"], cwd=tmp_path, env=frozen_env(tmp_path),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    bundled = next(line for line in result.stdout.splitlines() if line.startswith("SmolLM2-135M-Instruct"))
    assert "135M" in bundled and "generator" in bundled


def test_built_app_says_its_version_and_its_libraries(built: Path, tmp_path: Path) -> None:
    from app.version import version

    program = built / "Beamwise" / f"beamwise{EXE}"
    result = subprocess.run([str(program), "--version"], cwd=tmp_path, env=frozen_env(tmp_path),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"beamwise {version()} (torch {version('torch')}, transformers ")
    assert "not installed" not in result.stdout


def test_built_app_runs_and_takes_a_screenshot(built: Path, tmp_path: Path) -> None:
    from PySide6.QtGui import QImage

    shot = tmp_path / "shot.png"
    program = built / "Beamwise" / f"beamwise{EXE}"
    result = subprocess.run([str(program), "gui", "--question", "What is 2 + 3?", "--beams", "2", "--width", "2",
                             "--max-steps", "2", "--step-tokens", "8", "--screenshot", str(shot)],
                            cwd=tmp_path, env=frozen_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    image = QImage(str(shot))
    assert image.width() >= 1000 and image.height() >= 700
    assert (tmp_path / "cache").is_dir()  # the bundled model was converted from the copy inside the app


@pytest.mark.skipif(os.name == "nt", reason="the tarball is the Linux package")
def test_linux_tarball_has_the_app_and_its_desktop_entry(built: Path) -> None:
    tarball = next(built.glob("Beamwise-*-linux-*.tar.gz"))
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
    assert {"Beamwise/beamwise", "Beamwise/beamwise-gui", "Beamwise/beamwise.desktop.in",
            "Beamwise/install-desktop-entry.sh"} <= names
    assert any(n.endswith("SmolLM2-135M-Instruct.Q4_1.gguf") for n in names)


@pytest.mark.skipif(os.name == "nt", reason="desktop entries are the Linux menu")
def test_the_desktop_entry_starts_the_window_program(built: Path, tmp_path: Path) -> None:
    app = built / "Beamwise"
    subprocess.run(["sh", str(app / "install-desktop-entry.sh")], env=dict(os.environ, XDG_DATA_HOME=str(tmp_path)),
                   check=True, capture_output=True, timeout=60)
    entry = dict(line.split("=", 1) for line in (tmp_path / "applications" / "beamwise.desktop").read_text(
        encoding="utf-8").splitlines() if "=" in line)
    assert Path(entry["Exec"].strip('"')) == app.resolve() / "beamwise-gui" and Path(entry["Icon"]).is_file()
