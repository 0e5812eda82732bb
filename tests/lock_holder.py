"""A pull lock held by another process, as a running `beamwise models pull` holds it: `held_elsewhere(target)`
starts one, waits until it says it holds the lock (no sleep), and ends it on leaving; `.kill()` ends it as a
kill -9 or a power cut does, so the OS lets go of the lock without the lock file being removed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOLD = """
import sys
from pathlib import Path
from app.pull_failures import CLI_WORDS
from app.pull_lock import pull_lock
with pull_lock(Path(sys.argv[1]), "tiny/llama", CLI_WORDS):
    print("held", flush=True)
    sys.stdin.readline()
"""


@contextmanager
def held_elsewhere(target: Path) -> Iterator[subprocess.Popen]:
    other = subprocess.Popen([sys.executable, "-c", HOLD, str(target)], cwd=ROOT, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline() == "held\n"
        yield other
    finally:
        other.stdin.close()  # it lets go as a finished pull does (where it was not killed)
        other.wait(30)
        other.stdout.close()
