"""A step's text in whole characters, where a byte-level tokenizer splits a character across two steps."""

from __future__ import annotations

import pytest

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
