"""How many tokens the verifier can read one generator token as: its KV share is sized from it.

The verifier reads a step as text, in its own tokenizer. A PRM on another tokenizer (or the generator's own,
re-reading its bytes) can read a step of k generator tokens in more than k tokens: a byte that is part of a
character decodes to U+FFFD (three bytes), a long token of one vocabulary is several of another. The most a
single generator token reads as, over the generator's whole vocabulary, bounds a step at k times that.
"""

from __future__ import annotations

import weakref

from transformers import PreTrainedTokenizerBase

_MEASURED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # generator tokenizer -> {verifier: reads}


def reads_per_token(generator: PreTrainedTokenizerBase, verifier: PreTrainedTokenizerBase, key: str) -> int:
    """`most_tokens_per_token`, measured once per generator tokenizer and verifier `key` (its source) in a
    process: SmolLM2's 49k tokens take 0.4 s, and the window runs a loaded pair again and again."""
    measured = _MEASURED.setdefault(generator, {})
    if key not in measured:
        measured[key] = most_tokens_per_token(generator, verifier)
    return measured[key]


def most_tokens_per_token(generator: PreTrainedTokenizerBase, verifier: PreTrainedTokenizerBase) -> int:
    """The most tokens `verifier` reads any one of `generator`'s tokens as, at least 1.

    Each token's text is taken as it decodes after a letter (a SentencePiece decode drops the leading space
    of a text's first token). Joined, tokens' bytes make the same characters or fewer (U+FFFD's bytes
    become one character), and a tokenizer reads a joined text in no more tokens than its parts but where
    a merge across their boundary takes a piece from a longer merge: rare, and within a step's slack.
    """
    if not (hasattr(generator, "backend_tokenizer") and hasattr(verifier, "backend_tokenizer")):
        return _slowly(generator, verifier)  # a tokenizer without a Rust backend: the same count, about 3x slower
    gen, ver = generator.backend_tokenizer, verifier.backend_tokenizer
    anchor = gen.encode("a", add_special_tokens=False).ids[-1:]
    lead = len(gen.decode(anchor))
    ids = [[*anchor, i] for i in range(gen.get_vocab_size(with_added_tokens=True))]
    texts = [text[lead:] for text in gen.decode_batch(ids, skip_special_tokens=True)]
    return max(1, *(len(read.ids) for read in ver.encode_batch(texts, add_special_tokens=False)))


def _slowly(generator: PreTrainedTokenizerBase, verifier: PreTrainedTokenizerBase) -> int:
    """`most_tokens_per_token` through transformers' own calls, which every tokenizer has."""
    anchor = generator.encode("a", add_special_tokens=False)[-1:]
    lead = len(generator.decode(anchor))
    ids = [[*anchor, i] for i in range(len(generator))]
    texts = [text[lead:] for text in generator.batch_decode(ids, skip_special_tokens=True)]
    return max(1, *(len(read) for read in verifier(texts, add_special_tokens=False)["input_ids"]))
