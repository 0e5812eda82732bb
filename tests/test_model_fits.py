"""A folder model that cannot fit in memory is refused before transformers builds it, as synthetic models are:
loaded, it swapped for minutes and the kernel killed the process with no message. Checked on config-only folders
with the free memory set by the test: no weights are read, and the model is never built."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig

from engine import synthetic
from engine.config import ModelSpec
from engine.errors import ModelLoadError
from engine.models import _check_folder_fits, load_model
from engine.synthetic import synthetic_config, synthetic_tokenizer

GB = 1000**3  # the decimal units format_bytes prints


def free(monkeypatch: pytest.MonkeyPatch, **by_device: float | None) -> None:
    monkeypatch.setattr(synthetic, "free_memory_bytes", lambda device: by_device[device.type])


def config_folder(path: Path, name: str = "llama2-7b", dtype: str = "bfloat16") -> Path:
    """A 7B's config.json alone (6,738,415,616 weights: 27.0 GB in float32, 13.5 GB in bfloat16), saved as a
    bfloat16 checkpoint's."""
    config = synthetic_config(name)
    config.dtype = dtype
    config.save_pretrained(path)
    return path


def refusal(source: Path, dtype: str = "float32") -> str:
    with pytest.raises(ModelLoadError) as raised:
        load_model(ModelSpec(str(source), dtype=dtype))
    return raised.value.user_message()


def test_a_float32_load_of_a_bfloat16_checkpoint_counts_four_bytes_a_weight(tmp_path, monkeypatch):
    folder = config_folder(tmp_path / "seven-b")
    free(monkeypatch, cpu=8 * GB)
    message = refusal(folder)
    assert message == (f"the model in {folder} needs 27.0 GB of weights in float32 but only 8.0 GB is free on cpu. "
                       "Pick a smaller model, or use a machine with more memory free.")


def test_bfloat16_is_suggested_where_it_would_fit(tmp_path, monkeypatch):
    folder = config_folder(tmp_path / "seven-b")
    free(monkeypatch, cpu=20 * GB)
    message = refusal(folder)
    assert "needs 27.0 GB of weights in float32 but only 20.0 GB is free on cpu" in message
    assert message.endswith("Load it in bfloat16 (--dtype bfloat16, 13.5 GB), or pick a smaller model.")


def test_a_bfloat16_load_that_does_not_fit_suggests_no_dtype(tmp_path, monkeypatch):
    folder = config_folder(tmp_path / "seven-b")
    free(monkeypatch, cpu=8 * GB)
    message = refusal(folder, "bfloat16")
    assert "needs 13.5 GB of weights in bfloat16 but only 8.0 GB is free on cpu" in message
    assert "--dtype" not in message


def test_the_testers_giant_is_refused_on_any_machine(tmp_path):
    """126 layers, hidden 16384 (a 402B model): 22 GB of RSS and an OOM kill before; 1.6 TB free is no machine."""
    LlamaConfig(vocab_size=49152, hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
                num_attention_heads=128, num_key_value_heads=8, head_dim=128).save_pretrained(tmp_path)
    assert "needs 1.6 TB of weights in float32" in refusal(tmp_path)


def cuda_refusal(folder: Path) -> str:
    with pytest.raises(ModelLoadError) as raised:
        _check_folder_fits(folder, torch.device("cuda"), torch.float32)
    return raised.value.user_message()


def test_on_cuda_the_weights_count_on_the_device_only(tmp_path, monkeypatch):
    """A gaming PC with 16 GB of RAM and a 24 GB card loads a 7B model in bfloat16: safetensors are read from a file
    mapping, so the host's free RAM is not what refuses it."""
    folder = config_folder(tmp_path / "seven-b")
    free(monkeypatch, cpu=8 * GB, cuda=80 * GB)
    _check_folder_fits(folder, torch.device("cuda"), torch.float32)
    free(monkeypatch, cpu=80 * GB, cuda=20 * GB)
    assert cuda_refusal(folder).endswith("only 20.0 GB is free on cuda. Load it in bfloat16 (--dtype bfloat16, "
                                         "13.5 GB), or pick a smaller model.")
    free(monkeypatch, cpu=80 * GB, cuda=8 * GB)
    assert cuda_refusal(folder).endswith("Pick a smaller model, or use a GPU with more memory free.")


@pytest.fixture
def tiny_folder(tmp_path: Path) -> tuple[Path, int]:
    """synthetic:tiny-llama saved as a folder, and its weights' bytes in float32."""
    model = load_model(ModelSpec("synthetic:tiny-llama")).model
    model.save_pretrained(tmp_path)
    synthetic_tokenizer(model.config.vocab_size).save_pretrained(tmp_path)
    return tmp_path, sum(p.numel() for p in model.parameters()) * 4


def test_a_folder_that_fits_loads_and_one_just_short_is_refused(tiny_folder, monkeypatch):
    folder, needed = tiny_folder
    free(monkeypatch, cpu=needed / 0.9 + 1)
    assert load_model(ModelSpec(str(folder))).name == folder.name
    free(monkeypatch, cpu=needed / 0.9 - 1000)
    with pytest.raises(ModelLoadError, match=f"the model in {folder} needs"):
        load_model(ModelSpec(str(folder)))


def test_memory_that_cannot_be_told_refuses_nothing(tiny_folder, monkeypatch):
    folder, _ = tiny_folder
    free(monkeypatch, cpu=None)
    assert load_model(ModelSpec(str(folder))).name == folder.name


def test_synthetic_models_say_the_same(monkeypatch):
    free(monkeypatch, cpu=20 * GB)
    with pytest.raises(ModelLoadError) as raised:
        load_model(ModelSpec("synthetic:llama2-7b"))
    assert raised.value.user_message() == (
        "synthetic:llama2-7b needs 27.0 GB of weights in float32 but only 20.0 GB is free on cpu. Load it in "
        "bfloat16 (--dtype bfloat16, 13.5 GB), or pick a smaller synthetic model (synthetic:tiny-llama).")
