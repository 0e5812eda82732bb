"""Keeps the garbage collector's full passes short during a search: what is alive when a run starts is frozen."""

from __future__ import annotations

import gc


def freeze_long_lived() -> None:
    """Move every object the collector tracks now into its permanent generation, out of every later pass.

    A full collection walks every tracked object: with torch, transformers and the window loaded that
    is ~400,000, 200-500 ms holding the GIL. One falls due once a run has made a quarter as many new
    long-lived objects (a 32x4x40 search does), and the window froze for half a second mid-run.
    Frozen objects are still freed when their last reference goes; only a reference cycle among them
    is never collected, so the young generations are collected first (a few ms) and the freeze is
    taken again at each run start rather than undone.
    """
    gc.collect(1)
    gc.freeze()
