"""How many CPU threads torch may use: set once by the entry points (`beamwise run|bench|gui`), never at import.

torch starts one OpenMP thread per core, and each parallel region ends at a barrier that waits
for all of them. When another process (or the window's own thread) takes one of those cores,
every small operation waits for the descheduled thread: the engine's many small per-step
operations slow down far more than a plain `generate` (BENCHMARKS.md, the busy machine). So
the pool is sized to the cores that are free now; `--threads N` or `BEAMWISE_THREADS=N` overrides the choice,
up to the usable cores (a count above them is lowered, and said to be).

The count also moves a seeded run's numbers: a batched decode's float sums split by thread, so 1 and 2
threads give logits about 1e-5 apart and, rarely, another sampled token. A run records its count
(engine/numerics.py); a rerun that must match gives the same count.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

ENV = "BEAMWISE_THREADS"


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    reason: str


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def choose_threads(env: dict[str, str] | None = None, cores: int | None = None,
                   load: float | None = None, reserve: int = 0, given: int | None = None) -> ThreadChoice:
    """`given` (the --threads option), else `BEAMWISE_THREADS`, else the usable cores less the ones other
    processes keep busy and the `reserve` this process needs for itself (the window's thread), at least 1."""
    if given is not None:
        if given < 1:
            raise ValueError(f"--threads must be 1 or more (got {given}).")
        return ThreadChoice(given, f"--threads {given}")
    env = dict(os.environ) if env is None else env
    cores = usable_cores() if cores is None else cores
    if env.get(ENV, "").strip():
        text = env[ENV].strip()
        if not text.isdigit() or int(text) < 1:
            raise ValueError(f"{ENV} must be a whole number of threads, 1 or more (got {text!r}).")
        return ThreadChoice(int(text), f"{ENV}={text}")
    if load is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    busy = min(cores - 1, int(load + 0.5) + reserve)  # runnable processes now (this one has not started yet)
    return ThreadChoice(max(1, cores - busy), f"{cores} cores, load {load:.1f}, {reserve} kept for the window")


def limit_threads(env: dict[str, str] | None = None, reserve: int = 0, given: int | None = None) -> ThreadChoice:
    """Apply `choose_threads` to torch's intra-op pool (through OMP_NUM_THREADS if torch has not loaded yet), at
    most one thread per usable core. A count given above them is lowered with a word: torch lowered `--threads 4`
    to 2 threads unsaid, and eval's JSON then said threads_chosen_by "--threads 4" beside numerics.threads 2."""
    choice = within_cores(choose_threads(env, reserve=reserve, given=given), usable_cores())
    if "torch" not in sys.modules:
        os.environ["OMP_NUM_THREADS"] = str(choice.threads)
        return choice
    import torch

    torch.set_num_threads(choice.threads)
    return choice


def within_cores(choice: ThreadChoice, cores: int) -> ThreadChoice:
    """`choice` lowered to `cores` (more threads than cores wait for each other at every barrier), with a line on
    stderr and a reason that say so."""
    if choice.threads <= cores:
        return choice
    print(f"beamwise: {choice.reason} is more than the {cores} usable core(s): using {cores} thread(s), so a "
          f"seeded run's numerics are those of --threads {cores}", file=sys.stderr)
    return ThreadChoice(cores, f"{choice.reason}, lowered to the {cores} usable core(s)")


def numerics_line(seed: int | None, facts: dict) -> str:
    """One line naming what an exact rerun of a seeded run must match (RunStarted.numerics)."""
    return (f"seed {seed}; torch {facts.get('torch')}, {facts.get('threads')} thread(s) ({facts.get('cpu')}), "
            f"{facts.get('device')} {facts.get('dtype')}: rerun with --seed {seed} --threads {facts.get('threads')} "
            "to repeat it exactly")
