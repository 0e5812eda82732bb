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


@dataclass(frozen=True)
class VerifierReading:
    """What the verifier reads of a path, counted by the layout its run builds: the tokens its format adds (the
    question as it reads it, around a step, the probe) and the most tokens it reads a generator token as."""

    prefix: int
    per_step: int
    probe: int
    reads_per_token: int


def verifier_reading(source: str, verifier: str, verifier_model: str | None, question: str | None
                     ) -> VerifierReading | None:  # fmt: skip
    """How the verifier reads `question`'s paths for the generator at `source`, from the tokenizers without
    weights (engine.verifiers.verifier_layout, engine.verifiers.reading), as the run counts them; None where a
    tokenizer cannot be read or the verifier reads no text. A run's verifier reads the new question alone, in
    its own format; with no question yet, a typical question's tokens stand for it."""
    from engine.errors import BeamwiseError
    from engine.verifiers import verifier_layout
    from engine.verifiers.path_kv import format_tokens
    from engine.verifiers.reading import reads_per_token

    if verifier not in ("prm", "self-judge") or (verifier == "prm" and not verifier_model):
        return None
    try:
        generator = _tokenizer(source)
        prm = verifier == "prm"
        layout = _prm_layout(source, verifier_model) if prm else verifier_layout(verifier, generator, None)
        with _COUNTING:
            prefix, per_step, probe = format_tokens(layout, question or "")
            reads = reads_per_token(generator, layout.tokenizer, verifier_model if prm else verifier)
    except (BeamwiseError, OSError, ValueError):
        return None
    return VerifierReading(prefix + (0 if question else DEFAULT_PROMPT_TOKENS), per_step, probe, reads)


@functools.lru_cache(maxsize=4)
def _prm_layout(source: str, verifier_model: str):
    """A PRM's layout, its tokenizer read once per generator and PRM: the plan bar plans again after every
    settings change. (Self-judge's is built each time: it keeps each question it splits.)"""
    from engine.verifiers import verifier_layout

    return verifier_layout("prm", _tokenizer(source), verifier_model)
