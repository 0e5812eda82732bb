"""A step's text from its tokens, in whole characters.

A byte-level tokenizer writes a Chinese character, an emoji or a Hebrew letter as two to four tokens; a step
of k tokens often ends inside one. Each step decoded alone ended in U+FFFD and the next began with another,
so the tree, the transcript, the exports and the verifier read '�' where the answer (decoded whole) has the
character. A step's text is what its tokens add to the text of the tokens before them; a character its last
tokens only begin is left to the step that completes it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

CONTEXT = 8  # tokens before the step decoded with it: a character's bytes span at most 4 tokens
REPLACEMENT = "\ufffd"


def step_text(decode: Callable[[Sequence[int]], str], before: Sequence[int], tokens: Sequence[int],
              ends_path: bool) -> str:
    """The text `tokens` add after `before` (the path's earlier tokens); when the path goes on (not
    `ends_path`), without the start of a character its next step completes."""
    context = list(before[-CONTEXT:])
    lead = decode(context).rstrip(REPLACEMENT) if context else ""
    text = decode(context + list(tokens))
    text = text[len(lead):] if text.startswith(lead) else decode(tokens)  # a tokenizer that tidies across them
    return text if ends_path else text.rstrip(REPLACEMENT)
