"""Loading the generator: the bundled SmolLM2, a transformers folder, a .gguf file or a synthetic model."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from engine.bundled import (
    BUNDLED_NAME,
    Progress,
    bundled_cache_folder,
    bundled_model_folder,
    cache_is_valid,
    report,
)
from engine.chat import Turn, chat_ids
from engine.config import ModelSpec
from engine.errors import ModelLoadError, load_errors
from engine.gguf_once import gguf_read_once
from engine.kv.attention import enable_cascade
from engine.synthetic import build_synthetic_model, check_fits, synthetic_config, synthetic_tokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class KVShape:
    """Per-token KV geometry of a model: what one cached token costs in bytes."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int

    def layer_token_bytes(self) -> int:
        """K and V of one token in one layer."""
        return 2 * self.num_kv_heads * self.head_dim * self.dtype_bytes

    def token_bytes(self) -> int:
        """K and V of one token over all layers."""
        return self.num_layers * self.layer_token_bytes()


BUNDLED_LAYERS_HEADS_DIM = (30, 3, 64)  # SmolLM2-135M, used before the first conversion


@dataclass
class LoadedModel:
    """A ready model: eval mode, no grads, on `device` in `dtype`, with its tokenizer and stop ids."""

    source: str
    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    dtype: torch.dtype
    eos_token_ids: tuple[int, ...]
    context_length: int
    kv_shape: KVShape
    plan_only: bool = False  # see engine.loaded.Generator

    def encode_chat(self, question: str, system: str | None = None, history: Sequence[Turn] = ()) -> list[int]:
        """Prompt ids ending where the assistant's answer starts (chat template, else a plain layout), after the
        earlier turns of a conversation in `history`; see engine/chat.py for why the ids only ever grow."""
        return chat_ids(self.tokenizer, question, system, history)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


def kv_shape_from_config(config: PretrainedConfig, dtype_bytes: int) -> KVShape:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    return KVShape(text.num_hidden_layers, kv_heads, head_dim, dtype_bytes)


def _dtype_bytes(dtype: str) -> int:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)} (got {dtype!r}).")
    return torch.finfo(DTYPES[dtype]).bits // 8


def _source_kind(source: str) -> str:
    if source in ("bundled", "default"):
        return "bundled"
    if source.startswith("synthetic:"):
        return "synthetic"
    return "gguf" if source.lower().endswith(".gguf") else "folder"


def checked_folder(source: str) -> Path:
    path = Path(source).expanduser()
    try:
        exists, folder, config = path.exists(), path.is_dir(), (path / "config.json").is_file()
    except OSError as error:  # a name too long for the file system, say
        raise ModelLoadError(f"cannot read the model path {path} ({error.strerror or error}).") from error
    if not exists:
        raise ModelLoadError(f"model path {path} does not exist.")
    if not folder:
        raise ModelLoadError(f"{path} is neither a .gguf file nor a model folder.")
    if not config:
        refuse_unfinished(path)  # a pull stopped before its config.json came
        raise ModelLoadError(f"model folder {path} has no config.json.", hint=_no_config_hint(path))
    _check_model_type(path / "config.json")
    return path


def _no_config_hint(folder: Path) -> str:
    """A folder of .gguf files (a GGUF repository pulled whole) is no model itself: the hint names a file in it."""
    try:
        ggufs = sorted(p.name for p in folder.iterdir() if p.suffix.lower() == ".gguf")
    except OSError:
        ggufs = []
    if ggufs:
        return f"It holds {', '.join(ggufs[:3])}: give the path of one .gguf file, such as {folder / ggufs[0]}."
    return "Point to a transformers model folder (with config.json and weights) or a .gguf file."


DOWNLOAD_MARKER = ".beamwise-download.json"  # app/models_folder.py MARKER: what a pull writes into its folder


