"""Text pieces a verifier layout is made of: chat templates split around a step, and a step's clean text."""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerBase

from engine.errors import ChatTemplateUnusable, NotAPRM

SENTINEL = "\u2063BEAMWISE-STEP\u2063"  # never in a question or a step; marks where the steps go


def step_text(step: str) -> str:
    """A step as a PRM reads it: without the blank line or spaces the generator ended it with.

    An empty step (a candidate that stopped at once) reads as "..." so every layout keeps its shape.
    """
    return step.strip() or "..."


def encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Ids of one piece on its own: no BOS or EOS added (a template writes its own)."""
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def render(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def around_sentinel(text: str) -> tuple[str, str]:
    """The text before and after the one sentinel in `text`."""
    before, found, after = text.partition(SENTINEL)
    if not found:
        raise ChatTemplateUnusable("this model's chat template dropped the step text; Beamwise cannot split it into "
                                   "pieces.")
    return before, after


def require_chat_template(tokenizer: PreTrainedTokenizerBase, family: str) -> None:
    """Refuse a tokenizer without a chat template for a family whose format is one: transformers raised a bare
    ValueError at the run's first path, which was reported as a fault in Beamwise."""
    if not tokenizer.chat_template:
        raise NotAPRM(f"this PRM's tokenizer has no chat template; the {family} format is written with one.",
                      hint="Check the family named before the path, or get the PRM's tokenizer files again (a chat "
                           "template is kept in tokenizer_config.json or chat_template.jinja).")


def single_token(tokenizer: PreTrainedTokenizerBase, text: str, what: str) -> int:
    """The id of `text`, which must be exactly one token (a PRM's step tag or label)."""
    ids = encode(tokenizer, text)
    if len(ids) != 1:
        raise NotAPRM(f"the {what} {text!r} is {len(ids)} tokens in this PRM's tokenizer; it must be exactly one.")
    return ids[0]
