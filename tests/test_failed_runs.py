"""A run that failed or was cancelled: its last stderr line names its session, and no view calls its path chosen."""

from __future__ import annotations

import pytest

from app.cli import main
from app.export import render_session
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import SearchConfig
from tests.test_export import record

# the reproduction from the report: step 1 fits the KV budget, step 2 needs more than one candidate's share
FAILS_AT_STEP_2 = ["run", "What is 17 * 23?", "--model", "synthetic:tiny-llama", "--beams", "4", "--width", "2",
                   "--max-steps", "3", "--step-tokens", "16", "--seed", "5", "--threads", "1", "--policy", "lbs",
                   "--kv-budget", "140KB", "--step-delimiter", "none"]
UNCHOSEN = "No path was chosen: the run failed at step 2; the best beam so far:"


@pytest.fixture(scope="module")
def failed_db(tmp_path_factory) -> str:
    """A database whose session 1 failed at step 2 (KV budget too small), recorded by `beamwise run`."""
    db = str(tmp_path_factory.mktemp("failed") / "fail.db")
    assert main([*FAILS_AT_STEP_2, "--db", db]) == 2
    return db


@pytest.mark.parametrize("json_lines", [False, True], ids=["text", "json"])
def test_a_recorded_failure_ends_with_its_session(tmp_path, capsys, json_lines):
    db = str(tmp_path / "fail.db")
    assert main([*FAILS_AT_STEP_2, "--db", db, *(["--json"] if json_lines else [])]) == 2
    lines = capsys.readouterr().err.rstrip().splitlines()
    assert lines[-2].startswith("beamwise: error: KV budget 140.0 kB is too small for one candidate")
    assert lines[-1] == "beamwise: recorded as session 1 (failed at step 2)"
    with SessionStore(db) as store:
        assert store.get_session(1)["status"] == "failed"


def test_a_failure_before_step_1_says_so(tmp_path, capsys):
    argv = [*FAILS_AT_STEP_2, "--db", str(tmp_path / "fail.db")]
    argv[argv.index("lbs")], argv[argv.index("140KB")] = "in_device", "2KB"  # the question's KV does not fit
    assert main(argv) == 2
    assert capsys.readouterr().err.rstrip().splitlines()[-1] == "beamwise: recorded as session 1 (failed before step 1)"


def test_nothing_is_said_recorded_without_a_database(capsys):
    assert main([*FAILS_AT_STEP_2, "--no-save"]) == 2
    err = capsys.readouterr().err
    assert "recorded as" not in err and err.rstrip().splitlines()[-1].startswith("beamwise: error: KV budget")


def test_where_a_run_failed():
    from app.session.steps import failure_point

    assert failure_point(0, 0) == "before step 1"
    assert failure_point(2, 1) == "at step 2"
    assert failure_point(3, 3) == "after step 3"  # every step it started was chosen: it failed in the answer


def failed_in(last: type, step: int | None) -> list[object]:
    """A fake run cut after its first `last` event of `step` (None: after it started), then failed."""
    events = []
    for event in fake_run("q"):
        events.append(event)
        if isinstance(event, last) and getattr(event, "step", None) == step:
            break
    return [*events, ev.RunFailed(error="KVBudgetTooSmall", message="too small")]


@pytest.mark.parametrize(("last", "step", "where", "title"), [
    (ev.PrefillDone, None, "before step 1", "The search could not run"),
    (ev.StepStarted, 2, "at step 2", "The search stopped at step 2"),
    (ev.StepSelected, 2, "after step 2", "The search stopped after step 2"),
])
def test_the_window_the_exports_and_run_place_a_failure_alike(last, step, where, title):
    """The step a failed run stopped at was decided three times, from the window's run record, the exports' tree
    and `run`'s own counters; each now reads `failure_point`, and the tree's steps give the record's answer."""
    from app.session import SessionModel
    from app.session.model import failure_title
    from app.session.steps import failure_point

    model = SessionModel(layout=False)
    model.apply_many(failed_in(last, step))
    assert model.run.failed_where == where
    assert failure_point(model.tree.current_step, model.tree.last_selected_step) == where
    assert failure_title(model.run) == title


def test_sessions_show_of_a_failed_run_chose_no_path(failed_db, capsys):
    assert main(["sessions", "show", "1", "--db", failed_db]) == 0
    out = capsys.readouterr().out
    assert "chosen path:" not in out
    lines = out.splitlines()
    best = lines.index(UNCHOSEN)
    assert lines[best + 1].startswith("  step 1 #") and lines[best + 2] == ""


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_the_export_of_a_failed_run_follows_its_best_beam(failed_db, fmt, capsys):
    assert main(["sessions", "export", "1", "--db", failed_db, "--format", fmt]) == 0
    text = capsys.readouterr().out
    assert "Chosen path" not in text and UNCHOSEN in text
    if fmt == "md":
        assert f"## Best beam so far\n\n{UNCHOSEN}\n\n### Step 1 (candidate" in text
    else:
        assert f'<p class="unchosen">{UNCHOSEN}</p>\n<h3>Step 1 ' in text


def cancelled_run():
    stopped = []
    stream = fake_run("q", SearchConfig(beams=2, width=2, max_steps=4), should_stop=lambda: len(stopped) >= 2)
    return (stopped.append(e) or e if isinstance(e, ev.StepSelected) else e for e in stream)


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_the_export_of_a_cancelled_run_says_it_chose_no_path(fmt):
    store = SessionStore(memory=True)
    text = render_session(store, record(store, cancelled_run()), fmt)
    assert "Chosen path" not in text
    assert "No path was chosen: the run was cancelled after step 2; the best beam so far:" in text


def test_a_finished_run_still_shows_its_chosen_path():
    store = SessionStore(memory=True)
    text = render_session(store, record(store, fake_run("q", SearchConfig(beams=2, width=2, max_steps=2))), "md")
    assert "## Chosen path" in text and "No path was chosen" not in text
