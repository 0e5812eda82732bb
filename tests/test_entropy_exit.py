"""RKSC's layer-entropy exit: exact where it does not fire, the lens at the exit layer where it does, kept
candidates' skipped layers completed to the full pass's KV, honest layer accounting, clear refusals."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from transformers import LlamaConfig, MistralConfig

from engine.config import CacheConfig, SearchConfig
from engine.search import run
from engine.verifiers import ExitRule, StepToScore, make_verifier, prm_verifier
from engine.verifiers.entropy_exit import REFERENCE_VOCAB, LayersUnavailable, lens_entropy, with_exit
from engine.verifiers.synthetic_prm import _TINY, SYNTHETIC_PRMS, synthetic_prm

CPU = torch.device("cpu")
QUESTION = "Tom has 3 apples and buys 4 more. How many?"
CHILDREN = ("He buys 4.\n\n", "Three plus four.\n\n", "Add them: 3 + 4 = 7.\n\n")
NEVER = ExitRule(theta=1e-6)  # no entropy is that low: the exit never fires
ALWAYS = ExitRule(theta=1e3, delta=1e3)  # every entropy is under it: the exit fires at the first chance
LENS_PRMS = ("tiny-math-shepherd", "tiny-rlhflow-prm")


@pytest.fixture(autouse=True)
def deeper_prms(monkeypatch):
    """The synthetic Math-Shepherd and RLHFlow PRMs with 4 layers instead of 2, so an exit has layers to skip."""
    deeper = {**_TINY, "num_hidden_layers": 4}
    for name, config in (("tiny-math-shepherd", MistralConfig), ("tiny-rlhflow-prm", LlamaConfig)):
        entry = dataclasses.replace(SYNTHETIC_PRMS[name], config=lambda config=config: config(**deeper))
        monkeypatch.setitem(SYNTHETIC_PRMS, name, entry)


def build(name: str, loaded, rule: ExitRule | None):
    """A fresh verifier: self-judge over `loaded`, or a synthetic PRM (whose LM head is its lens)."""
    if name == "self-judge":
        return make_verifier("self-judge", loaded, exit_rule=rule)
    parts = synthetic_prm(name, CPU, torch.float32)
    return with_exit(prm_verifier(parts), parts.head, rule)


def segment_kv(verifier, key) -> torch.Tensor:
    """The KV `[L, 2, H, T, D]` of `key`'s own segment, read back from the verifier's pools."""
    node = verifier.nodes[key]
    L, two, H, _, D = verifier.kv.slot_shape
    tokens = node.length - (node.parent.length if node.parent is not None else 0)
    out = torch.empty(L, two, H, tokens, D, dtype=next(verifier.body.parameters()).dtype)
    verifier.kv.load(node.handle, out)
    return out


def first_step(verifier):
    items = [StepToScore(QUESTION, (), c, ()) for c in CHILDREN]
    return items, verifier.score(items)


def second_step(verifier):
    items = [StepToScore(QUESTION, (CHILDREN[2],), c, ()) for c in CHILDREN]
    return items, verifier.score(items)


@pytest.mark.parametrize("name", ["self-judge", *LENS_PRMS])
def test_where_the_exit_never_fires_scores_and_costs_are_the_plain_pass(tiny_qwen2, name):
    plain, exiting = build(name, tiny_qwen2, None), build(name, tiny_qwen2, NEVER)
    for step in (first_step, second_step):
        assert step(exiting)[1] == pytest.approx(step(plain)[1], abs=1e-6)
        kept = [(QUESTION, CHILDREN[2])]
        cost, plain_cost = exiting.settle(kept), plain.settle(kept)
        assert (cost.tokens, cost.tokens_full) == (plain_cost.tokens, plain_cost.tokens_full)
        layers = cost.exit.layers
        prefix = len(exiting.layout.prefix(QUESTION)) if step is first_step else 0  # an ancestor: never exits
        assert cost.exit.exit_layers == (layers,) * 3
        assert cost.exit.layer_tokens == cost.exit.layer_tokens_full == (cost.tokens - prefix) * layers


def test_an_exit_reads_the_scores_through_the_lens_at_its_layer(tiny_qwen2):
    verifier = build("self-judge", tiny_qwen2, ALWAYS)
    items, scores = first_step(verifier)
    cost = verifier.settle([])
    assert cost.exit.exit_layers == (2, 2, 2)
    for item, score in zip(items, scores, strict=True):
        ids = torch.tensor([verifier.path_ids(item)])
        with torch.inference_mode():
            hidden = verifier.body(input_ids=ids, output_hidden_states=True).hidden_states[2][:, -1]  # [1, H]
            expected = float(verifier.readout(verifier.body.norm(hidden))[0])
        assert score == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("name", ["self-judge", *LENS_PRMS])
def test_kept_candidates_get_the_skipped_layers_kv_of_the_full_pass(tiny_qwen2, name):
    plain, exiting = build(name, tiny_qwen2, None), build(name, tiny_qwen2, ALWAYS)
    first_step(plain), first_step(exiting)
    kept = [(QUESTION, CHILDREN[0]), (QUESTION, CHILDREN[2])]
    assert all(exiting.nodes[key].layers_run == 2 for key in kept)  # the exited pass held 2 layers' KV
    plain.settle(kept)
    exiting.settle(kept)
    for key in kept:
        assert exiting.nodes[key].pending is None
        torch.testing.assert_close(segment_kv(exiting, key), segment_kv(plain, key), atol=1e-5, rtol=1e-4)
    exiting.exit = plain.exit = None  # the next step through every layer reads the completed KV
    assert second_step(exiting)[1] == pytest.approx(second_step(plain)[1], abs=1e-4)


@pytest.mark.parametrize(("name", "layers"), [("self-judge", 6), ("tiny-rlhflow-prm", 4)])
def test_pruned_candidates_save_their_skipped_layers_and_kept_ones_pay_them_back(tiny_qwen2, name, layers):
    verifier = build(name, tiny_qwen2, ALWAYS)  # self-judge (Qwen2) runs a probe it drops; RLHFlow has none
    first_step(verifier)
    verifier.settle([(QUESTION, CHILDREN[2])])
    items, _ = second_step(verifier)
    probe = len(verifier.layout.probe(QUESTION))
    bodies = [len(verifier.layout.body(QUESTION, i.previous_steps, i.step)) for i in items]
    cost = verifier.settle([items[1].key])
    ran = sum(bodies) + probe * len(items)
    assert cost.exit.exit_layers == (2, 2, 2)
    assert cost.exit.layer_tokens_full == ran * layers
    assert cost.exit.layer_tokens == ran * 2 + bodies[1] * (layers - 2)  # the kept body's later layers only
    assert verifier.nodes[items[1].key].pending is None


@pytest.mark.parametrize("name", ["self-judge", *LENS_PRMS])
def test_the_exit_within_a_tight_verifier_share_gives_the_scores_of_the_exit_without_one(tiny_qwen2, name):
    free, tight = build(name, tiny_qwen2, ALWAYS), build(name, tiny_qwen2, ALWAYS)
    path_tokens = len(tight.path_ids(StepToScore(QUESTION, (CHILDREN[2],), CHILDREN[1], ())))
    tight.use_budget(tight.kv.arena_slots(3, path_tokens) * tight.kv.block_bytes, block_size=4)
    kept = [(QUESTION, CHILDREN[0]), (QUESTION, CHILDREN[2])]
    assert first_step(tight)[1] == pytest.approx(first_step(free)[1], abs=1e-6)
    assert tight.settle(kept).exit == free.settle(kept).exit  # the same exits, the same completions
    for key in kept:
        torch.testing.assert_close(segment_kv(tight, key), segment_kv(free, key), atol=1e-6, rtol=1e-5)
    items, scores = second_step(tight)
    assert scores == pytest.approx(second_step(free)[1], abs=1e-6)
    assert tight.memory().host_bytes > 0  # the share is tight: segments moved to the host
    assert tight.memory().peak_device_bytes <= tight.kv.budget_bytes
    assert tight.settle([items[1].key]).exit == free.settle([items[1].key]).exit
    torch.testing.assert_close(segment_kv(tight, items[1].key), segment_kv(free, items[1].key), atol=1e-6, rtol=1e-5)


def test_the_audit_runs_every_layer_and_compares_the_early_choice(tiny_qwen2):
    verifier = build("self-judge", tiny_qwen2, ExitRule(theta=1e3, delta=1e3, audit=True))
    _, scores = first_step(verifier)
    cost = verifier.settle([(QUESTION, CHILDREN[1])])
    assert cost.exit.exit_layers == (2, 2, 2)
    assert cost.exit.layer_tokens == cost.exit.layer_tokens_full  # nothing saved while auditing
    assert cost.exit.agrees is not None
    assert verifier.nodes[(QUESTION, CHILDREN[1])].pending is None
    plain = build("self-judge", tiny_qwen2, None)
    full = first_step(plain)[1]
    assert cost.exit.agrees == (scores.index(max(scores)) == full.index(max(full)))


def test_thresholds_scale_with_the_log_of_the_vocabulary():
    rule = ExitRule()
    assert rule.for_vocab(REFERENCE_VOCAB) == pytest.approx((8.0, 3.0))
    theta, delta = rule.for_vocab(512)
    assert theta == pytest.approx(8.0 * math.log(512) / math.log(REFERENCE_VOCAB))
    assert delta / theta == pytest.approx(3.0 / 8.0)
    assert float(lens_entropy(torch.zeros(1, 512))[0]) == pytest.approx(math.log(512))
    with pytest.raises(ValueError, match="positive"):
        ExitRule(theta=0)
    with pytest.raises(ValueError, match="previous layer"):
        ExitRule(first_layer=1)


def test_verifiers_without_a_lens_or_layers_are_refused_clearly(tiny, tiny_opt):
    for prm in ("tiny-qwen-prm", "tiny-skywork-prm"):
        parts = synthetic_prm(prm, CPU, torch.float32)
        with pytest.raises(LayersUnavailable, match="reward head on its last layer"):
            make_verifier("prm", tiny, f"synthetic:{prm}", exit_rule=ALWAYS)
        assert prm_verifier(parts).exit is None
    with pytest.raises(LayersUnavailable, match="cannot run layer by layer"):
        make_verifier("self-judge", tiny_opt, exit_rule=ALWAYS)
    with pytest.raises(LayersUnavailable, match="runs no model"):
        make_verifier("logprob", tiny, exit_rule=ALWAYS)
    with pytest.raises(ValueError, match="needs a verifier that runs a model"):
        SearchConfig(verifier="logprob", entropy_exit=True)


def _search(loaded, **changes) -> list:
    config = SearchConfig(beams=2, width=2, step_tokens=4, step_delimiter=None, max_steps=3, verifier="self-judge",
                          **changes)
    return list(run(QUESTION, loaded, config, CacheConfig()))


def test_a_search_with_an_exit_that_never_fires_is_the_plain_search(tiny_qwen2):
    plain, exiting = _search(tiny_qwen2), _search(tiny_qwen2, entropy_exit=True, entropy_theta=1e-6)
    scored = [[(e.id, e.parent, e.text, e.score) for e in events if e.type == "candidate_scored"]
              for events in (plain, exiting)]
    assert [s[:3] for s in scored[1]] == [s[:3] for s in scored[0]]
    assert [s[3] for s in scored[1]] == pytest.approx([s[3] for s in scored[0]], abs=1e-6)
    assert exiting[-1].answer == plain[-1].answer
    steps = [e for e in exiting if e.type == "step_selected"]
    assert steps and all(e.exit_layer == e.verifier_layers == 6 for e in steps)
    assert all(e.verifier_layer_tokens == e.verifier_layer_tokens_full > 0 for e in steps)
    assert all(e.exit_layer is None for e in plain if e.type == "step_selected")


def test_a_search_that_exits_reports_its_layer_and_the_work_saved(tiny_qwen2):
    events = _search(tiny_qwen2, entropy_exit=True, entropy_theta=1e3, entropy_delta=1e3)
    assert events[-1].type == "run_finished"
    steps = [e for e in events if e.type == "step_selected"]
    assert all(e.exit_layer == 2 and e.verifier_layers == 6 for e in steps)
    assert all(0 < e.verifier_layer_tokens < e.verifier_layer_tokens_full for e in steps)


def test_a_verifier_that_cannot_exit_fails_the_run_with_what_to_do(tiny):
    events = list(run(QUESTION, tiny, SearchConfig(verifier="prm", verifier_model="synthetic:tiny-qwen-prm",
                                                    entropy_exit=True), CacheConfig()))
    assert events[-1].type == "run_failed"
    assert "no logit lens" in events[-1].message and "--entropy-exit" in events[-1].message


def test_the_bench_prints_off_exit_and_audit_with_the_layer_and_work_saved(capsys):
    from benchmarks.bench_entropy_exit import main

    argv = ["--model", "synthetic:tiny-qwen2", "--theta", "1000", "--delta", "1000", "--steps", "2",
            "--step-tokens", "3"]
    assert main(argv) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[2:]}
    assert rows["off"][1] == "-" and rows["exit"][1] == "2.0/6" and rows["exit+audit"][1] == "2.0/6"
    assert 0 < float(rows["exit"][4].rstrip("%")) < 100 and rows["exit+audit"][4] == "0.0%"
