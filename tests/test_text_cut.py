"""Cut text ends between grapheme clusters (checked against the regex module's \\X, Unicode's own rules)."""

from __future__ import annotations

import pytest
import regex

from app.formatting import brief
from app.store import short_title
from engine.text_cut import cut

SAMPLES = [
    "Un cafe\u0301 noir, s'il vous plai\u0302t",  # accents written apart (NFD)
    "नमस्ते दुनिया, क्षत्रिय कितने हैं?",  # Devanagari vowel signs, viramas and conjuncts
    "Flags 🇩🇪🇫🇷🇯🇵🇹🇷 and 🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",
    "Family 👨\u200d👩\u200d👧\u200d👦 thumbs 👍🏽👍🏿 heart ❤\ufe0f",
    "Hangul \u1100\u1161\u11a8\u1102\u1161 and 한국어",
    "שָׁלוֹם עוֹלָם and مَرْحَبًا بِالْعَالَمِ",
    "Ελληνικά ΣΟΦΙΑ, Русский, 日本語の質問、中文问题",
]


def _boundaries(text: str) -> set[int]:
    ends, at = {0}, 0
    for cluster in regex.findall(r"\X", text):
        at += len(cluster)
        ends.add(at)
    return ends


@pytest.mark.parametrize("text", SAMPLES)
def test_every_cut_ends_between_clusters(text: str) -> None:
    ends = _boundaries(text)
    for limit in range(len(text) + 1):
        kept = cut(text, limit)
        assert text.startswith(kept) and len(kept) <= limit and len(kept) in ends
        assert len(kept) == max(end for end in ends if end <= limit)  # and as long as it can be


@pytest.mark.parametrize("text", SAMPLES)
def test_brief_and_short_title_never_end_in_half_a_cluster(text: str) -> None:
    ends = _boundaries(" ".join(text.split()))
    for limit in range(2, len(text) + 1):
        for shown in (brief(text, limit), short_title(text, limit)):
            assert len(shown) <= limit
            assert len(shown.removesuffix("…").rstrip()) in ends or shown == text
