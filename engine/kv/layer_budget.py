"""Eq. 1 of the layer-wise policy and the device memory it needs: resident layers, the paper's bytes,
the residency a step retries with after running out of memory, and the size of its device pool."""

from __future__ import annotations

STAGING_LAYERS = 2


def resident_layers(budget: int, layer_bytes: int, num_layers: int) -> int:
    """Eq. 1, with the staging layers held back when not every layer fits."""
    fit = budget // layer_bytes if layer_bytes else num_layers
    return num_layers if fit >= num_layers else max(0, fit - STAGING_LAYERS)


def paper_h2d_bytes(budget: int, rows: int, layer_token_bytes: int, num_layers: int, first: int, tokens: int) -> int:
    """Eq. 1-3 as the paper writes them (no staging held back), for KV lengths `first .. first + tokens - 1`."""
    total = 0
    for s in range(first, first + tokens):
        kv_layer = rows * s * layer_token_bytes
        fit = min(num_layers, budget // kv_layer) if kv_layer else num_layers
        total += (num_layers - fit) * kv_layer
    return total


def lowered_residency(resident: int, num_layers: int) -> int | None:
    """The resident layers a step retries with after running out of device memory: half as many, and
    at most L - 3 (a budget that does not hold every layer holds two staging layers beside the
    resident ones, so fewer than L - 2 resident is the first residency below all); None when no
    residency holds less than now."""
    target = min(resident // 2, num_layers - 1 - STAGING_LAYERS)
    return target if 0 <= target < resident else None


def staging_bytes(rows: int, tokens: int, layer_token_bytes: int) -> int:
    """The two staging layers of `rows` rows at `tokens` tokens: below this, no layer can stream."""
    return STAGING_LAYERS * rows * tokens * layer_token_bytes


def every_layer_bytes(rows: int, longest: int, num_layers: int, layer_token_bytes: int) -> int:
    """Every layer of every row at the longest length: no layer-wise budget needs more."""
    return num_layers * rows * longest * layer_token_bytes


def pool_overhead(budget: int, rows: int, first: int, longest: int, step_tokens: int, num_layers: int,
                  layer_token_bytes: int, slot_bytes: int) -> int:  # fmt: skip
    """Device bytes layer-wise holds beyond its Eq. 1 `budget` (at most `every_layer_bytes`), for steps
    of at most `rows` rows, KV of `first` tokens at the first step's start and at most `longest`:

    - Eq. 1 counts layers at the current length `s`, but their buffers hold the step's last token:
      at most `budget * step_tokens / s` more (s >= first), and `step_tokens` more tokens for each
      of at most L + 1 resident and staging layers;
    - while rows are re-selected one old layer sits beside the new ones: when every layer is
      resident at most `budget / L`, a layer of every row at the longest length at the most (with
      fewer resident it takes the staging layers' room, not yet taken);
    - each of these runs is rounded up to whole slots of the pool.
    """
    layers = num_layers + 1
    growth = min(layers * rows * step_tokens * layer_token_bytes, -(-budget * step_tokens // max(1, first)))
    selection = min(rows * longest * layer_token_bytes, -(-budget // num_layers))
    return growth + selection + (layers + STAGING_LAYERS) * slot_bytes
