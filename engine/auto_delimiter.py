"""`--step-delimiter auto`: the step delimiter a random-weight model does hit, read from what it samples.

A random-weight model rarely emits "\\n\\n", so its steps would all run to the length cap and no row
would ever idle (nothing for speculative beam extension to fill). The most frequent token the model
samples in the bench's untimed warm-up ends steps often and at varied lengths: the mechanism on a
synthetic model, not a trained model's step lengths.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence

AUTO_DELIMITER = "auto"  # what `bench --step-delimiter` takes to pick one


def most_sampled_text(
    tokens: Iterable[int], decode: Callable[[Sequence[int]], str], eos_ids: Iterable[int] = ()
) -> str | None:
    """The text of the token sampled most often (ties: the one sampled first), or None when none qualifies.

    A token qualifies when it does not end the answer (EOS) and decodes on its own to non-empty text of
    whole characters (a byte-level token holding part of a character decodes to U+FFFD, which would
    match any other broken character).
    """
    eos = set(eos_ids)
    for token, _ in Counter(tokens).most_common():
        text = decode([token])
        if token not in eos and text and "\ufffd" not in text:
            return text
    return None