def refuse_unfinished(folder: Path) -> None:
    """A folder a pull is still writing, or was stopped in (its marker says "complete": false), said as `models
    list` says it: what it lacks would be said as damage, where pulling again resumes it."""
    try:
        marker = json.loads((folder / DOWNLOAD_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(marker, dict) and marker.get("complete") is False:
        raise ModelLoadError(f"model folder {folder} is not whole: the download did not finish.",
                             hint="Pull it again to resume it, or remove it.")


# Files a tokenizer is built from: fast (tokenizer.json), SentencePiece or tiktoken (*.model, *.tiktoken), BPE or
# WordPiece vocabularies (vocab.json with merges.txt, vocab.txt). tokenizer_config.json alone builds nothing.
TOKENIZER_NAMES = ("tokenizer.json", "merges.txt")
TOKENIZER_SUFFIXES = (".model", ".tiktoken")


def _check_model_type(config: Path) -> None:
    """A config.json that names no model_type: transformers said only "Unrecognized model", or, as the tokenizer is
    read first, that sentencepiece or tiktoken were not installed. JSON it cannot read is left to transformers."""
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(data, dict) or not data.get("model_type"):
        raise ModelLoadError(f"{config} has no model_type, so it does not say which model it is (such as "
                             '"model_type": "llama").',
                             hint="The file may be incomplete or damaged: download the model again, or pick "
                                  "another model.")


def check_tokenizer_files(folder: Path) -> None:
    """A folder without tokenizer files (weights saved alone): transformers said sentencepiece or tiktoken were not
    installed, which installing does not mend."""
    try:
        names = [p.name for p in folder.iterdir() if p.is_file()]
    except OSError:
        return  # said by transformers, with the folder's name
    if not any(n in TOKENIZER_NAMES or n.endswith(TOKENIZER_SUFFIXES) or n.startswith("vocab.") for n in names):
        raise ModelLoadError(f"model folder {folder} has no tokenizer (no tokenizer.json, tokenizer.model, "
                             "vocab.json with merges.txt, or vocab.txt).",
                             hint="Copy the tokenizer files from where the model came from (or download it again), "
                                  "or pick another model.")


def checked_gguf(source: str) -> Path:
    path = Path(source).expanduser()
    try:
        if not path.is_file():
            refuse_unfinished(path.parent)  # a pull of one .gguf, stopped before it came
            raise ModelLoadError(f"GGUF file {path} does not exist.")
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as error:
        raise ModelLoadError(f"cannot read the GGUF file {path} ({error.strerror or error}).") from error
    if magic != b"GGUF":
        raise ModelLoadError(
            f"{path} is not a GGUF file (it does not start with the GGUF magic bytes).",
            hint="The file may be damaged or still downloading; get it again or pick another model.",
        )
    return path


def _gguf_kv_shape(path: Path, dtype_bytes: int) -> KVShape:
    from engine.gguf_header import read_gguf_header

    with load_errors(path, "GGUF metadata"):
        fields = read_gguf_header(path).fields
        arch = fields["general.architecture"]
        heads = int(fields[f"{arch}.attention.head_count"])
        head_dim = int(fields.get(f"{arch}.attention.key_length") or int(fields[f"{arch}.embedding_length"]) // heads)
        return KVShape(int(fields[f"{arch}.block_count"]), int(fields.get(f"{arch}.attention.head_count_kv", heads)),
                       head_dim, dtype_bytes)


def kv_shape_of(source: str, dtype: str = "float32") -> KVShape:
    """KV geometry of a model source from its config alone; no weights are read or built."""
    size = _dtype_bytes(dtype)
    kind = _source_kind(source)
    if kind == "synthetic":
        return kv_shape_from_config(synthetic_config(source.removeprefix("synthetic:")), size)
    if kind == "bundled":
        folder = bundled_cache_folder()
        if cache_is_valid(folder):
            return kv_shape_of(str(folder), dtype)
        return KVShape(*BUNDLED_LAYERS_HEADS_DIM, dtype_bytes=size)
    if kind == "gguf":
        return _gguf_kv_shape(checked_gguf(source), size)
    folder = checked_folder(source)
    with load_errors(folder, "the model config"):
        config = AutoConfig.from_pretrained(folder, local_files_only=True)
    return kv_shape_from_config(config, size)


def model_config(source: str) -> PretrainedConfig:
    """The config of a synthetic model or a transformers folder (the bundled one once converted); no weights."""
    kind = _source_kind(source)
    if kind == "synthetic":
        return synthetic_config(source.removeprefix("synthetic:"))
    if kind == "bundled" and cache_is_valid(bundled_cache_folder()):
        source, kind = str(bundled_cache_folder()), "folder"
    if kind != "folder":
        raise ModelLoadError(
            f"{source} has no transformers config to plan from.", hint="Use synthetic:NAME or a model folder."
        )
    folder = checked_folder(source)
    with load_errors(folder, "the model config"):
        return AutoConfig.from_pretrained(folder, local_files_only=True)


# --- loading -----------------------------------------------------------------------------------


def resolve_device(device: str | torch.device) -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ModelLoadError(f"unknown device {device!r}.", hint="Use cpu, cuda or auto.") from exc
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("CUDA was asked for but no CUDA device is available.", hint="Use --device cpu.")
    return resolved


def _eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    found: list[int] = []
    config_eos = getattr(model.generation_config, "eos_token_id", None) if model.generation_config else None
    for value in (config_eos, tokenizer.eos_token_id):
        for token in value if isinstance(value, list | tuple) else [value]:
            if token is not None and int(token) not in found:
                found.append(int(token))
    return tuple(found)


def _context_length(config: PretrainedConfig) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(text, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return 2048


def _finish(source: str, name: str, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
            device: torch.device, dtype: torch.dtype) -> LoadedModel:
    model = model.to(device=device, dtype=dtype).eval()
    model.requires_grad_(False)
    enable_cascade(model)  # shared-prefix attention for the KV layer; plain SDPA for every other call
    return LoadedModel(
        source=source, name=name, model=model, tokenizer=tokenizer, device=device, dtype=dtype,
        eos_token_ids=_eos_ids(model, tokenizer), context_length=_context_length(model.config),
        kv_shape=kv_shape_from_config(model.config, torch.finfo(dtype).bits // 8),
    )


def _tokenizer(folder: Path, what: str, gguf_file: str | None = None) -> PreTrainedTokenizerBase:
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    if not gguf_file:  # a GGUF file holds its own tokenizer
        check_tokenizer_files(folder)
    with load_errors(folder / gguf_file if gguf_file else folder, f"the {what} tokenizer"):
        return AutoTokenizer.from_pretrained(folder, local_files_only=True, **extra)


def _from_pretrained(folder: Path, dtype: torch.dtype, what: str,
                     gguf_file: str | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    where = folder / gguf_file if gguf_file else folder
    tokenizer = _tokenizer(folder, what, gguf_file)
    with load_errors(where, f"the {what} weights"):
        model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True,
                                                           output_loading_info=True, **extra)
    missing = sorted(info["missing_keys"])
    if missing:  # transformers fills them with random numbers and only logs a table
        raise weights_missing(where, missing, info["unexpected_keys"])
    return model, tokenizer


def weights_missing(where: Path, missing: list[str], unexpected) -> ModelLoadError:
    named = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    if any(key.startswith(("score.", "v_head.")) for key in unexpected):  # a reward head instead of the LM head
        return ModelLoadError(f"{where} is a process reward model (a PRM: it scores steps, it writes none); its "
                              f"weights have no {named}.",
                              hint="Use it as the verifier (--verifier prm --verifier-model PATH, or the window's "
                                   "Verifier), and pick a generator model.")
    return ModelLoadError(f"{where} lacks weights its config.json names ({named}); a run would answer with "
                          "random numbers.",
                          hint="The download may be incomplete: download it again; or config.json is another "
                               "model's.")


def _load_bundled(spec: ModelSpec, device: torch.device, progress: Progress | None) -> LoadedModel:
    dtype = DTYPES[spec.dtype]
    folder = bundled_model_folder(progress)
    report(progress, f"Loading {BUNDLED_NAME}", None)
    try:
        model, tokenizer = _from_pretrained(folder, dtype, "cached bundled")
    except ModelLoadError:  # the cache looked complete but is damaged inside: rebuild it once
        folder = bundled_model_folder(progress, rebuild=True)
        model, tokenizer = _from_pretrained(folder, dtype, "cached bundled")
    return _finish(spec.source, f"{BUNDLED_NAME} (bundled)", model, tokenizer, device, dtype)


def _check_folder_fits(folder: Path, target: torch.device, dtype: torch.dtype) -> None:
    """Refuse a folder model whose weights, in the dtype they will be held in, do not fit the memory free on
    `target`, before transformers builds it (a config of 400B weights was loaded until the kernel killed it). On
    CUDA only the device is checked: safetensors are read from a file mapping, which a host short of RAM pages.
    Reading the config here also says a damaged config.json as the config's fault (the tokenizer reads it first
    and was blamed). A PRM folder is refused first, from its weight names (`refuse_reward_model`)."""
    with load_errors(folder, "the model config"):
        config = AutoConfig.from_pretrained(folder, local_files_only=True)
    refuse_reward_model(folder, config)
    check_fits(f"the model in {folder}", config, target, dtype)


REWARD_HEADS = ("score.", "v_head.")  # a PRM's head in place of the LM head (engine/prm_folders.py reads them)


def refuse_reward_model(folder: Path, config: PretrainedConfig) -> None:
    """A PRM folder given as the generator, refused from its safetensors headers before any weight loads: a reward
    head and no LM head (a tied one is the embeddings'). Loaded, transformers printed its load table of unexpected
    and missing weights before `weights_missing` said the same."""
    from engine.prm_folders import weight_files

    try:
        names = weight_files(folder)
    except ModelLoadError:  # headers it cannot read: the load says why
        return
    heads = sorted(name for name in names if name.startswith(REWARD_HEADS))
    if heads and "lm_head.weight" not in names and not getattr(config, "tie_word_embeddings", False):
        raise weights_missing(folder, ["lm_head.weight"], heads)


def load_model(spec: ModelSpec, device: str | torch.device = "cpu", progress: Progress | None = None) -> LoadedModel:
    """Load `spec` ready for inference; every failure is a ModelLoadError naming what to do.

    Only local files are read (never a hub download), so it works with HF_HUB_OFFLINE=1.
    """
    target = resolve_device(device)
    dtype = DTYPES[spec.dtype]
    started = time.perf_counter()
    kind = _source_kind(spec.source)
    if kind == "bundled":
        loaded = _load_bundled(spec, target, progress)
    elif kind == "synthetic":
        name = spec.source.removeprefix("synthetic:")
        report(progress, f"Building synthetic:{name} with random weights", None)
        model = build_synthetic_model(name, target, dtype)
        tokenizer = synthetic_tokenizer(model.config.vocab_size)
        loaded = _finish(spec.source, f"synthetic:{name} (random weights)", model, tokenizer, target, dtype)
    elif kind == "gguf":
        path = checked_gguf(spec.source)
        report(progress, f"Loading {path.name} (GGUF is de-quantised, this takes a while)", None)
        with gguf_read_once():
            model, tokenizer = _from_pretrained(path.parent, dtype, "GGUF", gguf_file=path.name)
        loaded = _finish(spec.source, path.stem, model, tokenizer, target, dtype)
    else:
        folder = checked_folder(spec.source)
        refuse_unfinished(folder)
        _check_folder_fits(folder, target, dtype)
        report(progress, f"Loading {folder.name}", None)
        model, tokenizer = _from_pretrained(folder, dtype, "model")
        loaded = _finish(spec.source, folder.name, model, tokenizer, target, dtype)
    report(progress, f"{loaded.name} ready in {time.perf_counter() - started:.1f} s", 1.0)
    return loaded


def load_tokenizer(source: str) -> PreTrainedTokenizerBase:
    """The tokenizer `load_model` would give `source`, without its weights: plans count a prompt's tokens with it.

    Raises ModelLoadError where it cannot be read, and for the bundled model before its first conversion
    (converting takes some seconds and writes the cache; a plan does not start it).
    """
    kind = _source_kind(source)
    if kind == "synthetic":
        return synthetic_tokenizer(synthetic_config(source.removeprefix("synthetic:")).vocab_size)
    if kind == "bundled":
        folder = bundled_cache_folder()
        if not cache_is_valid(folder):
            raise ModelLoadError(f"the bundled {BUNDLED_NAME} is not converted yet, so its tokenizer cannot be read.")
        return _tokenizer(folder, "cached bundled")
    if kind == "gguf":
        path = checked_gguf(source)
        with gguf_read_once():
            return _tokenizer(path.parent, "GGUF", gguf_file=path.name)
    return _tokenizer(checked_folder(source), "model")
