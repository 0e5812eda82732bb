"""Before a search allocates anything: will its KV cache fit in this machine's memory?"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch

from engine.config import CacheConfig, SearchConfig
from engine.errors import SearchTooLarge
from engine.kv.attention import uses_cascade
from engine.kv.sizing import search_kv_bytes, within_context
from engine.search import prompt_ids
from engine.synthetic import free_memory_bytes

SHARE = 0.8  # of the free memory a search may plan to take (the model, Python and the window need the rest)


def needed_bytes(loaded, prompt_tokens: int, search: SearchConfig, cache: CacheConfig) -> int:
    """The whole search's KV at rest and working (every candidate, full length; with cascade attention a
    kept path's history once for its children): what the host must hold."""
    cascade = uses_cascade(loaded.model.config)
    return search_kv_bytes(prompt_tokens, search, cache, loaded.kv_shape.token_bytes(), cascade=cascade)


def check_memory(loaded, question: str, search: SearchConfig, cache: CacheConfig,
                 free: Callable[[], int | None] | None = None, history: Sequence[tuple[str, str]] = ()) -> None:
    """Raise SearchTooLarge (with the figure and the most beams that fit) when the search cannot fit in memory."""
    available = (free or (lambda: free_memory_bytes(torch.device("cpu"))))()
    if available is None:
        return  # this platform cannot say; the engine's own budget checks still apply
    prompt = len(prompt_ids(loaded.encode_chat, question, history))  # the run's own prompt: every turn
    search = within_context(search, prompt, loaded.context_length)
    need = needed_bytes(loaded, prompt, search, cache)
    limit = int(available * SHARE)
    if need <= limit:
        return
    beams = _most_beams(loaded, prompt, search, cache, limit)
    largest = (f"--beams {beams} with --width {search.width}" if beams else
               f"none: --beams 1 with --width {search.width} needs more; lower --width or --step-tokens")
    raise SearchTooLarge(need, available, largest, SHARE)


def _most_beams(loaded, prompt: int, search: SearchConfig, cache: CacheConfig, limit: int) -> int:
    low, high = 0, search.beams  # need(low) fits (0 trivially), need(high) does not
    while high - low > 1:
        mid = (low + high) // 2
        trial = dataclasses.replace(search, beams=mid)
        low, high = (mid, high) if needed_bytes(loaded, prompt, trial, cache) <= limit else (low, mid)
    return low
