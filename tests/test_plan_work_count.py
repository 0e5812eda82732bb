"""A plan-only run is stopped by a count of its work, rows and layers alike, never by how busy the machine is."""

from __future__ import annotations

from app.plan_run import planned_run
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.plan_only import planned_model

TINY = ModelSpec("synthetic:tiny-llama")
WIDE = SearchConfig(beams=16, width=8, step_tokens=8, max_steps=2)  # 128 candidates, in one group each step
NO_CLOCK = 1e9  # seconds: only the count can stop these runs


def test_a_wide_search_is_stopped_by_its_rows_though_it_makes_few_layer_calls():
    """The limit counted layer forward calls alone: 128 candidates in one group make 2 x 8 calls of 3 layers a
    run, so a 512-candidate search never reached 200,000 of them and a 30 s clock stopped it, after as many
    steps as the machine's load allowed. Rows count now: this run's 2 x 8 x 128 rows are past 500."""
    cache = CacheConfig(policy="lbs", kv_budget_bytes=1 << 30)
    whole = planned_run(TINY, WIDE, cache, 20, 1 << 30, "lbs", NO_CLOCK, work=10**6)
    assert whole.finished and whole.step_bytes >= 0
    stopped = planned_run(TINY, WIDE, cache, 20, 1 << 30, "lbs", NO_CLOCK, work=500)
    assert not stopped.finished and stopped.refused is None


def test_a_forward_call_counts_its_rows_and_the_models_layers():
    """The unit the limit holds: the prompt's call is 1 row over 3 layers, each decode call its group's rows."""
    from engine.search import run

    loaded = planned_model(TINY.source)
    search = SearchConfig(beams=2, width=2, step_tokens=4, max_steps=1, step_delimiter=None)
    cache = CacheConfig(policy="in_device", prefix_cache=False)
    events = list(run("", loaded, search, cache, prompt_ids=[3, 4, 5, 6]))
    assert events[-1].type == "run_finished"
    layers = loaded.kv_shape.num_layers
    # the prompt but its last token in one call; each of the step's 4 tokens for its 2 x 2 = 4 candidates
    assert loaded.model.work == (1 + layers) + 4 * (4 + layers)


def test_plan_sizes_torchs_threads_as_run_does(monkeypatch, capsys):
    """The plan-only run is many small operations: with a thread per core on a busy machine each waited at its
    barrier for a descheduled thread (12 s to its work limit instead of about 1 s), and --threads did nothing."""
    import app.cli
    from app.cli import main

    given = []
    monkeypatch.setattr(app.cli, "limit_threads", lambda **kwargs: given.append(kwargs["given"]))
    flags = ["--model", "synthetic:tiny-llama", "--device", "cpu", "--beams", "2", "--width", "2", "--max-steps", "1"]
    assert main(["plan", "What is 2+3?", *flags, "--threads", "1"]) == 0
    assert given == [1] and "[green]" in capsys.readouterr().out
