"""Ctrl+C at any moment of a `beamwise` command ends it with one line and status 130, never a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.ctrl_c_stress import read_stderr

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(os.name == "nt", reason="SIGINT to a child process is POSIX")
@pytest.mark.parametrize("delay", [0.05, 0.1, 0.2, 0.4])
def test_ctrl_c_while_the_command_loads_exits_130_without_a_traceback(tmp_path, delay):
    """The first ~0.3 s of a run import sqlite_utils, numpy, then torch and transformers; a Ctrl+C there printed
    a Python traceback where a later one says "beamwise: interrupted" and exits 130.

    CPython (3.11) ends the process by SIGINT itself, after the same one line, when the Ctrl+C landed in code run
    by `exec` of a string (dataclasses builds its methods so) even though Beamwise caught it; a shell reports that
    as status 130 too, so both are taken."""
    command = [sys.executable, "-X", "importtime", "-m", "app.cli", "run", "What is 2+3?", "--model",
               "synthetic:tiny-llama", "--device", "cpu", "--no-save", "--db", str(tmp_path / "s.db")]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr: list[str] = []
    ready, reader = read_stderr(proc, stderr)
    try:
        assert ready.wait(timeout=60)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        reader.join(timeout=30)  # it has read to the end: the last lines are in `stderr`
        proc.stderr.close()
    said = "".join(line for line in stderr if not line.startswith("import time:"))
    assert "Traceback" not in said and code in (130, -signal.SIGINT), said
    last = said.strip().splitlines()[-1]  # where it landed (the imports, the engine's, the load) says it
    assert last.startswith("beamwise: interrupted") and last.endswith("nothing was recorded"), said
