"""How long a context fits: activations of a prefill chunk, the default chunk, and the longest prompt per method.

Analytic, from the model's config alone (no weights, no meta run per length). One candidate,
batch 1, the HeadInfer setting. Device bytes counted for a context of `S` tokens:

    standard   = weights + S * KV_token + act(S)                       (all KV on the device, one prefill call)
    layer-wise = weights + 2 * S * KV_layer + act(S)                   (two staging layers; host holds S * KV_token)
    head-wise  = weights + 2 * S * KV_head + act(c) + scores(c, S)     (two head buffers, chunks of c tokens)

with `act(n) = n * (4 * hidden + 2 * kv_dim + 3 * intermediate) * dtype` (hidden states, q/k/v,
the gated MLP; logits of the last position only) and `scores(c, S) = c * G * S * 8` (Beamwise's
head-wise attention materialises float32 scores and probabilities of one KV head's G query heads).
The offloading methods also need `S * KV_token` of host RAM. The chunk `c` is the largest power
of two up to MAX_CHUNK that fits.

A run's automatic prefill chunk (`default_chunk`) is sized to its KV budget, and on the emulated device (the
CPU) it is at most CPU_CHUNK: a Stop waits for the chunk being read, and 4,096 tokens took 27 s there.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PretrainedConfig

from engine.errors import format_bytes

MAX_CHUNK = 4096
MIN_CHUNK = 16
CPU_CHUNK = 256  # the emulated device's automatic chunk at most: about a second of the bundled model's prefill
CHUNK_SHARE = 4  # the default chunk's activations take at most a quarter of the KV budget
LIMIT = 1 << 34  # tokens: the search for the longest context stops here


@dataclass(frozen=True)
class ModelFacts:
    """What the context plan needs of a model, in bytes."""

    weights: int
    kv_token: int  # K and V of one token, every layer
    layers: int
    kv_heads: int
    query_per_kv: int  # G: query heads per KV head
    act_token: int  # activations of one prefill position
    context_window: int


def model_facts(config: PretrainedConfig, dtype_bytes: int, parameters: int) -> ModelFacts:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    intermediate = getattr(text, "intermediate_size", None) or getattr(text, "ffn_dim", 4 * text.hidden_size)
    act = (4 * text.hidden_size + 2 * kv_heads * head_dim + 3 * intermediate) * dtype_bytes
    return ModelFacts(
        weights=parameters * dtype_bytes,
        kv_token=2 * text.num_hidden_layers * kv_heads * head_dim * dtype_bytes,
        layers=text.num_hidden_layers,
        kv_heads=kv_heads,
        query_per_kv=heads // kv_heads,
        act_token=act,
        context_window=getattr(text, "max_position_embeddings", 0) or 0,
    )


def activation_token_bytes(config: PretrainedConfig, dtype_bytes: int) -> int:
    return model_facts(config, dtype_bytes, 0).act_token


def default_chunk(budget: int, act_token: int, *, emulated: bool = False) -> int:
    """The prefill chunk sized to the budget: a power of two whose activations take at most 1/CHUNK_SHARE of it.
    On the `emulated` device at most CPU_CHUNK: a Stop is checked between chunks, and a CPU reads 4,096 tokens
    of the bundled model in half a minute (on CUDA, in a fraction of a second); smaller chunks cost a CPU no
    speed (the attention's scores of one chunk are smaller)."""
    fit = max(1, budget // (CHUNK_SHARE * max(1, act_token)))
    chunk = 1 << (fit.bit_length() - 1)
    return max(MIN_CHUNK, min(CPU_CHUNK if emulated else MAX_CHUNK, chunk))


def prefill_reserve(prompt_tokens: int, kv_token: int, act_token: int, chunk: int) -> int:
    """Device bytes a prefill holds beside the KV pool, which an automatic budget leaves free: the prompt's KV
    twice (the model's cache, and its layers stacked to be written into the pool's blocks) and one chunk's
    activations while it runs."""
    return 2 * prompt_tokens * kv_token + min(chunk, prompt_tokens) * act_token


def standard_bytes(m: ModelFacts, tokens: int) -> int:
    return m.weights + tokens * m.kv_token + tokens * m.act_token


def layerwise_bytes(m: ModelFacts, tokens: int) -> int:
    return m.weights + 2 * tokens * (m.kv_token // m.layers) + tokens * m.act_token


def headwise_bytes(m: ModelFacts, tokens: int, chunk: int) -> int:
    head = m.kv_token // (m.layers * m.kv_heads)
    scores = chunk * m.query_per_kv * tokens * 8
    return m.weights + 2 * tokens * head + chunk * m.act_token + scores


def _longest(fits) -> int:
    """The largest S in [0, LIMIT] with fits(S) (fits is monotone: true up to a point)."""
    low, high = 0, LIMIT
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


@dataclass(frozen=True)
class MaxContext:
    method: str
    tokens: int
    chunk: int | None = None  # head-wise: the prefill chunk at that length


def max_context(m: ModelFacts, gpu_bytes: int, host_bytes: int) -> list[MaxContext]:
    """The longest context of each method on `gpu_bytes` of device memory and `host_bytes` of host RAM."""
    on_host = lambda s: s * m.kv_token <= host_bytes  # noqa: E731
    standard = _longest(lambda s: standard_bytes(m, s) <= gpu_bytes)
    layerwise = _longest(lambda s: on_host(s) and layerwise_bytes(m, s) <= gpu_bytes)
    chunks = [1 << i for i in range(MAX_CHUNK.bit_length() - 1, -1, -1)]

    def head_chunk(s: int) -> int | None:
        return next((c for c in chunks if headwise_bytes(m, s, c) <= gpu_bytes), None)

    headwise = _longest(lambda s: on_host(s) and head_chunk(s) is not None)
    return [
        MaxContext("standard", standard),
        MaxContext("layer-wise", layerwise),
        MaxContext("head-wise", headwise, head_chunk(headwise) if headwise else None),  # no context: no chunk
    ]


def why_no_context(m: ModelFacts, gpu_bytes: int, host_bytes: int, results: list[MaxContext]) -> str | None:
    """Why the methods of `results` at 0 tokens fit not even one (a bare 0 says nothing); None when each fits some.
    The weights come first: past the device memory, no method fits any context."""
    none = [r.method for r in results if r.tokens == 0]
    if not none:
        return None
    if m.weights >= gpu_bytes:
        return (f"the weights, {format_bytes(m.weights)}, do not fit the {format_bytes(gpu_bytes)} GPU, so no "
                "context does: every method keeps the weights on the GPU beside its KV")
    offloading = [method for method in none if method != "standard"]
    if offloading and host_bytes < m.kv_token:
        return (f"{' and '.join(offloading)} keep the KV in host RAM, and {format_bytes(host_bytes)} holds not one "
                f"token's KV ({format_bytes(m.kv_token)})")
    room = format_bytes(gpu_bytes - m.weights)
    return f"{' and '.join(none)}: the {room} the weights leave on the GPU holds not one token's KV and activations"
