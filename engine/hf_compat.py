"""The one place Beamwise follows a transformers rename: from 5.24 a model's KV cache argument is `cache`.

Earlier 5.x releases take `past_key_values`. 5.24 still takes that name, but warns that it goes in 5.40
(a FutureWarning naming the caller), and its outputs carry the cache as `cache`. Each callable is asked
which name its own signature has, so one code path runs on every 5.x release (the GPU machine has 5.17).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import torch


def cache_kwargs(target: torch.nn.Module | Callable, cache: object) -> dict[str, object]:
    """`{name: cache}` to call `target` with: a module (its forward; `generate` follows its model's forward),
    a partial of one, or a function such as transformers' mask builders."""
    while isinstance(target, functools.partial):
        target = target.func
    function = type(target).forward if isinstance(target, torch.nn.Module) else target
    name = _known_name(function) if inspect.isfunction(function) else _cache_name(function)
    return {name: cache}


def returned_cache(output) -> object:
    """The cache a model's output carries (`cache` from 5.24 on, `past_key_values` before)."""
    fields = getattr(type(output), "__dataclass_fields__", {})
    return output.cache if "cache" in fields else output.past_key_values


def _cache_name(function: Callable) -> str:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # a builtin or C function: the older name
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"


_known_name = functools.cache(_cache_name)  # for functions (a class's forward, a module's function): few and lasting
