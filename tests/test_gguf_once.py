"""engine/gguf_once.py: inside the block a GGUF file is parsed once and a tensor name map built once; outside it
(and after it, even when the load fails) `gguf` is as it was. The bundled model's logits through it are compared
with the converted copy in tests/test_models.py."""

from __future__ import annotations

import gguf
import pytest

from engine.gguf_once import gguf_read_once


@pytest.fixture
def small_gguf(tmp_path):
    path = tmp_path / "small.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_token_list([f"t{i}" for i in range(100)])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_file_is_parsed_once_inside_the_block_and_every_time_outside_it(small_gguf):
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with gguf_read_once():
        first = gguf.GGUFReader(small_gguf)
        assert gguf.GGUFReader(small_gguf) is first
        assert first.fields["llama.block_count"].contents() == 2
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader_class, name_map)
    assert gguf.GGUFReader(small_gguf) is not gguf.GGUFReader(small_gguf)


def test_a_failed_load_puts_gguf_back(tmp_path):
    reader_class = gguf.GGUFReader
    with pytest.raises(OSError), gguf_read_once():
        gguf.GGUFReader(tmp_path / "missing.gguf")
    assert gguf.GGUFReader is reader_class
