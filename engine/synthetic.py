"""Synthetic model configs (public shapes, no weights) and a code-built ChatML tokenizer for them."""

from __future__ import annotations

import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    OPTConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

from engine.errors import ModelLoadError, format_bytes
from engine.prm_names import SYNTHETIC_PRM_FAMILIES

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2 as in SmolLM2
EOS_TOKEN = "<|im_end|>"
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_SPECIAL_IDS = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}


@dataclass(frozen=True)
class SyntheticModel:
    """A named config recipe; `seed` makes the random weights of every load identical."""

    build: Callable[[], PretrainedConfig]
    description: str
    seed: int = 1234


def _tiny_llama() -> PretrainedConfig:
    return LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        tie_word_embeddings=False, **_SPECIAL_IDS,
    )


def _tiny_qwen2() -> PretrainedConfig:
    return Qwen2Config(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
        tie_word_embeddings=False, **_SPECIAL_IDS,
    )


def _tiny_opt() -> PretrainedConfig:
    return OPTConfig(
        vocab_size=512, hidden_size=64, ffn_dim=128, num_hidden_layers=6, num_attention_heads=4,
        word_embed_proj_dim=64, max_position_embeddings=2048, **_SPECIAL_IDS,
    )


def _llama2_7b() -> PretrainedConfig:
    return LlamaConfig(
        vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
        rms_norm_eps=1e-5, tie_word_embeddings=False, **_SPECIAL_IDS,
    )


def _opt_6_7b() -> PretrainedConfig:
    return OPTConfig(
        vocab_size=50272, hidden_size=4096, ffn_dim=16384, num_hidden_layers=32, num_attention_heads=32,
        word_embed_proj_dim=4096, max_position_embeddings=2048, **_SPECIAL_IDS,
    )


def _llama3_8b() -> PretrainedConfig:
    return LlamaConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
        rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        tie_word_embeddings=False, **_SPECIAL_IDS,
    )


def _llama3_1_8b() -> PretrainedConfig:
    config = _llama3_8b()  # the same shapes; a 128K window with Llama 3.1's RoPE scaling
    config.max_position_embeddings = 131072
    config.rope_parameters = {
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
    }
    return config


SYNTHETIC_MODELS: dict[str, SyntheticModel] = {
    "tiny-llama": SyntheticModel(_tiny_llama, "Llama, 3 layers, hidden 64, 4 heads / 2 KV heads (GQA)"),
    "tiny-qwen2": SyntheticModel(_tiny_qwen2, "Qwen2, 6 layers, hidden 64, 4 heads = 4 KV heads (MHA)"),
    "tiny-opt": SyntheticModel(_tiny_opt, "OPT, 6 layers, hidden 64, 4 heads"),
    "llama2-7b": SyntheticModel(_llama2_7b, "Llama-2-7B shapes: 32 layers, hidden 4096, 32 KV heads"),
    "opt-6.7b": SyntheticModel(_opt_6_7b, "OPT-6.7B shapes: 32 layers, hidden 4096, 32 heads"),
    "llama3-8b": SyntheticModel(_llama3_8b, "Llama-3-8B shapes: 32 layers, hidden 4096, 8 KV heads"),
    "llama3.1-8b": SyntheticModel(_llama3_1_8b, "Llama-3.1-8B shapes: as llama3-8b, a 128K context window"),
}


def synthetic_entry(name: str) -> SyntheticModel:
    """The recipe for `name`; unknown names raise ModelLoadError listing the known ones, and a synthetic PRM's
    name says to use it as the verifier (as a PRM folder given as the generator does, engine/models.py)."""
    if name in SYNTHETIC_PRM_FAMILIES:
        raise ModelLoadError(f"synthetic:{name} is a process reward model (a PRM: it scores steps, it writes none); "
                             "it cannot be the generator.",
                             hint=f"Use it as the verifier (--verifier prm --verifier-model synthetic:{name}, or the "
                                  "window's Verifier), and pick a generator model.")
    if name not in SYNTHETIC_MODELS:
        known = ", ".join(f"synthetic:{key}" for key in SYNTHETIC_MODELS)
        raise ModelLoadError(f"unknown synthetic model {name!r}.", hint=f"Use one of: {known}.")
    return SYNTHETIC_MODELS[name]


def synthetic_config(name: str) -> PretrainedConfig:
    """A fresh config with the public shapes of `name` (no weights are built here)."""
    return synthetic_entry(name).build()


