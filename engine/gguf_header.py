"""A GGUF file's key-value header and tensor table, read without building its arrays: gguf's GGUFReader turns the
tokenizer's 49,152 strings into numpy arrays (~4 s for the bundled model), where `models list` needs a handful of
numbers. Read once per file and version (path, size, mtime) in a process."""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

# GGUF value types (gguf.constants.GGUFValueType): the struct code of each scalar, and the two others.
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
DEFAULT_ALIGNMENT = 32


@dataclass(frozen=True)
class GGUFHeader:
    """What a GGUF says of itself: its scalar and string keys (arrays left out), and its tensors' element count."""

    fields: dict[str, object]
    parameters: int


_cache: dict[tuple[str, int, int], GGUFHeader] = {}


def read_gguf_header(path: Path) -> GGUFHeader:
    """The header of the GGUF at `path`; ValueError (or struct.error) where the file is cut short or not GGUF.
    A file shorter than its tensor table says is refused too: the loader would fail on it later."""
    stat = os.stat(path)
    key = (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _cache:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            _cache[key] = _Parser(data).header()
    return _cache[key]


class _Parser:
    """A cursor over the mapped file; every read past its end is a struct.error."""

    def __init__(self, data: mmap.mmap) -> None:
        self.data, self.at = data, 0
        if data[:4] != b"GGUF":
            raise ValueError("it does not start with the GGUF magic bytes")
        version = struct.unpack_from("<I", data, 4)[0]
        self.order = "<" if version & 0xFFFF else ">"  # a big-endian file's version reads as 0x0N000000
        self.at = 8

    def take(self, code: str) -> int | float | bool:
        (value,) = struct.unpack_from(self.order + code, self.data, self.at)
        self.at += struct.calcsize(self.order + code)
        return value

    def string(self) -> str:
        length = int(self.take("Q"))
        self.skip(length)
        return self.data[self.at - length:self.at].decode("utf-8", errors="replace")

    def skip(self, length: int) -> None:
        if length < 0 or self.at + length > len(self.data):
            raise ValueError("the file ends inside its header (it may be cut short)")
        self.at += length

    def value(self, kind: int) -> object:
        if kind in SCALARS:
            return self.take(SCALARS[kind])
        if kind == STRING:
            return self.string()
        if kind != ARRAY:
            raise ValueError(f"its header holds a value of unknown type {kind}")
        item, count = int(self.take("I")), int(self.take("Q"))
        if item in SCALARS:
            self.skip(count * struct.calcsize("<" + SCALARS[item]))
        else:
            for _ in range(count):  # strings (the tokenizer's vocabulary) or nested arrays: walked, not kept
                self.value(item)
        return None

    def header(self) -> GGUFHeader:
        tensors, keys = int(self.take("Q")), int(self.take("Q"))
        fields = {}
        for _ in range(keys):
            name, kind = self.string(), int(self.take("I"))
            value = self.value(kind)
            if value is not None:
                fields[name] = value
        return GGUFHeader(fields, self._tensors(tensors, fields))

    def _tensors(self, count: int, fields: dict[str, object]) -> int:
        """Sum of the tensors' element counts, refusing a file that ends before its last tensor's bytes."""
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        parameters, end = 0, 0
        for _ in range(count):
            self.string()
            dims = [int(self.take("Q")) for _ in range(int(self.take("I")))]
            kind, offset = int(self.take("I")), int(self.take("Q"))
            elements = 1
            for dim in dims:
                elements *= dim
            block, size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
            parameters += elements
            end = max(end, offset + elements // block * size)
        alignment = int(fields.get("general.alignment", DEFAULT_ALIGNMENT)) or DEFAULT_ALIGNMENT  # type: ignore[arg-type]
        start = -(-self.at // alignment) * alignment
        if count and start + end > len(self.data):
            raise ValueError(f"the file is cut short: its tensors need {start + end:,} bytes, it has "
                             f"{len(self.data):,}")
        return parameters
