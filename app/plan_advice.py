"""What a red plan tells a person to change when the emulated GPU's search does not fit in free host memory: the
search's size where its KV is what overflows, the weights' number format or the model where the weights are."""

from __future__ import annotations

from typing import Protocol

import app.formatting as fmt
from app.model_facts import ModelFacts
from engine.synthetic import WEIGHTS_SHARE  # the run refuses weights past this share of the memory free


class MemoryPlan(Protocol):
    """What is read here of app/planner.py's MemoryPlan (planner imports this module: no import back)."""

    memory_bytes: int | None
    emulated: bool
    generator: ModelFacts
    weights_bytes: int
    host_verifier_weights_bytes: int
    generator_kv_bytes: int
    verifier_kv_bytes: int
    activation_bytes: int


NARROW_BYTES = 2  # bfloat16, the narrowest dtype the engine loads in (engine.config.DTYPES)


def host_memory_refusal(p: MemoryPlan) -> str | None:
    """Why the emulated search cannot run in the host memory free, with what would make it fit; None when it fits.
    Fewer beams shrink only the KV: where the weights alone take the memory (or more of it than the run loads
    weights into: `WEIGHTS_SHARE`), the run's own advice is told instead (bfloat16 where the search fits in it, or
    a smaller model)."""
    memory = p.memory_bytes
    if memory is None or not p.emulated:
        return None
    kv = p.generator_kv_bytes + p.verifier_kv_bytes
    weights = p.weights_bytes + p.host_verifier_weights_bytes  # the emulated GPU's memory is the host's too
    need = weights + kv + p.activation_bytes
    checked = not p.generator.source.lower().endswith(".gguf")  # the run checks a GGUF file's weights nowhere
    refused = checked and p.generator.weights_bytes > WEIGHTS_SHARE * memory
    if need <= memory and not refused:
        return None
    narrow = _narrow_need(p, kv)
    dtype = "" if narrow is None or narrow > memory or narrow_weights(p) > WEIGHTS_SHARE * memory else \
        f"load the weights in bfloat16 (--dtype bfloat16: about {fmt.size(narrow)} in all)"
    smaller = f"{dtype + ' or ' if dtype else ''}pick a smaller model."
    if need <= memory:  # it would fit, but the run refuses weights that leave the rest of the machine no room
        return (f"Its weights take {fmt.size(p.generator.weights_bytes)}, more than {WEIGHTS_SHARE:.0%} of the "
                f"{fmt.size(memory)} of memory free, which the run refuses: {smaller}")
    said = f"This search needs about {fmt.size(need)}, more than the {fmt.size(memory)} of memory free"
    if refused or weights + p.activation_bytes > memory:  # nothing the search's settings hold would fit
        return f"{said}, and its weights alone take {fmt.size(weights)}, so fewer beams cannot help: {smaller}"
    if dtype and 2 * weights > need:  # the weights are most of it: narrower weights fit it too
        return f"{said}: lower the beams, the width or the steps, or {dtype}."
    return f"{said}: lower the beams, the width or the steps."


def narrow_weights(p: MemoryPlan) -> int:
    """The generator's weights in bfloat16 (as they are where they are in it already)."""
    return p.generator.weights_bytes * NARROW_BYTES // max(p.generator.kv.dtype_bytes, NARROW_BYTES)


def _narrow_need(p: MemoryPlan, kv: int) -> int | None:
    """The search's need with its weights and KV in bfloat16 (the activations, and a PRM on the CPU in float32, as
    they are: an upper bound), or None when they are in it already."""
    wide = p.generator.kv.dtype_bytes
    if wide <= NARROW_BYTES:
        return None
    return (p.weights_bytes + kv) * NARROW_BYTES // wide + p.activation_bytes + p.host_verifier_weights_bytes
