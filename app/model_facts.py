"""What a model is, read from its config or GGUF header alone (no weights loaded): architecture, parameters,
context length and KV bytes per token. The memory planner and the model manager both read these; a file's facts are
read once per version of it (path, size, mtime) in a process."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from engine.models import DTYPES, KVShape, checked_folder, checked_gguf, kv_shape_from_config
from engine.prm_names import named_family
from engine.verifiers.synthetic_prm import SYNTHETIC_PRMS

BUNDLED_PARAMETERS = 134_515_008  # SmolLM2-135M-Instruct, before its first conversion
BUNDLED_CONTEXT = 8192


@dataclass(frozen=True)
class ModelFacts:
    """One model's shape; `parameters` or `context_length` is None where its files do not say."""

    source: str
    architecture: str
    parameters: int | None
    kv: KVShape
    context_length: int | None
    vocab_size: int | None = None
    hidden_size: int | None = None

    @property
    def weights_bytes(self) -> int:
        """Weights in memory at the KV's number format (the engine loads both in one dtype)."""
        return (self.parameters or 0) * self.kv.dtype_bytes

    @property
    def kv_token_bytes(self) -> int:
        return self.kv.token_bytes()


def facts_of(source: str, dtype: str = "float32") -> ModelFacts:
    """Facts of a generator or PRM source: bundled, synthetic:NAME, FAMILY:FOLDER, a folder or a .gguf."""
    size = DTYPES[dtype].itemsize if dtype in DTYPES else 4
    if source in ("bundled", "default"):
        return _bundled(size)
    if source.startswith("synthetic:"):
        return _synthetic(source, size)
    family, rest = named_family(source)
    path = Path(source if family is None or Path(source).expanduser().exists() else rest).expanduser()
    if path.suffix.lower() == ".gguf":
        return _gguf(path, size)
    return _folder(path, size)


def _from_config(source: str, config, size: int, parameters: int | None = None) -> ModelFacts:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if parameters is None:
        parameters = _count_parameters(config)
    named = getattr(config, "architectures", None)  # a hand-edited config may hold anything here
    architecture = str(named[0]) if isinstance(named, list) and named else type(config).__name__.removesuffix("Config")
    return ModelFacts(source, architecture, parameters, kv_shape_from_config(config, size),
                      getattr(text, "max_position_embeddings", None), getattr(text, "vocab_size", None),
                      getattr(text, "hidden_size", None))


def _count_parameters(config) -> int | None:
    try:
        from engine.synthetic import parameter_count

        return parameter_count(config)
    except Exception:  # an architecture transformers cannot build: the size on disk still says something
        return None


def _synthetic(source: str, size: int) -> ModelFacts:
    name = source.removeprefix("synthetic:")
    if name in SYNTHETIC_PRMS:
        return _from_config(source, SYNTHETIC_PRMS[name].config(), size)
    from engine.synthetic import synthetic_config

    return _from_config(source, synthetic_config(name), size)


def _bundled(size: int) -> ModelFacts:
    from engine.bundled import BUNDLED_NAME, bundled_cache_folder, cache_is_valid
    from engine.models import BUNDLED_LAYERS_HEADS_DIM

    folder = bundled_cache_folder()
    if cache_is_valid(folder):
        facts = _folder(folder, size)
        return ModelFacts("bundled", facts.architecture, facts.parameters, facts.kv, facts.context_length,
                          facts.vocab_size, facts.hidden_size)
    kv = KVShape(*BUNDLED_LAYERS_HEADS_DIM, dtype_bytes=size)
    return ModelFacts("bundled", f"LlamaForCausalLM ({BUNDLED_NAME})", BUNDLED_PARAMETERS, kv, BUNDLED_CONTEXT,
                      49152, 576)


_folder_facts: dict[tuple[str, int, int, int], ModelFacts] = {}  # (folder, dtype bytes, config.json size, mtime)


def _folder(folder: Path, size: int) -> ModelFacts:
    """A folder's facts, read once per version of its config.json in a process (the window lists every model after
    each pull, add and remove; counting a big model's parameters builds it on the meta device)."""
    from transformers import AutoConfig

    from engine.errors import load_errors

    folder = checked_folder(str(folder))  # missing, a file, or without config.json: said as a run says it
    stat = (folder / "config.json").stat()
    key = (str(folder.resolve()), size, stat.st_size, stat.st_mtime_ns)
    if key not in _folder_facts:
        with load_errors(folder, "the model config"):
            config = AutoConfig.from_pretrained(folder, local_files_only=True)
        _folder_facts[key] = _from_config(str(folder), config, size)
    return replace(_folder_facts[key], source=str(folder))


def _gguf(path: Path, size: int) -> ModelFacts:
    from engine.errors import load_errors
    from engine.gguf_header import read_gguf_header
    from engine.models import kv_shape_of

    path = checked_gguf(str(path))
    with load_errors(path, "GGUF metadata"):
        header = read_gguf_header(path)  # read once: kv_shape_of below finds it in the header's cache
        arch = str(header.fields["general.architecture"])
        context = header.fields.get(f"{arch}.context_length")
    dtype = next(name for name, t in DTYPES.items() if t.itemsize == size)
    return ModelFacts(str(path), f"{arch} (GGUF)", header.parameters, kv_shape_of(str(path), dtype),
                      int(context) if context is not None else None)


def config_json(folder: Path) -> dict:
    """A folder's config.json as a dict ({} when missing or unreadable)."""
    try:
        return json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
