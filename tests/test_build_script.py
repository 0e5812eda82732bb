"""packaging/build.py's choices around PyInstaller (which never runs here): the installer each platform gets, an
absolute --dist for it, and packaging/beamwise.iss's own settings."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def build(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """packaging/build.py with PyInstaller and both installers replaced by stand-ins that record their folders."""
    spec = importlib.util.spec_from_file_location("beamwise_build", ROOT / "packaging" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.made = []

    def pyinstaller(dist: Path, work: Path) -> Path:
        return dist / "Beamwise"

    def installer(kind: str):
        return lambda app, dist: module.made.append((kind, app, dist))  # None: nothing to measure

    monkeypatch.setattr(module, "check_ready", lambda: None)
    monkeypatch.setattr(module, "pyinstaller", pyinstaller)
    monkeypatch.setattr(module, "linux_tarball", installer("tarball"))
    monkeypatch.setattr(module, "windows_installer", installer("setup.exe"))
    return module


def test_a_relative_dist_reaches_the_installer_as_an_absolute_path(build: ModuleType, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.platform", "linux")
    assert build.main(["--dist", "out", "--work", "scratch"]) == 0
    [(kind, app, dist)] = build.made
    assert kind == "tarball" and dist == tmp_path / "out" and app == tmp_path / "out" / "Beamwise"


@pytest.mark.parametrize(("platform", "kind"), [("linux", "tarball"), ("win32", "setup.exe"), ("darwin", None)])
def test_each_platform_gets_its_own_installer_and_macos_none(build: ModuleType, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture,
                                                             platform: str, kind: str | None) -> None:
    monkeypatch.setattr("sys.platform", platform)
    assert build.main(["--dist", str(tmp_path)]) == 0
    assert [made[0] for made in build.made] == ([kind] if kind else [])
    if kind is None:
        assert f"no installer is made on darwin: the app is the folder {tmp_path / 'Beamwise'}" in (
            capsys.readouterr().out)


def test_the_inno_setup_script_is_64_bit_only_and_its_example_uses_absolute_paths() -> None:
    script = (ROOT / "packaging" / "beamwise.iss").read_text(encoding="utf-8")
    settings = dict(line.split("=", 1) for line in script.splitlines() if re.match(r"^\w+=", line))
    assert settings["ArchitecturesAllowed"] == "x64compatible"
    assert settings["ArchitecturesInstallIn64BitMode"] == "x64compatible"
    example = next(line for line in script.splitlines() if line.startswith(";") and "iscc " in line)
    source, output = re.search(r"/DSourceDir=(\S+) /O(\S+)", example).groups()
    assert source.startswith("%CD%\\") and output.startswith("%CD%\\"), example  # iscc reads relative from packaging\
