"""Cascade attention in bf16: its scores were rounded to bf16 before they were widened.

`_prefix_part`, `_parent_part` and `_suffix_part` computed `torch.matmul(q, k.T).float() * scale`: with bf16 q and
k the product comes out of the matmul in bf16 (8 bits of mantissa) and only then became float32. SDPA (the path of
lbs:inter_token and layerwise, and the flash and memory-efficient kernels on CUDA) keeps scores in float32 up to
the softmax. Where scores reach ~10 (trained models' attention logits do; the synthetic models' random weights do
not), in_device's and lbs's attention output was 5-6x further from exact attention than SDPA's on the same bf16
inputs. The CPU's float32 tests could not see it. The product is in float32 now (engine/kv/attention.py `_scores`).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from engine.kv.attention import SharedPrefix, cascade_attention

B, HQ, H, D, P, S = 8, 8, 4, 128, 512, 33  # grouped queries (2 per KV head), a 512-token prefix, 33 own tokens


def exact(q, k, v, scale):
    """Attention in float64 on the bf16 inputs: [B, Hq, 1, D]."""
    q, k, v = q.double(), k.double().repeat_interleave(HQ // H, 1), v.double().repeat_interleave(HQ // H, 1)
    return torch.softmax(q @ k.transpose(-1, -2) * scale, -1) @ v


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cascade_attention_in_bf16_is_as_close_to_exact_attention_as_sdpa(seed):
    generator = torch.Generator().manual_seed(seed)
    spread = 6.0 / D**0.25  # scaled scores up to ~15, as a trained model's
    randn = lambda *shape: torch.randn(*shape, generator=generator)  # noqa: E731
    q = (randn(B, HQ, 1, D) * spread).bfloat16()
    prefix_k, prefix_v = (randn(H, P, D) * spread).bfloat16(), randn(H, P, D).bfloat16()
    own_k, own_v = (randn(B, H, S, D) * spread).bfloat16(), randn(B, H, S, D).bfloat16()
    scale = 1 / math.sqrt(D)
    keys = torch.cat([prefix_k.expand(B, H, P, D), own_k], 2)
    values = torch.cat([prefix_v.expand(B, H, P, D), own_v], 2)
    truth = exact(q, keys, values, scale)

    module = SimpleNamespace(layer_idx=0)
    cascade, _ = cascade_attention(module, q, own_k, own_v, None, scaling=scale,
                                   kv_prefix=SharedPrefix(((prefix_k, prefix_v),)))  # [B, 1, Hq, D]
    cascade = cascade.transpose(1, 2)  # [B, Hq, 1, D], bf16 as the model gets it
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, keys.repeat_interleave(HQ // H, 1),
                                                            values.repeat_interleave(HQ // H, 1), scale=scale)
    cascade_error = (cascade.double() - truth).abs().mean().item()
    sdpa_error = (sdpa.double() - truth).abs().mean().item()
    assert cascade_error <= 2 * sdpa_error, (
        f"cascade attention's mean error {cascade_error:.2e} is {cascade_error / sdpa_error:.1f}x SDPA's "
        f"{sdpa_error:.2e} on the same bf16 inputs"
    )