def _byte_alphabet() -> list[str]:
    """The 256 byte-level symbols in byte order (GPT-2's printable mapping of every byte)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + extra)
            extra += 1
    return [symbols[byte] for byte in range(256)]


def _merge_candidates(alphabet: list[str]) -> Iterator[tuple[str, str]]:
    """Merges in a fixed order: letter pairs, then space+letter words, then ever longer words.

    Newline (byte 10) is never merged, so "\\n" is always exactly one token.
    """
    space = alphabet[ord(" ")]
    letters = [alphabet[ord(c)] for c in string.ascii_lowercase + string.ascii_uppercase]
    level = [space, *letters]
    yield from ((space, letter) for letter in letters)
    yield from ((a, b) for a in letters for b in letters)
    level = [a + b for a in level for b in letters]
    while True:
        yield from ((prefix, letter) for prefix in level for letter in letters)
        level = [prefix + letter for prefix in level for letter in letters]


def _bpe_vocab(vocab_size: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    alphabet = _byte_alphabet()
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for symbol in alphabet:
        vocab[symbol] = len(vocab)
    merges: list[tuple[str, str]] = []
    candidates = _merge_candidates(alphabet)
    while len(vocab) < vocab_size:
        left, right = next(candidates)
        if left in vocab and right in vocab and left + right not in vocab:
            vocab[left + right] = len(vocab)
            merges.append((left, right))
    return vocab, merges


def synthetic_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE with exactly `vocab_size` ids, ChatML specials (ids 0-2) and a ChatML template.

    Every id decodes to text and every ASCII string round-trips through encode/decode.
    """
    minimum = len(SPECIAL_TOKENS) + 256
    if vocab_size < minimum:
        raise ModelLoadError(f"a synthetic tokenizer needs a vocab of at least {minimum} ids (got {vocab_size}).")
    vocab, merges = _bpe_vocab(vocab_size)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|im_start|>",
        eos_token=EOS_TOKEN,
        pad_token="<|endoftext|>",
        unk_token=None,
        chat_template=CHATML_TEMPLATE,
        model_max_length=1 << 20,
    )


def parameter_count(config: PretrainedConfig) -> int:
    """Exact number of weights of a model built from `config`, found on the meta device (no memory)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def free_memory_bytes(device: torch.device) -> int | None:
    """Memory a new model could take on `device`, or None where it cannot be told."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    try:
        import psutil
    except ImportError:
        return _free_memory_posix()
    return int(psutil.virtual_memory().available)


def _free_memory_posix() -> int | None:
    try:
        import os

        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


WEIGHTS_SHARE = 0.9  # of the memory free, the most a model's weights may take (`check_fits`; the plan says it too)


def check_fits(name: str, config: PretrainedConfig, device: torch.device, dtype: torch.dtype,
               smaller: str = "a smaller model") -> None:
    """Refuse, before any weight is built, a model whose weights in `dtype` (the dtype they are held in, whatever
    the checkpoint's: float32 doubles a bfloat16 one) need more than WEIGHTS_SHARE of the memory free on `device`:
    past it the load swaps for minutes and the kernel kills the process with no message. A config transformers cannot
    build on the meta device is left to the loader."""
    try:
        count = parameter_count(config)
    except Exception:  # an architecture transformers cannot build: its loader says so, with the path
        return
    size = torch.finfo(dtype).bits // 8
    needed, free = count * size, free_memory_bytes(device)
    if free is None or needed <= WEIGHTS_SHARE * free:
        return
    half = count * 2
    dtype_name = str(dtype).removeprefix("torch.")
    if size > 2 and half <= WEIGHTS_SHARE * free:
        hint = f"Load it in bfloat16 (--dtype bfloat16, {format_bytes(half)}), or pick {smaller}."
    else:
        more = "a GPU" if device.type == "cuda" else "a machine"
        hint = f"Pick {smaller}, or use {more} with more memory free."
    raise ModelLoadError(f"{name} needs {format_bytes(needed)} of weights in {dtype_name} but only "
                         f"{format_bytes(free)} is free on {device}.", hint=hint)


def build_synthetic_model(name: str, device: torch.device, dtype: torch.dtype) -> PreTrainedModel:
    """Random-weight model for `name`, built directly on `device` in `dtype`.

    The weights depend only on the recipe's seed: every load gives the same model, and the
    caller's global RNG state is left exactly as it was (the seed is set inside fork_rng).
    """
    entry = synthetic_entry(name)
    config = entry.build()
    check_fits(f"synthetic:{name}", config, device, dtype, "a smaller synthetic model (synthetic:tiny-llama)")
    cuda_devices = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda_devices), torch.device(device):
        torch.manual_seed(entry.seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model
