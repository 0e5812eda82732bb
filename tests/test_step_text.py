"""A step's text in whole characters, where a byte-level tokenizer splits a character across two steps."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

from engine.methods.lookahead import roll_out
from engine.rows import RowResult
from engine.step_text import step_text

TEXT = "苹果有多少个？ 🍎👨\u200d👩\u200d👧 שָׁלוֹם, كم عدد التفاح؟ cafe\u0301 Πόσα μήλα;"


def byte_decode(ids) -> str:
    """A byte-level tokenizer's decode: each token one byte, an unfinished character as U+FFFD."""
    return bytes(ids).decode("utf-8", "replace")


@pytest.mark.parametrize("k", [1, 2, 3, 5, 7, 16])
def test_steps_of_k_tokens_join_to_the_answer_with_no_broken_character(k: int) -> None:
    tokens = list(TEXT.encode("utf-8"))
    steps = [tokens[i:i + k] for i in range(0, len(tokens), k)]
    texts = [step_text(byte_decode, tokens[:i * k], step, ends_path=i == len(steps) - 1)
             for i, step in enumerate(steps)]
    assert "".join(texts) == TEXT and not any("\ufffd" in text for text in texts)
    assert any(byte_decode(step).count("\ufffd") for step in steps)  # each step decoded alone broke characters


def test_a_path_that_ends_in_half_a_character_keeps_it_as_written() -> None:
    half = list("🍎".encode())[:2]
    assert step_text(byte_decode, list(b"ok "), half, ends_path=True) == "\ufffd"
    assert step_text(byte_decode, list(b"ok "), half, ends_path=False) == ""


class ScriptedKV:
    """The KV cache as roll_out uses it: each decode gives every roll-out head the next chunk of bytes."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.step = 0

    def fork(self, leaf, head, generator) -> None:
        pass

    def release(self, cid) -> None:
        pass

    def decode_step(self, heads, should_stop, more_of_step):
        chunk = list(self.chunks[self.step])
        self.step += 1
        yield SimpleNamespace(results={h: RowResult(sampled=chunk, logprobs=[0.0] * len(chunk)) for h in heads})


def test_a_roll_out_step_is_decoded_after_its_path_and_the_steps_before_it() -> None:
    """The lookahead method's roll-outs (what the verifier reads after the child's step) were decoded alone."""
    apple, shin = "🍎".encode(), "שָׁ".encode()
    path = list(b"2 + 3 = " + apple[:2])  # the child's step ends inside the apple
    chunks = [apple[2:] + b" five ", shin[:3], shin[3:] + b"."]
    ids = iter(range(100, 200))
    rolled = roll_out(ScriptedKV(chunks), {7: path}, 3, lambda: next(ids), byte_decode,
                      contextlib.nullcontext, lambda: False)
    texts = [step.text for step in rolled.steps[7]]
    assert texts == ["🍎 five ", "ש", "ָׁ."]
    assert step_text(byte_decode, [], path[:-2], ends_path=False) + "".join(texts) == "2 + 3 = 🍎 five שָׁ."
