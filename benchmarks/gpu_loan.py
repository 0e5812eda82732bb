"""One GPU loan, one command: the 64-candidate workload's rows in the order issue 9's targets need them, then
the CUDA tests, inside a deadline that leaves the device call time to spare; everything lands in --out.

    python3 -m benchmarks.gpu_loan --out "$OUT"                  # about 7 minutes on an H100
    python3 -m benchmarks.gpu_loan --out "$OUT" --seconds 300    # a shorter loan: later rows give way first
    python3 -m benchmarks.gpu_loan --out /tmp/loan --dry-run      # what it would run, on any machine

A task lent a GPU gets 15 minutes of device time, its start included, and one command may run 10: one call
of this script is the loan. Its steps, each inside what is left of `--seconds`:

1. checks, in seconds: CUDA is there, and what the ladder and the tests import (each one missing is named,
   with the wheels to carry; a package only the tests need leaves the ladder to run alone). The machine,
   torch and transformers are written to `loan.json`.
2. the ladder (`benchmarks.gpu_ladder w64`): in_device, lbs with every switch, then plain `generate` and
   transformers' offloaded cache, then `layerwise` and `lbs:inter_token`. Its time limit stops the row it
   overtakes, which keeps how long it ran as a bound (`gpu_targets` reads it), and later rows say they did
   not start. `w64.json` is rewritten after every row and `w64.log` holds its progress lines.
3. the CUDA tests (`pytest -m gpu`) in the time kept for them: `gpu-tests.log`.
4. the targets read off `w64.json`: `targets.md`.

`loan.json` says each step's command, exit status and seconds, rewritten after each step, so a call that
is cut off still brings back the steps it finished. Every file is directly under --out (the device tool
brings back up to 8 files, 2 folders deep).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.gpu_targets import EVERY_SWITCH

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = "w64"
POLICIES = ("in_device", EVERY_SWITCH, "layerwise", "lbs:inter_token")  # the targets' rows, the most telling first
BASELINES_AFTER = EVERY_SWITCH  # generate and the offloaded cache run before the two slow rows
TESTS = ("tests/test_gpu.py", "tests/test_verifier_budget.py")
NEEDED = ("torch", "transformers", "platformdirs")  # what the ladder imports: without one, nothing runs
TEST_NEEDS = ("sqlite_utils", "pytest")  # what the tests import besides: without one, the ladder runs alone
WHEELS = ("pip download --no-deps --only-binary=:all: -d .whl platformdirs sqlite-utils sqlite-fts4 "
          "click-default-group click python-dateutil six")  # sqlite_utils imports click and dateutil (six)
STOP_GRACE = 45.0  # past its time limit, the ladder is killed: a step in flight ends within this on an H100
IMPORTS = 20.0  # the ladder's time limit starts after its imports (torch, transformers: about 17 s there)


@dataclass
class Step:
    name: str
    command: list[str]
    seconds_allowed: float
    log: str  # the file under --out that holds its output
    status: int | None = None  # None: not run (dry run, or no time left); -9: killed at seconds_allowed
    seconds: float = 0.0
    note: str = ""


@dataclass
class Loan:
    out: Path
    seconds: float
    machine: dict = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)

    def save(self) -> None:
        data = {"seconds": self.seconds, "machine": self.machine, "steps": [asdict(s) for s in self.steps]}
        (self.out / "loan.json").write_text(json.dumps(data, indent=2), encoding="utf-8")


def machine_checks(import_module: Callable[[str], object] = importlib.import_module) -> tuple[dict, list[str]]:
    """What this machine is, and what is missing for the ladder (empty when it can run); what the tests miss
    is `machine["tests_missing"]` (they then do not run, and the ladder still does)."""
    missing, machine = [], {"python": sys.version.split()[0]}
    for name in (*NEEDED, *TEST_NEEDS):
        try:
            module = import_module(name)
        except ImportError as error:  # sqlite_utils without its own imports (dateutil, click) among them
            (missing if name in NEEDED else machine.setdefault("tests_missing", [])).append(f"{name} ({error})")
            continue
        machine[name] = getattr(module, "__version__", "?")
    if "torch" in machine:
        import torch

        if not torch.cuda.is_available():
            missing.append("a CUDA device (torch.cuda.is_available() is False); on a CPU use "
                           "`python -m benchmarks.gpu_ladder w64 --plan-only` for the bytes")  # fmt: skip
        else:
            free, total = torch.cuda.mem_get_info()
            machine |= {"device": torch.cuda.get_device_name(), "cuda": torch.version.cuda,
                        "free_bytes": free, "total_bytes": total}  # fmt: skip
    return machine, missing


def plan(out: Path, seconds: float, test_seconds: float) -> list[Step]:
    """The ladder and the tests, with the seconds each may take: the ladder's time limit leaves the tests'
    share and the grace a stopped row needs; the tests take what is left (at least their share)."""
    limit = max(seconds - test_seconds - STOP_GRACE - IMPORTS, 1.0)
    ladder = [sys.executable, "-m", "benchmarks.gpu_ladder", WORKLOAD, "--policies", ",".join(POLICIES),
              "--baselines-after", BASELINES_AFTER, "--json", str(out / f"{WORKLOAD}.json"),
              "--time-limit", f"{limit:.0f}"]  # fmt: skip
    tests = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
             "--continue-on-collection-errors", *TESTS]  # fmt: skip
    last = Step("tests", tests, seconds, "gpu-tests.log")  # capped by what is left when it starts
    return [Step("ladder", ladder, limit + IMPORTS + STOP_GRACE, f"{WORKLOAD}.log"), last]


def run_step(step: Step, log: Path, seconds_left: float) -> None:
    """Run `step` with its output in `log` (and echoed), killed at the smaller of its share and what is left."""
    allowed = min(step.seconds_allowed, seconds_left)
    if seconds_left < 5:
        step.note = f"not run: {seconds_left:.0f} s of the loan were left"
        return
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as sink, subprocess.Popen(
        step.command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=os.name == "posix",
    ) as process:  # fmt: skip
        echo = threading.Thread(target=_copy_lines, args=(process.stdout, sink), daemon=True)
        echo.start()
        try:
            process.wait(timeout=allowed)
        except subprocess.TimeoutExpired:
            step.note = f"killed after {allowed:.0f} s"
        finally:
            _kill(process)
        echo.join(timeout=5)
    step.status, step.seconds = process.returncode, time.monotonic() - started


def _kill(process: subprocess.Popen) -> None:
    """End the child and, on POSIX, every process it started (pytest's or torch's workers hold its output)."""
    if os.name == "posix":
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:  # the group has ended
            pass
    elif process.poll() is None:
        process.kill()
    process.wait()


def _copy_lines(source, sink) -> None:
    """The child's lines into `sink` and onto stdout until it closes its output."""
    for line in source:
        sink.write(line)
        sink.flush()
        print(line, end="", flush=True)


