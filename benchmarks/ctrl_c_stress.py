"""Ctrl+C at many moments of a command's start: how each run ended (130: "beamwise: interrupted"; -2: ended by
SIGINT after that line, which a shell also reports as 130; "abort": the process aborted; "traceback").

    python -m benchmarks.ctrl_c_stress --runs 24      # Ctrl+C 0.3 to 1.4 s after the interpreter's start

Before app/deferred_interrupt.py, a Ctrl+C inside torch's import (pybind11) aborted the process now and then.
"""

from __future__ import annotations

import argparse
import collections
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = ["-X", "importtime", "-m", "app.cli", "run", "What is 2+3?", "--model", "synthetic:tiny-llama", "--device",
           "cpu", "--no-save"]


def read_stderr(proc: subprocess.Popen[str], stderr: list[str]) -> tuple[threading.Event, threading.Thread]:
    """Set once the child's interpreter has imported `site`: before that, Python itself (not Beamwise) answers a
    Ctrl+C, with a traceback of its own start-up that no program can catch. `-X importtime` writes one stderr line
    per import, so the moment is seen without a hook in the command; the reader keeps every line for the test."""
    ready = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            stderr.append(line)
            if line.rstrip().endswith("| site"):
                ready.set()
        ready.set()  # the child ended (or never imported site): let the test see why

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return ready, reader


def one_run(delay: float) -> str:
    """How a run sent SIGINT `delay` seconds after its interpreter imported `site` ended."""
    proc = subprocess.Popen([sys.executable, *COMMAND], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    lines: list[str] = []
    ready, reader = read_stderr(proc, lines)
    ready.wait(60)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    code = proc.wait(120)
    reader.join(10)
    said = "".join(line for line in lines if not line.startswith("import time:"))
    if "terminate called" in said or code == -signal.SIGABRT:
        return "abort"
    return "traceback" if "Traceback" in said else str(code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=24)
    args = parser.parse_args(argv)
    ends = collections.Counter(one_run(0.3 + (i % 12) * 0.1) for i in range(args.runs))
    print(", ".join(f"{end}: {count}" for end, count in sorted(ends.items())))
    return 0 if not {"abort", "traceback"} & ends.keys() else 1


if __name__ == "__main__":
    sys.exit(main())
