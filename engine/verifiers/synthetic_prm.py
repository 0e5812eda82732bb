"""Tiny random-weight PRMs of each family, with small tokenizers carrying the family's special tokens.

`synthetic:tiny-qwen-prm` and the others build in memory; `save_synthetic_prm` writes the same model as
a folder laid out like the real checkpoints (config architectures, weight names, tokenizer), which the
folder loader then detects like a downloaded PRM.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PretrainedConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2Model,
)

from engine.prm_folders import synthetic_prm_family
from engine.prm_names import SYNTHETIC_PRM_FAMILIES
from engine.synthetic import synthetic_tokenizer
from engine.verifiers.parts import PRMParts

LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
LLAMA3_SPECIALS = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
_TINY = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
         "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}


@dataclass(frozen=True)
class SyntheticPRM:
    family: str
    config: Callable[[], PretrainedConfig]
    architecture: str  # what the real checkpoints' config.json names
    seed: int = 4321


_FAMILY = SYNTHETIC_PRM_FAMILIES  # the names and families the window lists without torch
SYNTHETIC_PRMS: dict[str, SyntheticPRM] = {
    "tiny-qwen-prm": SyntheticPRM(_FAMILY["tiny-qwen-prm"], lambda: Qwen2Config(**_TINY), "Qwen2ForProcessRewardModel"),
    "tiny-skywork-prm": SyntheticPRM(_FAMILY["tiny-skywork-prm"], lambda: Qwen2Config(**_TINY), "Qwen2ForPrmModel"),
    "tiny-math-shepherd": SyntheticPRM(_FAMILY["tiny-math-shepherd"], lambda: MistralConfig(**_TINY),
                                       "MistralForCausalLM"),
    "tiny-rlhflow-prm": SyntheticPRM(_FAMILY["tiny-rlhflow-prm"], lambda: LlamaConfig(**_TINY), "LlamaForCausalLM"),
}


def synthetic_prm_entry(name: str) -> SyntheticPRM:
    synthetic_prm_family(name)  # NotAPRM names the known ones
    return SYNTHETIC_PRMS[name]


def family_tokenizer(family: str) -> PreTrainedTokenizerFast:
    """The synthetic byte-level tokenizer (ChatML) plus the family's own tokens and template."""
    tokenizer = synthetic_tokenizer(500)
    if family == "qwen-prm":
        tokenizer.add_special_tokens({"additional_special_tokens": ["<extra_0>"]})
    elif family == "math-shepherd":
        tokenizer.add_tokens([" ки"])  # one token with its space, as the Llama tokenizer's "▁ки"
        tokenizer.chat_template = None
    elif family == "rlhflow-prm":
        tokenizer.add_special_tokens({"additional_special_tokens": list(LLAMA3_SPECIALS)})
        tokenizer.bos_token, tokenizer.eos_token = "<|begin_of_text|>", "<|eot_id|>"
        tokenizer.chat_template = LLAMA3_TEMPLATE
    return tokenizer


def _modules(entry: SyntheticPRM, dtype: torch.dtype) -> dict[str, nn.Module]:
    """The checkpoint's top-level modules by weight-name prefix (`model`, `lm_head`, `score`, `v_head`)."""
    config = entry.config()
    hidden = config.hidden_size
    if entry.family == "qwen-prm":
        score = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2))
        return {"model": Qwen2Model(config), "score": score.to(dtype)}
    if entry.family == "skywork-prm":
        lm = Qwen2ForCausalLM(config)
        v_head = nn.Module()
        v_head.summary = nn.Linear(hidden, 1)
        return {"model": lm.model, "lm_head": lm.lm_head, "v_head": v_head.to(dtype)}
    lm = (MistralForCausalLM if entry.family == "math-shepherd" else LlamaForCausalLM)(config)
    return {"model": lm.model, "lm_head": lm.lm_head}


def _build(entry: SyntheticPRM, dtype: torch.dtype) -> dict[str, nn.Module]:
    """The same random weights on every call: seeded inside fork_rng, the caller's RNG left alone."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(entry.seed)
        modules = _modules(entry, dtype)
    return {name: m.to(dtype).eval().requires_grad_(False) for name, m in modules.items()}


def synthetic_prm(name: str, device: torch.device, dtype: torch.dtype) -> PRMParts:
    entry = synthetic_prm_entry(name)
    modules = {key: m.to(device) for key, m in _build(entry, dtype).items()}
    head = {"qwen-prm": "score", "skywork-prm": "v_head"}.get(entry.family, "lm_head")
    head_module = modules[head].summary if head == "v_head" else modules[head]
    return PRMParts(entry.family, f"synthetic:{name}", modules["model"], head_module,
                    family_tokenizer(entry.family), device)


def save_synthetic_prm(name: str, folder: Path, *, drop_head: bool = False) -> Path:
    """Write synthetic:`name` as a folder shaped like the real checkpoint (`drop_head`: without its head)."""
    entry = synthetic_prm_entry(name)
    folder.mkdir(parents=True, exist_ok=True)
    config = entry.config()
    config.architectures = [entry.architecture]
    config.save_pretrained(folder)
    family_tokenizer(entry.family).save_pretrained(folder)
    tensors = {f"{prefix}.{key}": value.contiguous() for prefix, module in _build(entry, torch.float32).items()
               for key, value in module.state_dict().items()}
    if drop_head:
        tensors = {k: v for k, v in tensors.items() if not k.startswith(("score.", "v_head."))}
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    _note_name(folder, name)
    return folder


def _note_name(folder: Path, name: str) -> None:
    """Record the model's name in config.json as hub downloads do (`_name_or_path`), for family detection."""
    path = folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["_name_or_path"] = f"beamwise/{name}"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
