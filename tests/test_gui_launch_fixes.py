"""`beamwise gui --screenshot` refuses, before the window opens and before torch loads, what `run` and `sessions
export` refuse: a --model path that does not exist (in `run`'s words) and a screenshot in a folder that does not
exist (it made the folder tree) or cannot be written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from tests.test_gui_window import gui_args

ROOT = Path(__file__).resolve().parent.parent
# `beamwise gui ...` as the command runs it, then whether torch came and the window was built.
WATCHED = """
import json, sys
from app.gui import launch
built = []
real = launch._build_window
launch._build_window = lambda *a, **k: built.append(1) or real(*a, **k)
from app.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "torch": "torch" in sys.modules, "window": bool(built)}))
"""


def gui(tmp_path: Path, *args: str) -> tuple[dict, str]:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", BEAMWISE_DATA_DIR=str(tmp_path / "data"),
               BEAMWISE_CONFIG_DIR=str(tmp_path / "config"))
    done = subprocess.run([sys.executable, "-c", WATCHED, "gui", "--db", str(tmp_path / "s.db"), *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_a_missing_model_path_is_refused_before_the_window_in_runs_words(tmp_path, capsys):
    """It opened the window, loaded torch (~6 s), then said "Could not load the model" and "the run failed"."""
    from app.cli import main

    missing = str(tmp_path / "no-such-model")
    assert main(["run", "x", "--model", missing, "--no-save"]) == 2
    said_by_run = capsys.readouterr().err.strip()
    assert f"model path {missing} does not exist." in said_by_run
    shot = tmp_path / "x.png"
    seen, err = gui(tmp_path, "--model", missing, "--question", "x", "--screenshot", str(shot))
    assert seen == {"code": 2, "torch": False, "window": False}, err
    assert err.strip() == said_by_run
    assert not shot.exists() and not (tmp_path / "s.db").exists()


def test_a_missing_gguf_file_is_refused_before_the_window(tmp_path, capsys, monkeypatch):
    from app.gui import launch

    monkeypatch.setattr(launch, "_build_window", lambda *a, **k: pytest.fail("the window was built"))
    gguf = tmp_path / "model.Q4_K_M.gguf"
    assert launch.main(gui_args(tmp_path, "--model", str(gguf), "--question", "q")) == 2
    assert f"beamwise: error: GGUF file {gguf} does not exist. Pick the bundled model" in capsys.readouterr().err


def test_a_screenshot_in_a_folder_that_does_not_exist_is_refused_and_makes_no_folder(tmp_path):
    """It made the folder tree and exited 0: a typo in the path became new folders."""
    shot = tmp_path / "nodir" / "deeper" / "e.png"
    seen, err = gui(tmp_path, "--question", "x", "--screenshot", str(shot))
    assert seen == {"code": 2, "torch": False, "window": False}, err
    assert err == (f"beamwise: error: cannot save the screenshot to {shot}: the folder {shot.parent} does not "
                   "exist. Create the folder first or choose another one.\n")
    assert not (tmp_path / "nodir").exists()


def test_a_screenshot_in_a_folder_no_file_can_be_made_in_is_refused_before_the_window(tmp_path, capsys,
                                                                                      monkeypatch):
    """A read-only folder, also when the tests run as root (os.access says yes to root): as export tests it."""
    from app.gui import launch

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(launch, "_build_window", lambda *a, **k: pytest.fail("the window was built"))
    monkeypatch.setattr(launch.tempfile, "mkstemp", refuse)
    shot = tmp_path / "x.png"
    assert launch.main(gui_args(tmp_path, "--question", "q", "--screenshot", str(shot))) == 2
    assert (f"cannot save the screenshot to {shot}: {tmp_path} is not writable; choose a file in a folder you can "
            "write to.") in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_screenshot_over_a_file_already_there_is_not_refused(tmp_path):
    """A picture remade in place (docs/screenshots.py does it) is what --screenshot is for."""
    from app.gui.launch import screenshot_problem

    old = tmp_path / "old.png"
    old.write_bytes(b"picture")
    assert screenshot_problem(old) is None and old.read_bytes() == b"picture"
