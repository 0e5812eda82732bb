"""Seconds from a Ctrl+C to the exit of `beamwise run` while the bundled model reads a long question (its prefill):
the run is started in a child process, interrupted 1 s after its search begins, and timed to its exit.

    python -m benchmarks.stop_latency [--tree PATH] [--prefill-chunk N] [--repeat 2] [--sentences 180]

`--tree` runs another checkout's code with this Python (an older commit, to compare); the exit time includes the
child's own teardown (~0.8 s on a 2-core machine)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SENTENCE = "The cat sat on the mat. "  # 180 of them: 1,308 prompt tokens on the bundled model; 730: 5,308


def one(tree: Path, chunk: int | None, sentences: int = 180) -> tuple[int, float, str]:
    """The exit status, the seconds from the Ctrl+C to the exit, and the child's last line on stderr."""
    cmd = [sys.executable, "-m", "app.cli", "run", SENTENCE * sentences, "--no-save", "--no-prefix-cache",
           "--beams", "2", "--width", "2", "--max-steps", "1", "--step-tokens", "8", "--threads", "1",
           *(["--prefill-chunk", str(chunk)] if chunk else [])]
    with tempfile.TemporaryDirectory() as data:
        child = subprocess.Popen(cmd, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=dict(os.environ, BEAMWISE_DATA_DIR=data))
        for line in child.stdout:  # the model is loaded and the search begins after the line with the seed
            if line.startswith("seed"):
                break
        time.sleep(1.0)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=600)
        lines = err.strip().splitlines()
        return child.returncode, time.monotonic() - sent, lines[-1] if lines else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=Path.cwd(), help="the checkout to run (default: this one)")
    parser.add_argument("--prefill-chunk", type=int, default=None, help="--prefill-chunk of the run (default: auto)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--sentences", type=int, default=180, help="the question's length (730: 5,308 tokens)")
    args = parser.parse_args()
    for _ in range(args.repeat):
        code, seconds, last = one(args.tree, args.prefill_chunk, args.sentences)
        print(f"exit {code} {seconds:.2f} s after Ctrl+C; {last}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
