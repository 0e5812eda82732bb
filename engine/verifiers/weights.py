"""Reading a few named tensors (a reward head) from a folder's safetensors files, without the rest."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from engine.errors import load_errors


def weight_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it (single file or sharded with an index)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        with load_errors(index, "the weight index"):
            mapping = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        return {name: folder / file for name, file in mapping.items()}
    names: dict[str, Path] = {}
    for file in sorted(folder.glob("*.safetensors")):
        with load_errors(file, "the weight names"), safe_open(str(file), framework="pt") as handle:
            names.update(dict.fromkeys(handle.keys(), file))
    return names


def read_tensors(files: dict[str, Path], names: list[str]) -> dict[str, torch.Tensor]:
    """The tensors `names` (each must be in `files`), read on the CPU."""
    found: dict[str, torch.Tensor] = {}
    for name in names:
        with load_errors(files[name], f"the tensor {name}"), safe_open(str(files[name]), framework="pt") as handle:
            found[name] = handle.get_tensor(name)
    return found
