"""`--backend openai` verifiers and lookahead against the fake server: the self-judge through the completions
endpoint, a PRM here beside the server, a PRM served by vLLM's /pooling, and lookahead roll-outs."""

from __future__ import annotations

import math

import pytest

from engine.backends.openai import OpenAICompletions
from engine.config import SearchConfig
from tests.fake_openai import PRM, FakeServer
from tests.test_remote import QUESTION, config, events_of


@pytest.mark.parametrize("mode", ["ok", "llama.cpp"])
def test_the_self_judge_asks_the_served_model(mode: str) -> None:
    """Each candidate is judged by one greedy one-token request; the fake judges a step with "idea 0" wrong."""
    search = SearchConfig(beams=2, width=2, step_tokens=16, max_steps=4, verifier="self-judge")
    with FakeServer(mode=mode) as server:
        events = events_of(server.url, search)
    assert events[-1].type == "run_finished" and events[0].verifier == "self-judge"
    judged = [r for r in server.requests if r["max_tokens"] == 1]
    assert len(judged) == 12 and all(r["temperature"] == 0.0 and r["logprobs"] == 10 for r in judged)
    assert all(r["prompt"].count("Steps so far:") == 1 for r in judged)
    assert any("Step 1: idea" in r["prompt"] and "Step 2: idea" in r["prompt"] for r in judged)  # the whole path
    scored = [e for e in events if e.type == "candidate_scored"]
    for e in scored:  # P(yes) / (P(yes) + P(no)) of the fake's top log-probabilities
        assert e.score == pytest.approx(0.2 if "idea 0" in e.text else 0.9)
    selected = [e for e in events if e.type == "step_selected"]
    assert all(s.verifier_tokens > 0 for s in selected)


def test_a_judge_without_top_logprobs_is_said() -> None:
    search = SearchConfig(beams=1, width=2, step_tokens=16, max_steps=2, verifier="self-judge")
    with FakeServer(mode="no-top-logprobs") as server:
        events = events_of(server.url, search)
    assert events[-1].type == "run_failed" and events[-1].error == "LogprobsUnavailable"
    assert "top log-probabilities" in events[-1].message
    assert [e.type for e in events].count("candidate_text") == 2  # the step was made; its judging failed
    with FakeServer() as server:
        top, tokens = OpenAICompletions(config(server.url)).first_token_choices("Is it?\nAnswer:", 10)
    assert set(top) == {" Yes", " No", " Maybe"} and tokens > 0


def test_lookahead_rolls_each_child_out_greedily() -> None:
    """K=1: every unfinished child gets one greedy request continuing its path; the roll-out is scored, not kept."""
    search = SearchConfig(beams=2, width=2, step_tokens=16, max_steps=4, lookahead=1)
    with FakeServer() as server:
        events = events_of(server.url, search)
    assert events[-1].type == "run_finished"
    texts = {e.id: e for e in events if e.type == "candidate_text"}
    rolls = [r for r in server.requests if r["temperature"] == 0.0]
    unfinished = [t for t in texts.values() if not t.finished]
    assert len(texts) == 12 and len(rolls) == len(unfinished)  # no node for a roll-out
    assert len(server.requests) == 12 + len(rolls)
    for t in unfinished:  # each roll-out continues its child's own path
        assert sum(r["prompt"].endswith(t.text) for r in rolls) >= 1
    # the fake answers 4 words a step, 5 for the answer (its third step): roll-out tokens count as generated
    roll_tokens = sum(5 if r["prompt"].split("Solution:\n")[-1].count("\n\n") >= 2 else 4 for r in rolls)
    tree_tokens = sum(t.tokens for t in texts.values())
    assert events[-1].candidate_tokens == tree_tokens + roll_tokens
    # scored at the roll-out's end: a step-2 child's roll-out is the 5-word answer, with the fake's log-probabilities
    # for its seed (the child's id); the child's own 4 words would give another score
    scored = [e for e in events if e.type == "candidate_scored" and e.step == 2 and not e.finished]
    assert scored
    for e in scored:
        rolled = [-((e.id + i) % 7 + 1) / 10 for i in range(5)]
        assert e.score == pytest.approx(math.exp(sum(rolled) / 5))


def test_a_local_prm_scores_the_servers_steps_and_keeps_its_kv() -> None:
    """The generator on the server, a PRM here: it reads the steps' text; its KV for kept paths is reused."""
    search = SearchConfig(
        beams=2, width=2, step_tokens=16, max_steps=4, verifier="prm", verifier_model="synthetic:tiny-qwen-prm"
    )
    with FakeServer() as server:
        events = events_of(server.url, search)
    assert events[-1].type == "run_finished" and events[0].verifier != "logprob"
    assert all(0.0 <= e.score <= 1.0 for e in events if e.type == "candidate_scored")
    selected = [e for e in events if e.type == "step_selected"]
    assert selected[0].verifier_tokens > 0
    assert all(s.verifier_tokens < s.verifier_tokens_full for s in selected[1:])  # kept paths are not re-read


