"""PRM families: scores read at each family's published position, checked against a plain uncached
transformers forward of the same ids; folders detected (or refused) by family."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, Qwen2ForCausalLM, Qwen2Model

from engine.errors import NotAPRM, PRMHeadMissing
from engine.verifiers import StepToScore, prm_verifier
from engine.verifiers.families import detect_family, load_prm
from engine.verifiers.synthetic_prm import save_synthetic_prm, synthetic_prm

CPU = torch.device("cpu")
QUESTION = "What is 2+3?"
STEPS = ("First add two and three.\n\n", "That gives 5.\n\n", "The answer is: 5")
NAMES = ("tiny-qwen-prm", "tiny-skywork-prm", "tiny-math-shepherd", "tiny-rlhflow-prm")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("prms")
    return {name: save_synthetic_prm(name, root / name) for name in NAMES}


def head_tensors(folder, prefix):
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys() if k.startswith(prefix)}


def reference_rewards(name, folder, ids, tokenizer):
    """Every step's reward from one plain forward of `ids`, at the family's published positions."""
    x = torch.tensor([ids])
    if name == "tiny-qwen-prm":
        h = Qwen2Model.from_pretrained(folder)(input_ids=x, use_cache=False).last_hidden_state[0]
        t = head_tensors(folder, "score.")
        logits = torch.relu(h @ t["score.0.weight"].T + t["score.0.bias"]) @ t["score.2.weight"].T + t["score.2.bias"]
        return torch.softmax(logits, -1)[x[0] == tokenizer.convert_tokens_to_ids("<extra_0>"), 1]
    if name == "tiny-skywork-prm":
        out = Qwen2ForCausalLM.from_pretrained(folder)(input_ids=x, output_hidden_states=True, use_cache=False)
        t = head_tensors(folder, "v_head.")
        value = torch.sigmoid(out.hidden_states[-1][0] @ t["v_head.summary.weight"][0] + t["v_head.summary.bias"])
        newlines = (x[0] == tokenizer.encode("\n")[-1]).nonzero().flatten()
        return value[newlines[1:]]  # the first newline ends the question, not a step
    logits = AutoModelForCausalLM.from_pretrained(folder)(input_ids=x, use_cache=False).logits[0]
    if name == "tiny-math-shepherd":
        plus_minus = tokenizer.encode("+ -")
        probs = torch.softmax(logits[:, [plus_minus[0], plus_minus[-1]]], -1)[:, 0]
        return probs[x[0] == tokenizer.convert_tokens_to_ids(" ки")]
    plus, minus, eot = (tokenizer.convert_tokens_to_ids(t) for t in ("+", "-", "<|eot_id|>"))
    probs = torch.softmax(logits[:, [plus, minus]], -1)[:, 0]
    ends = [i for i in range(len(ids) - 2) if ids[i + 1] == plus and ids[i + 2] == eot] + [len(ids) - 1]
    return probs[ends]


@pytest.mark.parametrize("name", NAMES)
def test_each_step_is_read_where_the_family_reads_it(name, folders):
    verifier = prm_verifier(synthetic_prm(name, CPU, torch.float32))
    scores = []
    for k in range(len(STEPS)):  # one step at a time, as the search asks, reusing the path's KV
        scores += verifier.score([StepToScore(QUESTION, STEPS[:k], STEPS[k], ())])
        verifier.settle([(QUESTION, *STEPS[: k + 1])])
    ids = verifier.path_ids(StepToScore(QUESTION, STEPS[:-1], STEPS[-1], ()))
    expected = reference_rewards(name, folders[name], ids, verifier.layout.tokenizer)
    assert len(expected) == len(STEPS)
    torch.testing.assert_close(torch.tensor(scores), expected.float(), atol=1e-4, rtol=0)


def test_pieces_are_tokenized_apart_and_concatenated():
    verifier = prm_verifier(synthetic_prm("tiny-qwen-prm", CPU, torch.float32))
    tok = verifier.layout.tokenizer
    ids = verifier.path_ids(StepToScore(QUESTION, STEPS[:1], STEPS[1], ()))
    tag = tok.convert_tokens_to_ids("<extra_0>")
    steps = [[*tok.encode(s.strip(), add_special_tokens=False), tag] for s in STEPS[:2]]
    assert ids[-len(steps[0]) - len(steps[1]) :] == steps[0] + steps[1]
    assert tok.decode(ids[: -len(steps[0]) - len(steps[1])]).endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("name", NAMES)
def test_a_folder_is_detected_and_scores_like_the_synthetic_model(name, folders):
    parts = load_prm(str(folders[name]), CPU, torch.float32)
    assert parts.family == synthetic_prm(name, CPU, torch.float32).family
    assert detect_family(folders[name]) == parts.family
    items = [StepToScore(QUESTION, (), s, ()) for s in STEPS]
    from_folder = prm_verifier(parts).score(items)
    built = prm_verifier(synthetic_prm(name, CPU, torch.float32)).score(items)
    assert from_folder == pytest.approx(built, abs=1e-6)


@pytest.mark.parametrize("name", ["tiny-qwen-prm", "tiny-skywork-prm"])
def test_a_prm_without_its_head_is_refused(name, tmp_path):
    folder = save_synthetic_prm(name, tmp_path / name, drop_head=True)
    with pytest.raises(PRMHeadMissing, match=r"head .*is missing"):
        load_prm(str(folder), CPU, torch.float32)


def test_a_plain_language_model_is_not_a_prm_unless_its_family_is_named(tmp_path, folders):
    folder = tmp_path / "some-llama"
    folder.mkdir()
    for file in folders["tiny-rlhflow-prm"].iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    config["_name_or_path"] = "someone/some-llama"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(NotAPRM, match=r"causal LM .*LlamaForCausalLM.* no reward head") as error:
        load_prm(str(folder), CPU, torch.float32)
    assert "rlhflow-prm:PATH" in error.value.user_message()
    assert load_prm(f"rlhflow-prm:{folder}", CPU, torch.float32).family == "rlhflow-prm"


@pytest.mark.parametrize(("source", "message"), [
    ("/no/such/prm", "does not exist"),
    ("synthetic:tiny-llama", "not a synthetic PRM"),
])
def test_bad_sources_say_why(source, message):
    with pytest.raises(NotAPRM, match=message):
        load_prm(source, CPU, torch.float32)


def test_a_folder_whose_architecture_is_unknown(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "model_type": "bert"}))
    with pytest.raises(NotAPRM, match="names BertModel"):
        detect_family(tmp_path)


@pytest.mark.parametrize("name", NAMES)
def test_a_plan_lays_a_path_out_with_the_layout_the_run_builds(name, folders):
    """The plan reads a PRM's layout without its weights (`verifier_layout`); a run builds it from the loaded PRM."""
    from engine.verifiers import verifier_layout

    planned = verifier_layout("prm", None, str(folders[name]))
    built = prm_verifier(load_prm(str(folders[name]), CPU, torch.float32)).layout
    assert type(planned) is type(built)
    assert planned.prefix(QUESTION) == built.prefix(QUESTION)
    assert planned.body(QUESTION, STEPS[:1], STEPS[1]) == built.body(QUESTION, STEPS[:1], STEPS[1])