def targets(out: Path) -> str:
    """The targets' Markdown table read off the ladder's JSON, or why there is none."""
    from benchmarks.gpu_targets import load_runs, render, verdicts

    report = out / f"{WORKLOAD}.json"
    if not report.exists():
        return f"no {report.name}: the ladder wrote no row (see {WORKLOAD}.log)"
    try:
        return render(verdicts(load_runs([report])), markdown=True)
    except SystemExit as error:  # a file the ladder was killed while writing is refused in words
        return str(error)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for every file (the device tool's $OUT)")
    parser.add_argument("--seconds", type=float, default=420.0, help="the whole loan's deadline (default: 420)")
    parser.add_argument("--test-seconds", type=float, default=90.0, help="kept for the CUDA tests (default: 90)")
    parser.add_argument("--dry-run", action="store_true", help="print the steps and their seconds; run nothing")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.seconds < args.test_seconds + STOP_GRACE + IMPORTS + 60:
        parser.error(
            f"--seconds must leave the ladder a minute beside --test-seconds, its {IMPORTS:g} s of imports and "
            f"{STOP_GRACE:g} s of grace (at least {args.test_seconds + STOP_GRACE + IMPORTS + 60:g})."
        )
    args.out.mkdir(parents=True, exist_ok=True)
    loan = Loan(args.out, args.seconds, steps=plan(args.out, args.seconds, args.test_seconds))
    if args.dry_run:
        ladder, tests = loan.steps
        print(f"{ladder.name}, at most {ladder.seconds_allowed:.0f} s: {' '.join(ladder.command)}")
        print(f"{tests.name}, what is left (at least {args.test_seconds:.0f} s): {' '.join(tests.command)}")
        return 0
    loan.machine, missing = machine_checks()
    loan.save()
    print(f"gpu_loan: {json.dumps(loan.machine)}", flush=True)
    packages = [m for m in (*missing, *loan.machine.get("tests_missing", [])) if not m.startswith("a CUDA")]
    if packages:
        print(f"gpu_loan: carry the wheels ({WHEELS}) and install them first (BENCHMARKS.md, issue 9)", file=sys.stderr)
    if missing:
        print("gpu_loan: cannot run, missing: " + "; ".join(missing), file=sys.stderr)
        return 2
    for step in loan.steps:
        if step.name == "tests" and loan.machine.get("tests_missing"):
            step.note = "not run: missing " + "; ".join(loan.machine["tests_missing"])
            print(f"gpu_loan: the CUDA tests {step.note}", file=sys.stderr)
        else:
            run_step(step, args.out / step.log, args.seconds - (time.monotonic() - started))
        loan.save()
    table = targets(args.out)
    (args.out / "targets.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    print(
        f"gpu_loan: {time.monotonic() - started:.0f} s; "
        + ", ".join(f"{s.name} {'not run' if s.status is None else f'exit {s.status}'}" for s in loan.steps)
    )
    return 0 if all(s.status == 0 for s in loan.steps) else 1


if __name__ == "__main__":
    sys.exit(main())
