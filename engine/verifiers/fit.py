"""Whether a PRM's weights fit on the device beside the generator's, said before the PRM is loaded."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from safetensors import safe_open

from engine.errors import BeamwiseError, format_bytes, load_errors
from engine.verifiers.families import load_prm, locate_prm
from engine.verifiers.weights import weight_files

WORKING_ROOM = 1 << 30  # activations and the smallest KV budget: what a search needs beside the weights


class WeightsDoNotFit(BeamwiseError):
    """The generator's and the verifier's weights do not both fit in the device's memory."""

    hint = (
        "Use a smaller PRM (a 1.5B one instead of 7B), run the verifier on the CPU (--verifier-device cpu; "
        "in the window: KV cache > run the PRM on the CPU), load the models in bfloat16 (--dtype bfloat16), "
        "or pick a smaller generator."
    )


def pair_does_not_fit(generator_bytes: int, verifier_bytes: int, memory_bytes: int, where: str) -> str | None:
    """Why the two models' weights cannot share `memory_bytes` on `where` (with room to run), or None."""
    need = generator_bytes + verifier_bytes + WORKING_ROOM
    if need <= memory_bytes:
        return None
    return (
        f"the generator's weights ({format_bytes(generator_bytes)}) and the PRM's ({format_bytes(verifier_bytes)}) "
        f"do not both fit on {where}, which has {format_bytes(memory_bytes)}: the pair needs about "
        f"{format_bytes(need)} with {format_bytes(WORKING_ROOM)} to run a search, so a KV budget and weights "
        f"fit in {format_bytes(need)} or more."
    )


def check_pair_fits(generator: torch.nn.Module, source: str, device: torch.device, dtype: torch.dtype) -> None:
    """Refuse, before loading it, a PRM whose weights do not fit on a CUDA `device` beside the loaded generator."""
    if device.type != "cuda":
        return
    free, _ = torch.cuda.mem_get_info(device)
    free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    generator_bytes = sum(p.numel() * p.element_size() for p in generator.parameters())
    message = pair_does_not_fit(
        generator_bytes,
        prm_weight_bytes(source, dtype),
        free + generator_bytes,
        f"{device} ({torch.cuda.get_device_name(device)})",
    )
    if message:
        raise WeightsDoNotFit(message)


def prm_weight_bytes(source: str, dtype: torch.dtype) -> int:
    """Bytes the PRM's weights take once loaded in `dtype` (body and head; an unused LM head is not loaded)."""
    size = torch.empty((), dtype=dtype).element_size()
    if source.startswith("synthetic:"):
        parts = load_prm(source, torch.device("meta"), dtype)
        return sum(p.numel() for m in (parts.body, parts.head) for p in m.parameters()) * size
    folder, family = locate_prm(source)
    by_file: dict[Path, list[str]] = {}
    for name, file in weight_files(folder).items():
        if not (family in ("qwen-prm", "skywork-prm") and name.startswith("lm_head.")):
            by_file.setdefault(file, []).append(name)
    elements = 0
    for file, names in by_file.items():
        with load_errors(file, "the weight shapes"), safe_open(str(file), framework="pt") as handle:
            elements += sum(math.prod(handle.get_slice(name).get_shape()) for name in names)
    return elements * size
