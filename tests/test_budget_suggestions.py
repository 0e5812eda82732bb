"""A refused KV budget's suggestion is enough in one raise, as the user reads it: the figure printed in the message
(rounded up at the precision shown, never down), typed back and parsed as `--kv-budget` parses it, runs the same
search. Auto's head-wise once suggested the prompt's need, which the first step then exceeded, and printed
61,440 B as '61.4 kB'."""

from __future__ import annotations

import dataclasses
import re

import pytest

from engine.config import CacheConfig, SearchConfig, parse_bytes
from engine.errors import format_bytes_up
from engine.search import run

SEARCH = SearchConfig(beams=2, width=2, step_tokens=8, max_steps=2, step_delimiter=None, seed=0)
PRM = dataclasses.replace(SEARCH, verifier="prm", verifier_model="synthetic:tiny-qwen-prm")
LOOKAHEAD = dataclasses.replace(SEARCH, lookahead=1)
QUESTIONS = ["hi", "hi " * 100]  # the tester's (its prompt needs a slot less than its steps under head-wise), a longer
SIZE = r"(\d+(?:\.\d+)? [kMGT]?B)"


def last_event(tiny, search: SearchConfig, policy: str, budget: int, question: str = QUESTIONS[0]):
    return list(run(question, tiny, search, CacheConfig(policy=policy, kv_budget_bytes=budget)))[-1]


def suggested(message: str) -> int:
    """The budget a refusal tells the user to raise to, read from its words as they would type it."""
    found = re.search(rf"and {SIZE} is enough for every step of this search", message) or re.search(
        rf"the smallest budget that works is {SIZE}", message)  # fmt: skip
    assert found, message
    return parse_bytes(found.group(1))


@pytest.mark.parametrize(
    "policy, search",
    [("auto", SEARCH), ("headwise", SEARCH), ("headwise", LOOKAHEAD), ("lbs", SEARCH), ("layerwise", SEARCH),
     ("in_device", SEARCH), ("auto", PRM), ("headwise", PRM)],
    ids=["auto", "headwise", "headwise-lookahead", "lbs", "layerwise", "in_device", "prm-auto", "prm-headwise"],
)  # fmt: skip
@pytest.mark.parametrize("start", [1_000, 50_000])
@pytest.mark.parametrize("question", QUESTIONS, ids=["short", "long"])
def test_the_printed_suggestion_runs_the_same_search(tiny, policy, search, start, question):
    failed = last_event(tiny, search, policy, start, question)
    assert failed.type == "run_failed" and failed.error == "KVBudgetTooSmall", failed
    budget = suggested(failed.message)
    finished = last_event(tiny, search, policy, budget, question)
    assert finished.type == "run_finished", (failed.message, finished)


def test_auto_refuses_with_headwise_the_smallest_budget_that_runs(tiny, refusals):
    """Head-wise's figure is exact: one byte less is refused at some step of the search."""
    failed = last_event(tiny, SEARCH, "auto", 1_000)
    assert "(headwise)" in failed.message, failed.message
    floor = refusals[-1].whole_bytes
    assert floor is not None and "the question's KV needs" in failed.message
    assert last_event(tiny, SEARCH, "auto", floor).type == "run_finished"
    assert last_event(tiny, SEARCH, "auto", floor - 1).error == "KVBudgetTooSmall"


@pytest.mark.parametrize(
    "size, text",
    [(0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (1001, "1.1 kB"), (61_440, "61.5 kB"), (180_200, "180.2 kB"),
     (180_201, "180.3 kB"), (999_901, "1.0 MB"), (1_000_001, "1.1 MB"), (32_000_000, "32.0 MB")],
)  # fmt: skip
def test_a_suggested_size_is_rounded_up_at_the_precision_shown(size, text):
    assert format_bytes_up(size) == text
    assert parse_bytes(text) >= size


def test_a_size_typed_with_a_decimal_is_read_exactly():
    """'32.3kB' is 32,300 B (a float product once read it as 32,299 B, one byte short of the figure shown)."""
    for tenths in range(10, 10_000):
        assert parse_bytes(f"{tenths // 10}.{tenths % 10}kB") == tenths * 100
    assert parse_bytes("1.5GiB") == 1_610_612_736 and parse_bytes("4096") == 4096


@pytest.mark.parametrize("share", [0.5, 0.25, 0.75])  # (an automatic share refuses for the verifier's half first)
def test_a_refused_generator_part_names_the_kv_budget_that_gives_it_that(tiny, share):
    """With a PRM keeping KV, a refusal of the generator's part named that part's figures: typed as --kv-budget
    they left the generator less than they name (half of it at a share of 0.5). The hint names the total, one at which
    the verifier's part holds its path too (at a share of 0.25 the generator's total alone left the verifier short)."""
    cache = lambda budget: CacheConfig(policy="headwise", kv_budget_bytes=budget, verifier_kv_share=share)  # noqa: E731
    failed = list(run(QUESTIONS[0], tiny, PRM, cache(2_000)))[-1]
    assert failed.type == "run_failed" and "the generator's share of the KV budget" in failed.message, failed
    found = re.search(rf"The generator gets that with --kv-budget {SIZE}", failed.message)
    assert found, failed.message
    total = parse_bytes(found.group(1).replace(" ", ""))
    assert list(run(QUESTIONS[0], tiny, PRM, cache(total)))[-1].type == "run_finished"
    # the part's own figure, typed as the budget, is not enough
    assert list(run(QUESTIONS[0], tiny, PRM, cache(suggested(failed.message))))[-1].type == "run_failed"
