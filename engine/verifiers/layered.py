"""A verifier's decoder body run one layer at a time (what the layer-entropy exit needs).

Only Llama-style bodies (Llama, Mistral, Qwen2 and the like: `embed_tokens`, `layers`, `norm`,
`rotary_emb`) can be run this way; `LayeredBody.of` says why another body cannot. Each call does
what the body's own `forward` does, in the same order, so running every layer gives the same hidden
states and KV as `body(input_ids=...)` with the cache (engine/hf_compat.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

from engine.errors import LayersUnavailable
from engine.hf_compat import cache_kwargs

PARTS = ("embed_tokens", "layers", "norm", "rotary_emb")


@dataclass(frozen=True)
class Positions:
    """What every layer of one pass shares: the masks per attention type and the rotary embeddings."""

    masks: dict[str, torch.Tensor | None]
    rotary: tuple[torch.Tensor, torch.Tensor]
    ids: torch.Tensor  # [1, T] absolute positions of the new tokens


class LayeredBody:
    """`body` split into embedding, decoder layers and final norm, with the masks its forward would build."""

    def __init__(self, body: torch.nn.Module) -> None:
        self.body = body
        self.config = body.config
        self.count = len(body.layers)
        types = getattr(self.config, "layer_types", None)
        self.types = list(types) if types else ["full_attention"] * self.count

    @classmethod
    def of(cls, body: torch.nn.Module, what: str) -> LayeredBody:
        missing = [name for name in PARTS if not hasattr(body, name)]
        if missing:
            raise LayersUnavailable(
                f"the {what} verifier's model ({type(body).__name__}) cannot run layer by layer: "
                f"it has no {', '.join(missing)} (only Llama-, Mistral- and Qwen2-style bodies can)."
            )
        return cls(body)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:  # ids [B, T] -> hidden [B, T, H]
        return self.body.embed_tokens(ids)

    def positions(self, hidden: torch.Tensor, cache: DynamicCache, start: int) -> Positions:
        """Masks and rotary embeddings for `hidden` ([B, T, H]) written after `start` cached tokens."""
        ids = (torch.arange(hidden.shape[1], device=hidden.device) + start).unsqueeze(0)  # [1, T]
        args = {"config": self.config, "inputs_embeds": hidden, "attention_mask": None, "position_ids": ids}
        masks = {"full_attention": create_causal_mask(**args, **cache_kwargs(create_causal_mask, cache))}
        if "sliding_attention" in self.types:
            sliding = create_sliding_window_causal_mask
            masks["sliding_attention"] = sliding(**args, **cache_kwargs(sliding, cache))
        return Positions(masks, self.body.rotary_emb(hidden, position_ids=ids), ids)

    def layer(self, index: int, hidden: torch.Tensor, at: Positions, cache: DynamicCache) -> torch.Tensor:
        """Decoder layer `index` (0-based) on `hidden` [B, T, H]; appends its KV to `cache`."""
        return self.body.layers[index](
            hidden, attention_mask=at.masks[self.types[index]], position_embeddings=at.rotary,
            position_ids=at.ids, use_cache=True, **cache_kwargs(self.body.layers[index], cache),
        )

    def norm(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.body.norm(hidden)
