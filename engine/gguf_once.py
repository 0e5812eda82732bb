"""Reading a GGUF file once per load, not five times.

transformers reads a GGUF file with `gguf.GGUFReader` for the tokenizer, again for the config and again for the
weights, and each read parses every metadata field in Python (the bundled SmolLM2's 49,152-token vocabulary and
its merges: about 4 s a read on one core). While loading the weights it also builds `gguf`'s tensor name map,
which is the same for every tensor of a model, once per tensor (397 times, about 5 s). Inside `gguf_read_once()`
each file is parsed once and each map built once: the bundled model's first conversion takes ~6 s of reading
instead of ~23 s, with the same tensors (tests/test_models.py compares the logits).

Both are looked up on the `gguf` module by name when transformers needs them (`from gguf import GGUFReader` inside
its functions), so they are swapped there for the duration of the block and put back after it. A lock keeps two
loads in two threads (the window loads in the background) from swapping them at once.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_LOCK = threading.RLock()


@contextmanager
def gguf_read_once() -> Iterator[None]:
    """Within the block, a GGUF file opened again returns the reader parsed the first time, and the tensor name
    map of a model shape is built once. Without the `gguf` package (transformers then refuses GGUF) it does
    nothing."""
    try:
        import gguf
    except ImportError:
        yield
        return
    with _LOCK:
        reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
        readers: dict[tuple[str, str], object] = {}

        def read_once(path, mode: str = "r"):
            key = (str(path), mode)
            if key not in readers:
                readers[key] = reader_class(path, mode)
            return readers[key]

        gguf.GGUFReader, gguf.get_tensor_name_map = read_once, functools.cache(name_map)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map
