"""engine/hf_compat.py: the KV cache goes by the name each callable's signature has (`cache` from transformers
5.24 on, `past_key_values` before), so the same calls run, without a deprecation warning, on every 5.x release."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import torch
from transformers import DynamicCache

from engine.hf_compat import cache_kwargs, returned_cache


def new_style(input_ids=None, cache=None, **kwargs):
    return cache


def old_style(input_ids=None, past_key_values=None, **kwargs):
    return past_key_values


class NewModule(torch.nn.Module):
    def forward(self, input_ids=None, cache=None):
        return cache


def test_each_callable_gets_the_name_its_signature_has():
    marker = object()
    assert new_style(**cache_kwargs(new_style, marker)) is marker
    assert old_style(**cache_kwargs(old_style, marker)) is marker
    module = NewModule()
    assert cache_kwargs(module, marker) == {"cache": marker}
    assert cache_kwargs(functools.partial(module, kv_prefix=None), marker) == {"cache": marker}  # the search's call
    assert cache_kwargs(print, marker) == {"past_key_values": marker}  # no signature to read: the older name


def test_the_installed_transformers_takes_the_cache_under_the_name_chosen_without_a_warning(tiny):
    """Warnings are errors in this suite: a deprecated name would fail here (transformers 5.24 warns)."""
    ids = torch.tensor([tiny.encode_chat("What is 2+2?")])
    cache = DynamicCache(config=tiny.model.config)
    with torch.inference_mode():
        out = tiny.model(input_ids=ids, use_cache=True, **cache_kwargs(tiny.model, cache))
    assert returned_cache(out) is cache and cache.get_seq_length() == ids.shape[1]


def test_an_output_gives_its_cache_under_either_name():
    marker = object()
    assert returned_cache(SimpleNamespace(past_key_values=marker)) is marker
