"""Cascade attention: a shared prefix and each parent's history read once, plus each row's own padded suffix,
equals plain attention over the concatenated KV."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import engine.kv.attention as attention
from engine.hf_compat import cache_kwargs, returned_cache
from engine.kv.attention import ParentHistory, SharedPrefix, arena_cache, cascade_attention


@pytest.fixture(params=["widened", "bmm-float32-out"])
def products(request, monkeypatch):
    """How `engine.kv.attention.product` multiplies: operands widened to float32 (the CPU's way), or CUDA's batched
    product that writes float32 from bf16 operands (`torch.bmm(..., out_dtype=torch.float32)`, which the CPU lacks:
    stood in for by the same product of widened operands, so the reshapes around it are what is checked)."""
    calls = []
    if request.param == "bmm-float32-out":
        bmm = torch.bmm

        def float32_bmm(a, b, out_dtype=None):
            assert out_dtype == torch.float32 and a.dim() == b.dim() == 3, "a 3D product that writes float32"
            calls.append((tuple(a.shape), tuple(b.shape)))
            return bmm(a.float(), b.float())

        monkeypatch.setattr(attention, "_float32_products", lambda device, dtype: True)
        monkeypatch.setattr(torch, "bmm", float32_bmm)
    yield calls
    assert (len(calls) > 0) == (request.param == "bmm-float32-out")


@pytest.mark.parametrize("model", ["tiny", "tiny_qwen2", "tiny_opt"])
def test_prefix_in_place_and_padded_suffixes_match_whole_sequences(request, model):
    loaded = request.getfixturevalue(model)
    torch.manual_seed(0)
    prompt = torch.randint(3, 60, (1, 11))
    tails = [torch.randint(3, 60, (n,)) for n in (5, 2, 4)]  # rows of different lengths: left padding
    with torch.inference_mode():
        prefix_cache = returned_cache(loaded.model(input_ids=prompt, use_cache=True))
        prefix = SharedPrefix(tuple((layer.keys[0], layer.values[0]) for layer in prefix_cache.layers))
        width = max(len(t) for t in tails)
        L, H, D = len(prefix_cache.layers), prefix.layers[0][0].shape[0], prefix.layers[0][0].shape[-1]
        arena = torch.full((L, 2, len(tails), H, width + 1, D), float("nan"))
        mask = torch.zeros((len(tails), width), dtype=torch.long)
        for row, tail in enumerate(tails):  # each row's own KV, computed alone, placed right-aligned
            cache = returned_cache(loaded.model(input_ids=torch.cat([prompt[0], tail[:-1]])[None], use_cache=True))
            n = len(tail) - 1
            for i, layer in enumerate(cache.layers):
                arena[i, 0, row, :, width - n : width] = layer.keys[0, :, prompt.shape[1] :]
                arena[i, 1, row, :, width - n : width] = layer.values[0, :, prompt.shape[1] :]
                arena[i, :, row, :, : width - n] = 0.0
            mask[row, width - n :] = 1
        width_used = width - 1
        arena, mask = arena[..., 1:, :], mask[:, 1:]  # the longest row needs width - 1 columns
        cascade = arena_cache(loaded.model.config, arena.contiguous(), width_used)
        last = torch.tensor([[t[-1]] for t in tails])
        positions = torch.tensor([[prompt.shape[1] + len(t) - 1] for t in tails])
        out = loaded.model(
            input_ids=last,
            attention_mask=torch.cat([mask, torch.ones((len(tails), 1), dtype=torch.long)], 1),
            position_ids=positions,
            **cache_kwargs(loaded.model, cascade),
            kv_prefix=prefix,
        ).logits[:, -1]
        for row, tail in enumerate(tails):
            whole = loaded.model(input_ids=torch.cat([prompt[0], tail])[None]).logits[0, -1]
            torch.testing.assert_close(out[row], whole, atol=1e-4, rtol=0)


@pytest.mark.parametrize(("heads_q", "heads"), [(4, 2), (3, 3)], ids=["gqa", "mha"])
@pytest.mark.parametrize(
    ("family", "identity"),
    [([0, 0, 1, 1, 2, 2], True), ([0, 0, 0, 1, 2, 2], False), ([2, 0, 1, 0, 2, 0], False)],
    ids=["by-parent-even", "by-parent-uneven", "mixed"],
)
def test_three_levels_match_sdpa_over_the_concatenated_kv(heads_q, heads, family, identity, products):
    """Prefix read once, each parent's history read once by its rows (parents of different lengths,
    one with none, families of different sizes), each row's own left-padded suffix: one softmax over
    the three parts' scores, every row equals SDPA over prefix + its parent's history + its own tokens."""
    torch.manual_seed(1)
    dim, prefix_len, layer = 8, 7, SimpleNamespace(layer_idx=0)
    heights = [5, 0, 3]  # parent 1 has no history after the prefix
    own = [2, 1, 3, 1, 2, 1]  # each row's own tokens, the newest included
    # family: the parent of each row; identity: rows in parent order, as many per parent (no slot index)
    batch, width_p, width = len(family), max(heights), max(own)
    k_pre, v_pre = torch.randn(heads, prefix_len, dim), torch.randn(heads, prefix_len, dim)
    k_par, v_par = torch.randn(3, heads, width_p, dim), torch.randn(3, heads, width_p, dim)
    for g, h in enumerate(heights):  # padding columns hold anything finite: they are masked
        k_par[g, :, h:], v_par[g, :, h:] = 1e4, 1e4
    k_own, v_own = torch.randn(batch, heads, width, dim), torch.randn(batch, heads, width, dim)
    query = torch.randn(batch, heads_q, 1, dim)
    mask = torch.tensor([[c >= width - n for c in range(width)] for n in own])[:, None, None, :]  # [B, 1, 1, W]
    members = {g: [r for r, f in enumerate(family) if f == g] for g in range(3)}
    slots_per = max(len(m) for m in members.values())
    slots = torch.empty(batch, dtype=torch.long)
    for g, rows in members.items():
        for i, r in enumerate(rows):
            slots[r] = g * slots_per + i
    assert identity == (slots.tolist() == list(range(batch)) and 3 * slots_per == batch)
    parents = ParentHistory(
        ((k_par, v_par),),
        torch.arange(width_p)[None, :] < torch.tensor(heights)[:, None],
        None if identity else slots,
        slots_per,
    )
    out, _ = cascade_attention(
        layer, query, k_own, v_own, mask, kv_prefix=SharedPrefix(((k_pre, v_pre),), parents)
    )  # [B, 1, Hq, D]
    for r in range(batch):
        g, n = family[r], own[r]
        keys = torch.cat([k_pre, k_par[g, :, : heights[g]], k_own[r, :, width - n :]], dim=1)  # [H, S, D]
        values = torch.cat([v_pre, v_par[g, :, : heights[g]], v_own[r, :, width - n :]], dim=1)
        repeat = heads_q // heads
        want = F.scaled_dot_product_attention(
            query[r], keys.repeat_interleave(repeat, 0), values.repeat_interleave(repeat, 0)
        )  # [Hq, 1, D]
        torch.testing.assert_close(out[r, 0], want[:, 0], atol=1e-5, rtol=0)


def test_parents_without_a_shared_prefix(products):
    """No prefix common to every row (`layers` empty): the parent level and the rows' own tokens alone."""
    torch.manual_seed(2)
    heads, dim, layer = 2, 4, SimpleNamespace(layer_idx=0)
    k_par, v_par = torch.randn(2, heads, 3, dim), torch.randn(2, heads, 3, dim)
    k_own, v_own = torch.randn(4, heads, 1, dim), torch.randn(4, heads, 1, dim)
    query = torch.randn(4, heads, 1, dim)
    parents = ParentHistory(((k_par, v_par),), None, None, 2)
    out, _ = cascade_attention(layer, query, k_own, v_own, None, kv_prefix=SharedPrefix((), parents))
    for r in range(4):
        keys = torch.cat([k_par[r // 2], k_own[r]], dim=1)
        values = torch.cat([v_par[r // 2], v_own[r]], dim=1)
        want = F.scaled_dot_product_attention(query[r], keys, values)
        torch.testing.assert_close(out[r, 0], want[:, 0], atol=1e-5, rtol=0)


def test_parents_with_no_history_yet_are_not_read(products):
    """At a search's first step the parents have no tokens after the prompt (`[G, H, 0, D]`): that part is skipped,
    so no product has an empty dimension, and each row attends to the prefix and its own tokens."""
    torch.manual_seed(3)
    heads, dim, layer = 2, 4, SimpleNamespace(layer_idx=0)
    k_pre, v_pre = torch.randn(heads, 5, dim), torch.randn(heads, 5, dim)
    empty = torch.zeros(2, heads, 0, dim)
    k_own, v_own = torch.randn(4, heads, 1, dim), torch.randn(4, heads, 1, dim)
    query = torch.randn(4, heads, 1, dim)
    parents = ParentHistory(((empty, empty),), None, None, 2)
    out, _ = cascade_attention(layer, query, k_own, v_own, None, kv_prefix=SharedPrefix(((k_pre, v_pre),), parents))
    assert all(0 not in shape for pair in products for shape in pair), products
    for r in range(4):
        keys, values = torch.cat([k_pre, k_own[r]], dim=1), torch.cat([v_pre, v_own[r]], dim=1)
        want = F.scaled_dot_product_attention(query[r], keys, values)
        torch.testing.assert_close(out[r, 0], want[:, 0], atol=1e-5, rtol=0)
