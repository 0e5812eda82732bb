"""A conversation as prompt ids: the system prompt, each earlier turn's question and chosen path, the new question.

The ids grow by appending: turn k's prompt ids are a prefix of turn k+1's wherever the chat
template renders turn k's prompt text as a prefix of turn k+1's (ChatML and the plain layout
do). Each turn's new text is encoded on its own and appended, so a tokenizer that would merge
tokens across the turn boundary cannot change the ids of an earlier turn; a prefix KV cache
keyed by token-exact block hashes then finds every earlier turn. A template that rewrites
earlier turns (one that drops old reasoning, say) gets its whole text encoded afresh.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # app.conversations reads Turn: `sessions` commands need no transformers
    from transformers import PreTrainedTokenizerBase

Turn = tuple[str, str]  # (the question, the chosen path's full text) of one earlier turn


def clean(text: str) -> str:
    """Undecodable bytes (lone surrogates from a pasted file) become U+FFFD."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def chat_ids(tokenizer: PreTrainedTokenizerBase, question: str, system: str | None = None,
             history: Sequence[Turn] = ()) -> list[int]:
    """Prompt ids of `question` after `history`, ending where the assistant's answer starts."""
    turns = [(clean(q), clean(a)) for q, a in history]
    questions = [q for q, _ in turns] + [clean(question)]
    texts = [_prompt_text(tokenizer, system, turns[:k], questions[k]) for k in range(len(questions))]
    ids = _encode(tokenizer, texts[0], first=True)
    for before, text in itertools.pairwise(texts):
        if text.startswith(before):
            ids += _encode(tokenizer, text[len(before):], first=False)
        else:  # the template rewrote an earlier turn: nothing earlier can be kept
            ids = _encode(tokenizer, text, first=True)
    return ids


def _prompt_text(tokenizer: PreTrainedTokenizerBase, system: str | None, turns: Sequence[Turn], question: str) -> str:
    if tokenizer.chat_template:
        messages = [{"role": "system", "content": system}] if system else []
        for asked, answered in turns:
            messages += [{"role": "user", "content": asked}, {"role": "assistant", "content": answered}]
        messages.append({"role": "user", "content": question})
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    text = f"{system}\n\n" if system else ""
    for asked, answered in turns:
        text += f"Question: {asked}\nAnswer: {answered}\n\n"
    return f"{text}Question: {question}\nAnswer:"


def _encode(tokenizer: PreTrainedTokenizerBase, text: str, *, first: bool) -> list[int]:
    """A template writes its own special tokens; the plain layout takes the tokenizer's (BOS) at the start only."""
    special = first and not tokenizer.chat_template
    return list(tokenizer.encode(text, add_special_tokens=special))
