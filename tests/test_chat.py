"""Conversation prompts: the whole conversation in order, ids that only grow from turn to turn, the clear
error for a conversation past the context, and the history a run reports."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from transformers import AutoTokenizer

from engine import events as ev
from engine.bundled import bundled_model_folder
from engine.chat import chat_ids
from engine.config import CacheConfig, SearchConfig
from engine.remote_search import prompt_text
from engine.search import SYSTEM_PROMPT, run
from engine.synthetic import synthetic_tokenizer

TURNS = [
    ("What is 2+3?", "2 plus 3 is 5.\n\nThe answer is: 5"),
    ("And times 4?", " Multiply: 5 x 4 = 20.\n\nThe answer is: 20"),  # a leading space: the boundary could merge
    ("Halve it.", "20 / 2 = 10.\n\nThe answer is: 10"),
]


@pytest.fixture(scope="module")
def chatml():
    """The bundled SmolLM2's tokenizer with its ChatML template (only the tokenizer is read)."""
    return AutoTokenizer.from_pretrained(bundled_model_folder(), local_files_only=True)


def _turn_prompts(encode) -> list[list[int]]:
    return [encode(TURNS[k][0], TURNS[:k]) for k in range(len(TURNS))]


def _assert_prefix_stable(prompts: list[list[int]]) -> None:
    for before, after in itertools.pairwise(prompts):
        assert len(after) > len(before)
        assert after[: len(before)] == before


def test_chatml_ids_of_each_turn_begin_the_next(chatml) -> None:
    prompts = _turn_prompts(lambda q, h: chat_ids(chatml, q, SYSTEM_PROMPT, h))
    _assert_prefix_stable(prompts)
    text = chatml.decode(prompts[-1])
    # the order: system, each earlier question and its chosen path's full text, then the new question
    marks = [SYSTEM_PROMPT, TURNS[0][0], TURNS[0][1], TURNS[1][0], TURNS[1][1].strip(), TURNS[2][0]]
    places = [text.index(mark) for mark in marks]
    assert places == sorted(places)
    assert text.count("<|im_start|>user") == 3 and text.count("<|im_start|>assistant") == 3
    assert text.endswith("<|im_start|>assistant\n")  # ends where the new answer starts


def test_chatml_ids_read_as_the_template_renders_the_conversation(chatml) -> None:
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    for q, a in TURNS[:2]:
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    messages.append({"role": "user", "content": TURNS[2][0]})
    rendered = chatml.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert chatml.decode(chat_ids(chatml, TURNS[2][0], SYSTEM_PROMPT, TURNS[:2])) == rendered


def test_synthetic_template_ids_of_each_turn_begin_the_next(tiny) -> None:
    _assert_prefix_stable(_turn_prompts(lambda q, h: tiny.encode_chat(q, SYSTEM_PROMPT, h)))


def test_no_template_layout_of_a_conversation(tiny) -> None:
    """A synthetic model's tokenizer without a chat template: the plain Question/Answer layout."""
    plain = synthetic_tokenizer(tiny.model.config.vocab_size)
    plain.chat_template = None
    prompts = _turn_prompts(lambda q, h: chat_ids(plain, q, SYSTEM_PROMPT, h))
    _assert_prefix_stable(prompts)
    assert plain.decode(prompts[0], skip_special_tokens=True) == f"{SYSTEM_PROMPT}\n\nQuestion: {TURNS[0][0]}\nAnswer:"
    expected = (f"{SYSTEM_PROMPT}\n\nQuestion: {TURNS[0][0]}\nAnswer: {TURNS[0][1]}\n\n"
                f"Question: {TURNS[1][0]}\nAnswer: {TURNS[1][1]}\n\nQuestion: {TURNS[2][0]}\nAnswer:")
    assert plain.decode(prompts[2], skip_special_tokens=True) == expected
    starts = plain.encode("", add_special_tokens=True)  # the tokenizer's start tokens, if any
    assert prompts[2][: len(starts)] == starts
    assert all(prompts[2].count(t) == prompts[0].count(t) for t in starts)  # once, not once per turn