def test_a_prm_served_by_vllm_scores_each_path() -> None:
    """--verifier-endpoint: each candidate's path goes to /pooling as a Qwen2.5-Math-PRM chat; the reward is
    P(+) at its last <extra_0> (the fake pools 0.2 for a step with "idea 0", else 0.9)."""
    search = SearchConfig(beams=2, width=2, step_tokens=16, max_steps=4, verifier="prm", verifier_model=PRM)
    with FakeServer(mode="prm") as server:  # the PRM's name is checked against its server's model list first
        events = events_of(server.url, search, prm_endpoint=server.url)
    assert events[-1].type == "run_finished"
    scored = [e for e in events if e.type == "candidate_scored"]
    assert len(server.pooled) == len(scored) == 12
    for e in scored:
        assert e.score == pytest.approx(0.2 if "idea 0" in e.text else 0.9)
    chat = server.pooled[-1]["messages"]
    assert [m["role"] for m in chat] == ["system", "user", "assistant"] and chat[1]["content"] == QUESTION
    assert chat[2]["content"].count("<extra_0>") == 3 and chat[2]["content"].endswith("<extra_0>")


def test_a_wrong_prm_name_on_the_prm_server_is_said() -> None:
    search = SearchConfig(beams=1, width=2, step_tokens=16, max_steps=2, verifier="prm", verifier_model="no-prm")
    with FakeServer(mode="prm") as server:
        events = events_of(server.url, search, prm_endpoint=server.url)
    assert events[-1].type == "run_failed" and events[-1].error == "ServedModelNotFound"
    assert "not 'no-prm'. Pass --verifier-model as the server names it" in events[-1].message


def test_the_entropy_exit_runs_for_a_local_prm_and_is_refused_for_a_verifier_on_a_server() -> None:
    exiting = {"entropy_exit": True, "entropy_theta": 1e3, "entropy_delta": 1e3}  # fires at the first chance
    local = SearchConfig(beams=2, width=2, step_tokens=16, max_steps=2, verifier="prm",
                         verifier_model="synthetic:tiny-rlhflow-prm", **exiting)
    judge = SearchConfig(beams=1, width=2, step_tokens=16, max_steps=2, verifier="self-judge", **exiting)
    with FakeServer() as server:
        events, refused = events_of(server.url, local), events_of(server.url, judge)
    assert events[-1].type == "run_finished"
    selected = [e for e in events if e.type == "step_selected"]
    assert all(s.exit_layer == s.verifier_layers == 2 for s in selected)  # 2 layers: nothing after layer 2
    assert refused[-1].type == "run_failed" and "cannot run there" in refused[-1].message
    advice = refused[-1].message.split("cannot run there", 1)[1]  # not "or with the self-judge", which it runs
    assert "self-judge" not in advice and "Math-Shepherd or RLHFlow PRM loaded here" in advice


class Pools:
    """A PRM server's pooled output, as given."""

    def __init__(self, value: object) -> None:
        self.value = value

    def pool(self, messages: list[dict]) -> list:
        return [[0.1, self.value]]


@pytest.mark.parametrize("value", ["0.9", None, True, math.nan, 5.0, -0.1])
def test_a_served_prm_reward_that_is_not_a_probability_is_said(value) -> None:
    """Before, text ended the run as 'a fault in Beamwise' (ValueError) and NaN or 5.0 were scored as rewards."""
    from engine.errors import RemoteError
    from engine.verifiers.base import StepToScore
    from engine.verifiers.served_prm import ServedPRM

    step = StepToScore(QUESTION, (), "Step 1: idea 1.", ())
    with pytest.raises(RemoteError, match="which is not a probability"):
        ServedPRM(Pools(value)).score([step])
    assert ServedPRM(Pools(0.75)).score([step]) == [0.75] and ServedPRM(Pools(1)).score([step]) == [1.0]


@pytest.mark.parametrize("answer", [{"choices": ["Yes"]}, {"choices": "abc"}, {"choices": [None]}, ["Yes"]])
def test_a_judgement_without_a_choice_object_is_the_servers_error(answer) -> None:
    """Before, a choice that was text ('Yes') or null raised AttributeError: 'a fault in Beamwise'."""
    from engine.backends.openai import ServerConfig
    from engine.errors import ServerError

    backend = OpenAICompletions(ServerConfig("http://127.0.0.1:9", "m"))
    backend._request = lambda method, path, body, **kw: answer
    with pytest.raises(ServerError, match="an answer without choices"):
        backend.first_token_choices("Is it right?\nAnswer:", 10)
