"""Keeps the garbage collector's full passes short during a search: what is alive when a run starts is frozen
for the run, and thawed when it ends."""

from __future__ import annotations

import gc


def freeze_long_lived() -> None:
    """Move every object the collector tracks now into its permanent generation, out of every pass until `thaw`.

    A full collection walks every tracked object: with torch, transformers and the window loaded that
    is ~400,000, 200-500 ms holding the GIL. One falls due once a run has made a quarter as many new
    long-lived objects (a 32x4x40 search does), and the window froze for half a second mid-run.
    Frozen objects are still freed when their last reference goes; only a reference cycle among them
    waits, so the young generations are collected first (a few ms) and the run's end thaws them.
    """
    gc.collect(1)
    gc.freeze()


def thaw() -> None:
    """Put what `freeze_long_lived` froze back among what the collector walks, once a run is over: a cycle that
    became garbage meanwhile (a failed run's frames holding tensors, a model replaced) is then collected by the
    next full pass, at the latest the idle release's (engine.idle), not kept for the window's life."""
    gc.unfreeze()


def collect_all() -> None:
    """A full collection that reaches what `freeze_long_lived` froze as well, which stays frozen: a model replaced
    by a run's load was alive at the run's start, and a frozen reference cycle is never collected, so its weights
    stayed beside the next model's (on a GPU, two models at once)."""
    frozen = gc.get_freeze_count() > 0
    gc.unfreeze()
    gc.collect()
    if frozen:
        gc.freeze()
