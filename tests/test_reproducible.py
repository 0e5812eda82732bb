"""A seeded search repeats: its draws do not depend on what ran before it, and it records what its floats depend on."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from app.cli import build_parser, main
from app.options import configs_from_args
from app.threads import choose_threads
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.models import load_model
from engine.search import run

TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--max-steps", "2"]
QUESTIONS = ("What is 2 + 3?", "Tom has 4 pens and buys 3. How many?", "What is 9 - 4?")


@pytest.fixture
def keep_threads():
    """`main` sizes torch's pool for the whole process: give the next tests theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _texts(loaded, question: str, search: SearchConfig, cache: CacheConfig) -> list[tuple]:
    events = list(run(question, loaded, search, cache))
    assert events[-1].type == "run_finished"
    return sorted((e.step, e.id, e.parent, e.text) for e in events if e.type == "candidate_text")


def test_a_problem_samples_the_same_alone_or_after_other_problems_methods_and_policies():
    loaded = load_model(ModelSpec("synthetic:tiny-llama"))
    search = SearchConfig(beams=2, width=2, step_tokens=6, max_steps=3, temperature=0.9, step_delimiter="c", seed=7)
    cache = CacheConfig(prefix_cache=False)
    alone = _texts(loaded, QUESTIONS[2], search, cache)
    for question in QUESTIONS[:2]:  # other problems and methods first, as `eval --compare` runs them
        for method in ("greedy", "dvts", "best-of-n"):
            _texts(loaded, question, dataclasses.replace(search, method=method), cache)
    assert _texts(loaded, QUESTIONS[2], search, cache) == alone
    spread = dataclasses.replace(cache, policy="lbs", speculative=True)  # other groups and schedule, same draws
    assert _texts(loaded, QUESTIONS[2], search, spread) == alone


def test_eval_computes_every_prompt_unless_the_prefix_cache_is_asked_for():
    """A cached prompt's KV is not bit-equal to a computed one: an eval's problem would sample by its history."""
    args = build_parser().parse_args(["eval", "p.jsonl"])
    assert configs_from_args(args)[2].prefix_cache is False
    args = build_parser().parse_args(["eval", "p.jsonl", "--prefix-cache"])
    assert configs_from_args(args)[2].prefix_cache is True
    run_args = build_parser().parse_args(["run", "Q?"])  # run and the window keep it: the speed is theirs
    assert configs_from_args(run_args)[2].prefix_cache is True


def test_the_threads_option_wins_over_the_environment_and_the_load():
    assert choose_threads({"BEAMWISE_THREADS": "3"}, cores=8, load=0.0, given=2).threads == 2
    assert choose_threads({}, cores=8, load=7.0, given=4).reason == "--threads 4"
    with pytest.raises(ValueError, match="--threads must be 1 or more"):
        choose_threads({}, cores=2, load=0.0, given=0)


def test_a_seeded_run_records_its_thread_count_and_torch(capsys, keep_threads):
    assert main(["run", "What is 2 + 2?", *TINY, "--no-save", "--json", "--threads", "1", "--seed", "5"]) == 0
    started = json.loads(capsys.readouterr().out.splitlines()[0])
    assert started["type"] == "run_started"
    facts = started["numerics"]
    assert facts["threads"] == 1
    assert facts["torch"] == torch.__version__
    assert (facts["device"], facts["dtype"]) == ("cpu", "float32")


def test_an_eval_records_its_numerics_and_names_them_for_a_rerun(tmp_path, capsys, keep_threads):
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"question": "What is 2 + 2?", "answer": 4}\n', encoding="utf-8")
    out = tmp_path / "out.json"
    assert main(["eval", str(problems), *TINY, "--no-save", "--threads", "1", "--json", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["seed"] == 0
    assert data["numerics"]["threads"] == 1
    assert data["threads_chosen_by"] == "--threads 1"
    assert "rerun with --seed 0 --threads 1" in capsys.readouterr().out
