"""What the Models list costs per model: the bundled GGUF's facts read twice in one process (the second read is the
cache's), and `models info NAME` and `models list` with that GGUF added to a fresh data folder, as processes.

    python -m benchmarks.model_facts [--tree PATH]

`--tree` runs another checkout's code with this Python (an older commit, to compare). Nothing is written outside a
temporary data folder.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FACTS = """
import time
from engine import bundled
from app.model_facts import facts_of
path = str(bundled.bundled_gguf_path())
t = time.perf_counter(); facts_of(path); first = time.perf_counter() - t
t = time.perf_counter(); facts_of(path); again = time.perf_counter() - t
print(f"{first:.3f} {again:.4f} {path}")
"""


def seconds(tree: Path, env: dict[str, str], *argv: str) -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "app.cli", *argv], cwd=tree, env=env, capture_output=True, check=False)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path.cwd(), help="the checkout to run (default: this one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        env = dict(os.environ, BEAMWISE_DATA_DIR=data, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        out = subprocess.run([sys.executable, "-c", FACTS], cwd=args.tree, env=env, capture_output=True, text=True,
                             check=True).stdout.split()
        print(f"facts of the bundled .gguf: first {float(out[0]):.2f} s, again {float(out[1]) * 1000:.1f} ms")
        subprocess.run([sys.executable, "-m", "app.cli", "models", "add", out[2]], cwd=args.tree, env=env,
                       capture_output=True, check=True)
        print(f"models info nope: {seconds(args.tree, env, 'models', 'info', 'nope'):.1f} s")
        print(f"models list:      {seconds(args.tree, env, 'models', 'list'):.1f} s")


if __name__ == "__main__":
    main()
