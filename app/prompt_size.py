"""How many tokens a run's prompt will hold, before its model loads: the memory plan's prompt length.

A run sends the whole conversation (engine/chat.py): the system prompt, every earlier question and chosen
path, the new question. Where the model's tokenizer can be read without its weights the plan counts exactly
that prompt with the search's own builder (`engine.search.prompt_ids`), so the figure is the one the run's
PrefillDone reports; elsewhere (the bundled model before its first conversion, a file that cannot be read)
it is estimated from the text's length.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from engine.chat import Turn

TEMPLATE_TOKENS = 60  # the chat template and system prompt around a question, when no tokenizer counts them
TURN_TOKENS = 10  # the template's tokens around one earlier turn (its role markers)
CHARS_PER_TOKEN = 3.5  # a text's length in tokens when no tokenizer counts it
DEFAULT_PROMPT_TOKENS = 128  # no question yet and no conversation: a typical short question
_COUNTING = threading.Lock()  # one cached tokenizer serves the plan bar's worker threads one at a time


@dataclass(frozen=True)
class PromptSize:
    """A prompt's length in tokens and how it was found ("counted by the tokenizer" or "estimated")."""

    tokens: int
    how: str
    turns: int = 0  # earlier turns of the conversation it holds


def prompt_size(source: str, question: str | None, history: Sequence[Turn] = ()) -> PromptSize:
    """The prompt of `question` after `history` for the generator at `source`; exact where its tokenizer reads."""
    if not question and not history:
        return PromptSize(DEFAULT_PROMPT_TOKENS, "no question yet: a typical one")
    from engine.chat import chat_ids
    from engine.errors import BeamwiseError
    from engine.search import prompt_ids

    try:
        tokenizer = _tokenizer(source)
    except (BeamwiseError, OSError, ValueError):
        return PromptSize(estimated_tokens(question, history), "estimated from its length", len(history))
    with _COUNTING:
        ids = prompt_ids(functools.partial(chat_ids, tokenizer), question or "", history)
    return PromptSize(len(ids), "counted by the model's tokenizer", len(history))


def estimated_tokens(question: str | None, history: Sequence[Turn] = ()) -> int:
    """A prompt's length without a tokenizer: its characters / 3.5 plus the template's own tokens."""
    if not question and not history:
        return DEFAULT_PROMPT_TOKENS
    chars = len(question or "") + sum(len(asked) + len(answered) for asked, answered in history)
    return TEMPLATE_TOKENS + TURN_TOKENS * len(history) + round(chars / CHARS_PER_TOKEN)


@functools.lru_cache(maxsize=4)
def _tokenizer(source: str):
    """Read once per source: the plan bar plans again after every settings change."""
    from engine.models import load_tokenizer

    return load_tokenizer(source)


@functools.lru_cache(maxsize=4)
def reads_per_token(source: str, verifier: str, verifier_model: str | None) -> int:
    """The most tokens the verifier reads one of the generator's tokens as (engine/verifiers/reading.py),
    from the two tokenizers without weights, as the run measures it; 1 (a step read in as many tokens as the
    generator wrote) where one cannot be read, or the verifier reads no text."""
    from engine.errors import BeamwiseError
    from engine.verifiers.families import load_prm_tokenizer
    from engine.verifiers.reading import most_tokens_per_token

    if verifier not in ("prm", "self-judge") or (verifier == "prm" and not verifier_model):
        return 1
    try:
        generator = _tokenizer(source)
        reader = load_prm_tokenizer(verifier_model) if verifier == "prm" else generator
    except (BeamwiseError, OSError, ValueError):
        return 1
    with _COUNTING:
        return most_tokens_per_token(generator, reader)
