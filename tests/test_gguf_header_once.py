"""A GGUF's facts from its header alone, read once: gguf's GGUFReader was opened twice per file (~4 s each for the
bundled model: it builds every tokenizer string as an array), so `models list`, `models info NAME` and the window's
list took ~9 s per GGUF; and a lookup of one name read every model's facts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import engine.gguf_header as header_module
from app import model_facts
from app import model_library as lib
from app.cli import main
from engine.errors import ModelLoadError
from engine.gguf_header import read_gguf_header

pytestmark = pytest.mark.usefixtures("scratch_models")


def gguf_with_tensors(path: Path) -> Path:
    """A llama GGUF header with a tokenizer's string array and two float32 tensors (48 + 4096 weights)."""
    from gguf import GGUFWriter

    writer = GGUFWriter(path, "llama")
    writer.add_block_count(2)
    writer.add_embedding_length(64)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_context_length(4096)
    writer.add_token_list([f"tok{i}" for i in range(300)])
    writer.add_token_scores([0.5] * 300)
    writer.add_tensor("small", np.ones((4, 12), dtype=np.float32))
    writer.add_tensor("big", np.ones((64, 64), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_the_header_says_what_ggufs_own_reader_says(tmp_path):
    from gguf import GGUFReader

    path = gguf_with_tensors(tmp_path / "m.gguf")
    read = read_gguf_header(path)
    reader = GGUFReader(path)
    scalars = {k: f.contents() for k, f in reader.fields.items()
               if not k.startswith("GGUF.") and not isinstance(f.contents(), list)}
    assert read.fields == scalars and read.fields["llama.context_length"] == 4096
    assert read.parameters == sum(int(t.n_elements) for t in reader.tensors) == 48 + 4096


def test_facts_read_the_header_once_and_never_through_ggufs_reader(tmp_path, monkeypatch):
    import gguf

    def no_reader(*args, **kwargs):
        raise AssertionError("GGUFReader builds every array of the file")

    monkeypatch.setattr(gguf, "GGUFReader", no_reader)
    parsed = []
    real = header_module._Parser.header
    monkeypatch.setattr(header_module._Parser, "header", lambda self: parsed.append(1) or real(self))
    path = gguf_with_tensors(tmp_path / "m.gguf")
    facts = model_facts.facts_of(str(path))
    assert (facts.parameters, facts.context_length, facts.kv.num_layers, facts.kv.num_kv_heads) == (4144, 4096, 2, 2)
    model_facts.facts_of(str(path))
    assert len(parsed) == 1  # the facts and the KV shape, twice over: one read
    path.write_bytes(path.read_bytes() + b"\0" * 32)  # another version of the file (its size) is read again
    model_facts.facts_of(str(path))
    assert len(parsed) == 2


def test_a_gguf_cut_short_is_no_model_by_path_or_in_the_list(tmp_path, capsys):
    path = gguf_with_tensors(tmp_path / "cut.gguf")
    path.write_bytes(path.read_bytes()[:-1000])
    with pytest.raises(ModelLoadError, match="cut short"):
        model_facts.facts_of(str(path))
    assert main(["models", "info", str(path)]) == 2  # it said "role generator" and exited 0
    out = capsys.readouterr().out
    assert any(line.split() == ["role", "-"] for line in out.splitlines()) and "cut short" in out
    entry = lib.entry_at(path)
    assert entry.role == "-" and entry.facts is None and "cut short" in entry.problem


def test_a_lookup_of_one_name_reads_only_that_models_facts(tmp_path, tiny, monkeypatch, capsys):
    folder = lib.models_dir() / "tiny--gen"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    (folder / lib.MARKER).write_text(json.dumps({"repo": "tiny/gen"}), encoding="utf-8")
    gguf_with_tensors(lib.models_dir() / "other.gguf")
    read = []
    real = model_facts.facts_of
    monkeypatch.setattr(model_facts, "facts_of", lambda source, *rest: read.append(source) or real(source, *rest))
    assert main(["models", "info", "tiny--gen"]) == 0 and "tiny--gen" in capsys.readouterr().out
    assert read == [str(folder)]
    read.clear()
    assert main(["models", "info", "nope"]) == 2 and read == []
    assert "tiny--gen" in capsys.readouterr().err
    assert lib.source_of_name("other") == str(lib.models_dir() / "other.gguf")  # the name a run records
    assert read == [str(lib.models_dir() / "other.gguf")]
