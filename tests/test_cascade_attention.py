"""Cascade attention: a shared prefix read once plus each row's own padded suffix equals plain attention."""

from __future__ import annotations

import pytest
import torch

from engine.kv.attention import SharedPrefix, arena_cache


@pytest.mark.parametrize("model", ["tiny", "tiny_qwen2", "tiny_opt"])
def test_prefix_in_place_and_padded_suffixes_match_whole_sequences(request, model):
    loaded = request.getfixturevalue(model)
    torch.manual_seed(0)
    prompt = torch.randint(3, 60, (1, 11))
    tails = [torch.randint(3, 60, (n,)) for n in (5, 2, 4)]  # rows of different lengths: left padding
    with torch.inference_mode():
        prefix_cache = loaded.model(input_ids=prompt, use_cache=True).past_key_values
        prefix = SharedPrefix(tuple((layer.keys[0], layer.values[0]) for layer in prefix_cache.layers))
        width = max(len(t) for t in tails)
        L, H, D = len(prefix_cache.layers), prefix.layers[0][0].shape[0], prefix.layers[0][0].shape[-1]
        arena = torch.full((L, 2, len(tails), H, width + 1, D), float("nan"))
        mask = torch.zeros((len(tails), width), dtype=torch.long)
        for row, tail in enumerate(tails):  # each row's own KV, computed alone, placed right-aligned
            cache = loaded.model(input_ids=torch.cat([prompt[0], tail[:-1]])[None], use_cache=True).past_key_values
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
            past_key_values=cascade,
            kv_prefix=prefix,
        ).logits[:, -1]
        for row, tail in enumerate(tails):
            whole = loaded.model(input_ids=torch.cat([prompt[0], tail])[None]).logits[0, -1]
            torch.testing.assert_close(out[row], whole, atol=1e-4, rtol=0)