def test_a_template_that_rewrites_earlier_turns_is_encoded_afresh() -> None:
    """A template whose turn k text is not a prefix of turn k+1's cannot keep the ids; it still reads right."""
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_folder(), local_files_only=True)
    tokenizer.chat_template = ("{% for m in messages %}{% if loop.last %}<|im_start|>{{ m.role }}\n{{ m.content }}"
                               "<|im_end|>\n{% else %}[{{ m.content }}]{% endif %}{% endfor %}<|im_start|>assistant\n")
    ids = chat_ids(tokenizer, "B?", None, [("A?", "a.")])
    first = chat_ids(tokenizer, "A?")
    assert ids[: len(first)] != first  # this template cannot keep turn 1's ids...
    messages = [{"role": "user", "content": "A?"}, {"role": "assistant", "content": "a."},
                {"role": "user", "content": "B?"}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered.startswith("[A?][a.]<|im_start|>user\nB?")
    assert tokenizer.decode(ids) == rendered  # ...and its conversation is still exactly what it renders


def test_remote_prompt_text_of_each_turn_begins_the_next() -> None:
    texts = [prompt_text(TURNS[k][0], TURNS[:k]) for k in range(len(TURNS))]
    for before, after in itertools.pairwise(texts):
        assert after.startswith(before)
    assert texts[0] == f"{SYSTEM_PROMPT}\n\nProblem: {TURNS[0][0]}\n\nSolution:\n"
    assert texts[2].index(TURNS[1][1].strip()) < texts[2].index(TURNS[2][0])


SMALL = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8, seed=3)


def test_a_follow_up_run_prefills_the_whole_conversation_and_reports_its_history(tiny) -> None:
    first = list(run(TURNS[0][0], tiny, SMALL, CacheConfig()))
    answer = first[-1].answer
    assert isinstance(first[-1], ev.RunFinished) and first[0].history == ()
    history = [(TURNS[0][0], answer)]
    events = list(run(TURNS[1][0], tiny, SMALL, CacheConfig(), history=history))
    started = events[0]
    assert started.history == ((TURNS[0][0], answer),)
    assert ev.from_dict(ev.to_dict(started)) == started  # the stored event replays the history exactly
    prefill = next(e for e in events if isinstance(e, ev.PrefillDone))
    assert prefill.prompt_tokens == len(tiny.encode_chat(TURNS[1][0], SYSTEM_PROMPT, history))
    alone = len(tiny.encode_chat(TURNS[0][0], SYSTEM_PROMPT))
    assert prefill.prompt_tokens > alone + len(tiny.tokenizer.encode(answer, add_special_tokens=False))


def test_a_conversation_past_the_context_says_to_start_a_new_one(tiny) -> None:
    long_answer = "word " * (tiny.context_length // 2)
    history = [("Q1?", long_answer), ("Q2?", long_answer)]
    events = list(run("Q3?", tiny, SMALL, CacheConfig(), history=history))
    failed = events[-1]
    assert isinstance(failed, ev.RunFailed) and failed.error == "InvalidPrompt"
    assert "conversation is" in failed.message and "3 turns" in failed.message
    assert "Start a new conversation" in failed.message
    short = list(run("Q3?", tiny, dataclasses.replace(SMALL, max_steps=1), CacheConfig()))
    assert isinstance(short[-1], ev.RunFinished)  # the same question alone still runs


def test_an_older_run_started_without_history_still_reads() -> None:
    data = ev.to_dict(ev.RunStarted("q", "m", "v", "cpu", True, "in_device", 1, {}, {}))
    del data["history"]
    assert ev.from_dict(data).history == ()


def test_a_remote_follow_up_sends_the_conversation_to_the_server() -> None:
    from engine.backends.openai import ServerConfig
    from engine.remote_search import run as remote_run
    from tests.fake_openai import MODEL, FakeServer

    history = [TURNS[0]]
    with FakeServer() as server:
        events = list(remote_run(TURNS[1][0], ServerConfig(server.url, MODEL, timeout_s=5.0, backoff_s=0.0),
                                 dataclasses.replace(SMALL, step_tokens=16), history=history))
    assert events[0].history == (TURNS[0],) and isinstance(events[-1], ev.RunFinished)
    assert server.requests and all(r["prompt"].startswith(prompt_text(TURNS[1][0], history))
                                   for r in server.requests)


@pytest.mark.parametrize(("turns", "start"), [(0, "Shorten the question"), (2, "Start a new conversation")])
def test_a_prompt_that_leaves_room_for_a_shorter_step_says_how_short(turns, start):
    """A prompt that fits but leaves no room for a whole step named only a shorter question or a new conversation:
    a lower --step-tokens fits it (a walkthrough ran 400-token steps after a 1,854-token conversation in 2,048)."""
    from engine.errors import InvalidPrompt
    from engine.search import check_prompt_fits

    with pytest.raises(InvalidPrompt) as refused:
        check_prompt_fits(1854, 2048, 400, turns)
    said = refused.value.user_message()
    assert start in said and "lower --step-tokens to 194 or less" in said, said
    assert "system prompt" in said  # the count is the whole prompt's, not the question's alone
    check_prompt_fits(1854, 2048, 194, turns)  # what it says fits
    with pytest.raises(InvalidPrompt) as full:
        check_prompt_fits(2048, 2048, 16, turns)
    assert "--step-tokens" not in full.value.user_message()  # no step fits: only a shorter prompt helps
