"""`beamwise eval`: problem files checked line by line, the table and JSON, recording, Ctrl+C, calibration."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app import eval_runs
from app.cli import main
from app.early_exit import load_thresholds
from app.problems import ProblemsError, load_problems
from app.store import SessionStore
from engine.answers import extract_answer, same_answer

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "resources" / "problems" / "gsm-mini.jsonl"
TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "3", "--max-steps", "2"]


def write(tmp_path, *lines):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_shipped_set_has_sixty_integer_problems():
    problems = load_problems(SHIPPED)
    assert len(problems) >= 60
    assert all(int(p.answer) == float(p.answer) for p in problems)
    assert len({p.question for p in problems}) == len(problems)


def test_a_numeric_answer_is_read_as_its_text(tmp_path):
    path = write(tmp_path, '{"question": "Q?", "answer": 42}', '{"question": "R?", "answer": 2.5}')
    assert [p.answer for p in load_problems(path)] == ["42", "2.5"]


def test_a_folder_given_as_the_problems_file_is_named_as_a_folder(tmp_path):
    """It said 'cannot read it as text ([Errno 21] Is a directory ...); save it as UTF-8'."""
    with pytest.raises(ProblemsError, match="is a folder; give the problems file") as error:
        load_problems(tmp_path)
    assert "UTF-8" not in str(error.value)


def test_a_boxed_answer_expects_the_boxes_content(tmp_path):
    """'\\boxed{5}' was the expected answer as written, which no model's answer matched (every problem wrong)."""
    path = write(tmp_path, json.dumps({"question": "Q?", "answer": "\\boxed{5}"}),
                 json.dumps({"question": "R?", "answer": "So x = 2, and the answer is \\boxed{\\frac{1}{2}}."}))
    assert [p.answer for p in load_problems(path)] == ["5", "1/2"]
    assert same_answer(extract_answer("The answer is 5."), load_problems(path)[0].answer)


def test_an_answer_of_zero_is_an_answer(tmp_path):
    """`"answer": 0` was refused as 'the row has no answer' (0 is falsy)."""
    path = write(tmp_path, '{"question": "What is 2-2?", "answer": 0}', '{"question": "R?", "answer": 0.0}')
    assert [p.answer for p in load_problems(path)] == ["0", "0.0"]


def test_gsm8k_answers_end_with_four_hashes(tmp_path):
    path = write(tmp_path, '{"question": "Q?", "answer": "3 + 4 = 7\\n#### 7"}', "", '{"question": "R?", "answer": 9}')
    assert [(p.line, p.answer) for p in load_problems(path)] == [(1, "7"), (3, "9")]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ((), "the file has no problems"),
        (('{"question": "Q?", "answer": "1"}', "{oops"), "p.jsonl:2: not JSON"),
        (('["Q?", "1"]',), "p.jsonl:1: a JSON array, not an object; the file must be JSON Lines, one"),
        (('[{"question": "Q?", "answer": "1"}, {"question": "R?", "answer": "2"}]',), "p.jsonl:1: a JSON array"),
        (('"Q?"',), "p.jsonl:1: expected an object"),
        (('{"question": "Q?"}',), "p.jsonl:1: the row has no answer"),
        (('{"question": " ", "answer": ""}',), "p.jsonl:1: the row has no question and no answer"),
        (('{"question": "Q?", "answer": NaN}',), 'p.jsonl:1: the "answer" nan is not a finite number'),
        (('{"question": "Q?", "answer": ["4"]}',), 'p.jsonl:1: the "answer" must be text or a number, got a list'),
        (('{"question": "Q?", "answer": [2, 5]}',), r'write several numbers as text: "\(2, 5\)"'),
        (('{"problem": "Q?", "solution": "5"}',), r"no question and no answer \(its other keys: problem, solution\)"),
        (('{"question": "Q?", "answer": "\\\\boxed{}"}',), r'p.jsonl:1: the answer is empty after "####" or in its'),
        (('{"question": "Q?", "answer": "So \\\\boxed{ }."}',), r"p.jsonl:1: the answer is empty"),
        (('{"question": "Q?", "answer": true}',), 'p.jsonl:1: the "answer" must be text or a number, got bool'),
        (('{"question": {"q": 1}, "answer": 4}',), 'p.jsonl:1: the "question" must be text, got dict'),
    ],
)
def test_bad_files_name_the_file_and_line(tmp_path, lines, message):
    path = write(tmp_path, *lines) if lines else tmp_path / "p.jsonl"
    if not lines:
        path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ProblemsError, match=message):
        load_problems(path)


def test_a_file_from_windows_reads_as_written(tmp_path):
    """A byte-order mark, CRLF line ends, blank lines and no final line end: the lines keep their numbers."""
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"question": "Q?", "answer": "1 000"}\r\n\r\n{"question": "R?", "answer": "#### 2"}')
    assert [(p.line, p.question, p.answer) for p in load_problems(path)] == [(1, "Q?", "1 000"), (3, "R?", "2")]


def test_a_latin1_problem_set_names_the_line_to_fix(tmp_path):
    """It said "cannot read it as text ('utf-8' codec can't decode byte 0xe9 in position 61: invalid continuation
    byte)": no line, and a codec's words."""
    path = tmp_path / "p.jsonl"
    path.write_bytes('{"question": "Q?", "answer": "1"}\n{"question": "Café?", "answer": "2"}\n'.encode("latin-1"))
    with pytest.raises(ProblemsError, match=r"p\.jsonl:2: not UTF-8 text \(byte 0xe9; .*\); save it as UTF-8\.$"):
        load_problems(path)


def test_limit_stops_reading_at_the_problems_it_asks_for(tmp_path):
    """Every line was parsed before --limit cut the list: a broken row far past the limit refused the run."""
    path = write(tmp_path, '{"question": "Q?", "answer": "1"}', "", '{"question": "R?", "answer": "2"}', "{oops")
    assert [p.line for p in load_problems(path, limit=2)] == [1, 3]
    with pytest.raises(ProblemsError, match=r"p\.jsonl:4: not JSON"):
        load_problems(path)


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["eval", str(tmp_path / "missing.jsonl"), *TINY, "--no-save"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.jsonl: no such problems file" in err[0]
    assert main(["eval", str(SHIPPED), *TINY, "--compare", "beam,mcts", "--no-save"]) == 2
    assert "--compare takes methods from" in capsys.readouterr().err
    assert main(["eval", str(SHIPPED), *TINY, "--compare", "beam,Greedy,mcts", "--no-save"]) == 2
    assert "(got 'beam,Greedy,mcts': Greedy, mcts is none of them)" in capsys.readouterr().err
    assert main(["eval", str(SHIPPED), *TINY, "--compare", " , ", "--no-save"]) == 2
    assert "(got ' , ': no method)" in capsys.readouterr().err


def test_a_json_path_it_cannot_write_is_refused_before_any_problem_runs(tmp_path, capsys):
    """It raised IsADirectoryError out of main after every problem had run, and the results were lost."""
    assert main(["eval", str(SHIPPED), *TINY, "--no-save", "--limit", "1", "--json", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert f"cannot write {tmp_path}: Is a directory" in captured.err and "problems" not in captured.out


def test_an_existing_json_file_is_kept_when_the_eval_fails_before_its_results(tmp_path, capsys):
    """The path was checked by writing a stub over it, so a model that failed to load destroyed the last results."""
    out_json = tmp_path / "r.json"
    out_json.write_text('{"earlier": true}', encoding="utf-8")
    argv = ["eval", str(SHIPPED), "--model", str(tmp_path / "no-model"), "--no-save", "--json", str(out_json)]
    assert main(argv) == 2
    assert json.loads(out_json.read_text()) == {"earlier": True}
    assert not (tmp_path / "r.json.part").exists()


def test_a_json_path_that_is_the_problems_file_is_refused(tmp_path, capsys):
    """`--json p.jsonl` (a slip for the problems file) replaced the problems with the results."""
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    before = problems.read_text()
    assert main(["eval", str(problems), *TINY, "--no-save", "--json", str(tmp_path / "." / "p.jsonl")]) == 2
    assert "is the problems file" in capsys.readouterr().err and problems.read_text() == before


@pytest.mark.parametrize("tail", ["", "-wal", "-shm"])
def test_a_json_path_that_is_the_session_database_is_refused(tmp_path, capsys, tail):
    """`eval --db s.db --json s.db` wrote the results over the database: its 12 sessions were lost."""
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    db = tmp_path / "s.db"
    db.write_bytes(b"SQLite format 3\0")
    target = tmp_path / f"s.db{tail}"
    assert main(["eval", str(problems), *TINY, "--db", str(db), "--json", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--json {target} is the " in err[0] and "Pick another --json path." in err[0], err
    assert db.read_bytes() == b"SQLite format 3\0" and not (tmp_path / f"{target.name}.part").exists()


def test_a_db_path_with_a_tilde_is_checked_as_the_store_opens_it(tmp_path, monkeypatch):
    """The check expanded `~` in --db while the store opens the path as given (a folder named '~' here): `eval
    --db '~/s.db' --json '~/s.db'` compared the JSON with a file in the home folder and wrote over the database."""
    from app.json_out import refuse_the_database
    from app.options import UsageError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(UsageError, match="is the session database; the results would replace every session"):
        refuse_the_database("~/s.db", "~/s.db")
    refuse_the_database(str(tmp_path / "home" / "s.db"), "~/s.db")  # the home folder's file is another one


@pytest.mark.parametrize("command", ["eval", "bench"])
def test_a_json_path_that_is_the_default_session_database_is_refused(tmp_path, capsys, monkeypatch, command):
    """`--json` naming the default sessions.db replaced it too (eval without --db; bench, which has no --db)."""
    from app.db_path import default_db_path

    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    args = [str(write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}'))] if command == "eval" else []
    assert main([command, *args, "--model", "synthetic:tiny-llama", "--json", str(default_db_path())]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is the session database; the results would replace every session" in err[0], err
    assert not default_db_path().exists()


def test_a_json_path_under_a_file_says_the_file_is_not_a_folder(tmp_path, capsys):
    """`--json notes.txt/r.json` said "File exists", as if r.json were the trouble."""
    blocker = tmp_path / "notes.txt"
    blocker.write_text("x", encoding="utf-8")
    assert main(["eval", str(SHIPPED), *TINY, "--no-save", "--limit", "1", "--json", str(blocker / "r.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{blocker} is a file, not a folder; pick a writable --json path." in err[0], err


def test_a_db_path_that_is_the_problems_file_is_refused(tmp_path, capsys):
    """`--db p.jsonl` called the problems file a damaged session database and said to move it aside."""
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    before = problems.read_text()
    assert main(["eval", str(problems), *TINY, "--db", str(problems)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is the problems file, not a session database" in err[0], err
    assert problems.read_text() == before


def test_a_database_it_cannot_open_is_said_before_the_model_loads(tmp_path, capsys, monkeypatch):
    """The database was opened after the model had loaded: a minute's load of a local model, then the error."""
    import engine.models

    loads = []
    monkeypatch.setattr(engine.models, "load_model", lambda *a, **k: loads.append(a))
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    assert main(["eval", str(problems), *TINY, "--db", str(tmp_path)]) == 2
    assert "is a folder; pass a session database file" in capsys.readouterr().err and loads == []


def test_compare_prints_methods_side_by_side_writes_json_and_records(tmp_path, capsys):
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}', '{"question": "1+1?", "answer": "2"}')
    out_json, db = tmp_path / "r.json", tmp_path / "s.db"
    argv = ["eval", str(problems), *TINY, "--compare", "beam,best-of-n,dvts,greedy", "--json", str(out_json)]
    assert main([*argv, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "best-of-n" in line)
    assert header.split() == ["beam", "best-of-n", "dvts", "greedy"]
    assert "accuracy" in out and "pass@N" in out and "verify-skip rate" in out
    data = json.loads(out_json.read_text())
    assert [m["method"] for m in data["methods"]] == ["beam", "best-of-n", "dvts", "greedy"]
    assert all(m["problems"] == 2 and 0 <= m["accuracy"] <= 1 for m in data["methods"])
    assert {m["method"]: m["n"] for m in data["methods"]} == {"beam": 2, "best-of-n": 4, "dvts": 2, "greedy": 1}
    with SessionStore(db) as store:
        assert len(store.list_sessions()) == 8


def test_a_database_busy_mid_eval_journals_the_runs_and_the_eval_finishes(tmp_path, capsys, monkeypatch):
    """A lock taken during the eval raised StoreLocked out of it: exit 2, no table, no JSON, every result lost."""
    import sqlite3

    import app.store

    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(app.store, "DEFAULT_BUSY_TIMEOUT", 0.1)
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}', '{"question": "1+1?", "answer": "2"}')
    db, out_json = tmp_path / "s.db", tmp_path / "r.json"
    SessionStore(db).close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        assert main(["eval", str(problems), *TINY, "--db", str(db), "--json", str(out_json)]) == 0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    captured = capsys.readouterr()
    assert "2 of 2 problems" in captured.out and "kept in the journal" in captured.err
    assert json.loads(out_json.read_text())["complete"] is True
    from app.journal_import import open_session_store

    with open_session_store(db) as store:  # the next open imports the journals
        assert [s["status"] for s in store.list_sessions()] == ["finished", "finished"]


def test_a_failed_run_says_why_on_its_progress_line(tmp_path, capsys):
    """Before, it read 'failed (answered None, expected 5); 0 tokens, 0.0 s' and the reason was nowhere."""
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    assert main(["eval", str(problems), *TINY, "--policy", "lbs", "--kv-budget", "10KB", "--no-save"]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[eval]")]
    assert line.startswith("[eval] 1/1 beam: failed: KV budget 10.0 kB is too small for one candidate"), line


def test_every_run_failing_for_a_budget_too_small_exits_2_in_the_runs_words(tmp_path, capsys):
    """Each run failed 'KV budget 1.0 kB is too small' and the eval printed 'failed runs 2' and exited 0."""
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}',
                     '{"question": "What is 1+1?", "answer": "2"}')
    assert main(["run", "What is 2+3?", *TINY, "--kv-budget", "1KB", "--no-save"]) == 2
    refusal = capsys.readouterr().err.strip().splitlines()[-1].removeprefix("beamwise: error: ")
    assert refusal.startswith("KV budget 1.0 kB is too small")
    assert main(["eval", str(problems), *TINY, "--kv-budget", "1KB", "--no-save"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"beamwise: error: every run failed: {refusal}", err


def test_an_eval_stopped_before_any_problem_finished_shows_no_accuracy(tmp_path, capsys, monkeypatch):
    """It printed 'problems 0' beside 'accuracy 0.0%', an accuracy of nothing."""
    interrupt_search(monkeypatch, at=1)
    out_json = tmp_path / "r.json"
    assert main(["eval", str(three_problems(tmp_path)), *TINY, "--no-save", "--json", str(out_json)]) == 130
    out = capsys.readouterr().out
    rows = dict(re.split(r"\s{2,}", line) for line in out.splitlines() if re.fullmatch(r"\S.*?\s{2,}\S.*", line))
    assert (rows["problems"], rows["accuracy"], rows["pass@N"]) == ("0", "-", "-"), out
    method = json.loads(out_json.read_text())["methods"][0]
    assert method["accuracy"] is None and method["pass_at_n"] is None


def three_problems(tmp_path):
    return write(tmp_path, *[f'{{"question": "What is {i}+1?", "answer": "{i + 1}"}}' for i in range(3)])


def interrupt_search(monkeypatch, at: int) -> None:
    """Ctrl+C arrives as the eval starts its `at`-th run (counting every method's)."""
    real, calls = eval_runs.Evaluation._search, []

    def search(self, problem, method, config):
        calls.append(problem.line)
        if len(calls) == at:
            raise KeyboardInterrupt
        return real(self, problem, method, config)

    monkeypatch.setattr(eval_runs.Evaluation, "_search", search)


def test_ctrl_c_keeps_finished_problems_and_prints_the_partial_table(tmp_path, capsys, monkeypatch):
    problems = three_problems(tmp_path)
    interrupt_search(monkeypatch, at=3)
    out_json = tmp_path / "r.json"
    assert main(["eval", str(problems), *TINY, "--no-save", "--json", str(out_json)]) == 130
    captured = capsys.readouterr()
    assert "interrupted" in captured.err and "2 of 3 problems" in captured.out
    data = json.loads(out_json.read_text())
    assert data["complete"] is False and data["methods"][0]["problems"] == 2


def test_ctrl_c_mid_comparison_leaves_the_unfinished_problem_out_of_the_json_runs(tmp_path, capsys, monkeypatch):
    """The JSON's runs held beam's run of the interrupted problem, so beam had one problem more than dvts there."""
    problems = three_problems(tmp_path)
    interrupt_search(monkeypatch, at=4)  # problem 2's dvts run, after its beam run finished
    out_json = tmp_path / "r.json"
    argv = ["eval", str(problems), *TINY, "--compare", "beam,dvts", "--no-save", "--json", str(out_json)]
    assert main(argv) == 130
    data = json.loads(out_json.read_text())
    assert [m["problems"] for m in data["methods"]] == [1, 1]
    assert [(r["method"], r["line"]) for r in data["runs"]] == [("beam", 1), ("dvts", 1)]


def test_ctrl_c_mid_run_records_that_run_cancelled_as_run_does(tmp_path, capsys, monkeypatch):
    """The run Ctrl+C stopped was saved 'interrupted', the status of a process that died; `run` says 'cancelled'."""
    import app.run_output

    real = app.run_output.record

    def record(recorder, event):
        real(recorder, event)
        if event.type == "step_selected" and "line 2" in (recorder.title or ""):
            raise KeyboardInterrupt

    monkeypatch.setattr(app.run_output, "record", record)
    problems, db = three_problems(tmp_path), tmp_path / "s.db"
    assert main(["eval", str(problems), *TINY, "--db", str(db)]) == 130
    assert "1 of 3 problems" in capsys.readouterr().out
    with SessionStore(db) as store:
        sessions = sorted(store.list_sessions(), key=lambda s: s["id"])
    assert [s["status"] for s in sessions] == ["finished", "cancelled"]


@pytest.mark.parametrize("command", ["eval", "run"])
def test_eval_sizes_torchs_thread_pool_as_run_does(tmp_path, monkeypatch, command):
    """Without it eval ran one OpenMP thread per core: on a busy machine every small operation waited at a
    barrier for a descheduled thread (a DVTS problem took 502 s where 34 s do)."""
    import app.cli

    calls = []
    monkeypatch.setattr(app.cli, "limit_threads", lambda reserve=0, given=None: calls.append((reserve, given)))
    args = [str(tmp_path / "missing.jsonl")] if command == "eval" else ["", "--no-save"]
    assert main([command, *args, "--model", "synthetic:tiny-llama"]) == 2  # bad input, after the pool is sized
    assert calls == [(0, None)]
    assert main([command, *args, "--model", "synthetic:tiny-llama", "--threads", "3"]) == 2
    assert calls[-1] == (0, 3)  # --threads pins it


def test_threads_above_the_cores_are_lowered_and_the_json_says_so(tmp_path, capsys, monkeypatch):
    """`--threads 4` on 2 cores wrote threads_chosen_by "--threads 4" beside numerics.threads 2, unsaid."""
    import torch

    import app.threads

    monkeypatch.setattr(app.threads, "usable_cores", lambda: 1)
    out_json = tmp_path / "r.json"
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    pool = torch.get_num_threads()
    try:
        assert main(["eval", str(problems), *TINY, "--no-save", "--threads", "4", "--json", str(out_json)]) == 0
    finally:
        torch.set_num_threads(pool)  # the tests after this one keep their pool
    assert "--threads 4 is more than the 1 usable core(s): using 1 thread(s)" in capsys.readouterr().err
    data = json.loads(out_json.read_text())
    assert data["threads_chosen_by"] == "--threads 4, lowered to the 1 usable core(s)"
    assert data["numerics"]["threads"] == 1


def test_calibrate_saves_thresholds_that_run_and_the_window_read(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    assert main(["eval", str(problems), *TINY, "--verifier", "self-judge", "--calibrate", "--no-save"]) == 0
    out, err = capsys.readouterr()
    assert "verify-skip thresholds" in out and "entropy exit thresholds: theta" in out
    assert "warning: thresholds from 2 steps are a rough guess" in err  # saved all the same
    saved = load_thresholds()
    assert saved is not None and saved.steps == 2 and 0 < saved.tau_conf <= 1
    from app.cli import build_parser
    from app.options import configs_from_args

    _, search, _ = configs_from_args(build_parser().parse_args(["run", "--verify-skip"]))
    assert (search.tau_conf, search.r_gap) == (saved.tau_conf, saved.r_gap)
    assert saved.entropy_theta is not None and saved.entropy_steps == 2 and saved.entropy_layers > 2
    assert (search.entropy_theta, search.entropy_delta) == (saved.entropy_theta, saved.entropy_delta)
    given = ["run", "--model", "synthetic:tiny-llama", "--verifier", "self-judge", "--entropy-exit", "--entropy-theta",
             "4", "--verify-skip", "--tau-conf", "0.5"]  # each threshold given needs its switch
    _, given, _ = configs_from_args(build_parser().parse_args(given))
    assert (given.entropy_theta, given.entropy_delta, given.tau_conf) == (4.0, saved.entropy_delta, 0.5)
    assert main(["eval", str(problems), *TINY, "--calibrate", "--no-save"]) == 0  # logprob: no lens to record
    out = capsys.readouterr().out  # it wrote "entropy_theta": null over the self-judge calibration, unsaid
    assert "entropy exit: not calibrated" in out and "self-judge on synthetic:tiny-llama are kept" in out
    kept = load_thresholds()
    assert (kept.entropy_theta, kept.entropy_delta) == (saved.entropy_theta, saved.entropy_delta)
    assert kept.verifier == "logprob on synthetic:tiny-llama"
    assert kept.entropy_verifier == "self-judge on synthetic:tiny-llama"


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_calibrating_with_one_candidate_a_step_is_refused(tmp_path, capsys, monkeypatch, method):
    """With one candidate a step the verifier always "agrees" and the lead is the confidence itself: `--calibrate
    --method greedy` saved tau_conf 0.0032, r_gap 0.0032 at "100%" agreement."""
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))
    one = ["--beams", "1", "--width", "1"] if method == "beam" else []
    assert main(["eval", str(SHIPPED), *TINY, *one, "--method", method, "--calibrate", "--no-save"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--calibrate needs several candidates a step" in err[0], err
    assert load_thresholds() is None


def test_entropy_exit_with_logprob_says_logprob_cannot_exit_before_any_calibration(tmp_path, capsys, monkeypatch):
    """With a self-judge calibration saved, --entropy-exit on logprob said to calibrate for logprob (which has no
    lens to calibrate) and to give --entropy-theta, which then gave the real error."""
    from app.early_exit import Thresholds, save_thresholds

    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    save_thresholds(Thresholds(0.8, 0.2, 10, 0.3, 0.95, entropy_theta=3.5, entropy_delta=0.7,
                               generator="synthetic:tiny-llama", verifier="self-judge on synthetic:tiny-llama"))
    for command in (["eval", str(SHIPPED), "--no-save"], ["run", "What is 2+3?", "--no-save"], ["plan", "q"]):
        assert main([*command, *TINY, "--entropy-exit"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "needs a verifier that runs a model (self-judge or prm), not logprob" in err[0], err


def test_verify_skip_names_thresholds_calibrated_on_another_model(tmp_path, capsys, monkeypatch):
    """Thresholds calibrated on synthetic:tiny-llama skipped the bundled model's verifier with no word of it."""
    from app.early_exit import Thresholds, save_thresholds

    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    save_thresholds(Thresholds(0.5, 0.01, 10, 0.3, 0.95, generator="synthetic:tiny-qwen2",
                               verifier="logprob on synthetic:tiny-qwen2"))
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    for command in (["eval", str(problems)], ["run", "What is 2+3?"]):  # the window's run reads the same thresholds
        assert main([*command, *TINY, "--no-save", "--verify-skip"]) == 0
        warned = [line for line in capsys.readouterr().err.splitlines() if "verify-skip thresholds" in line]
        assert len(warned) == 1 and "measured on verifier logprob on synthetic:tiny-qwen2, generator " \
            "synthetic:tiny-qwen2, not on this search's verifier logprob on synthetic:tiny-llama" in warned[0]
    assert main(["eval", str(problems), *TINY, "--no-save", "--verify-skip", "--tau-conf", "0.9", "--r-gap",
                 "0.1"]) == 0
    assert "verify-skip thresholds" not in capsys.readouterr().err  # the user's own: nothing calibrated is used


def test_a_problems_result_reads_the_runs_events_as_the_window_does():
    from app.eval_report import result_of
    from benchmarks.fake_search import fake_run
    from engine import events as ev
    from engine.config import SearchConfig

    stream = list(fake_run("q", SearchConfig(beams=2, width=2, max_steps=3, seed=1), finish_at_step=2))
    done = result_of("beam", 4, "80", stream)
    end = stream[-1]
    texts = {e.id: e.text for e in stream if isinstance(e, ev.CandidateScored)}
    assert (done.predicted, done.correct, done.any_correct, done.status) == ("80", True, False, "finished")
    assert (done.steps, done.candidates, done.tokens) == (2, 2, end.candidate_tokens)
    cancelled = result_of("beam", 4, "80", [*stream[:-1], ev.RunCancelled(step=2)])
    assert (cancelled.predicted, cancelled.status, cancelled.candidates) == (None, "cancelled", 0)
    assert cancelled.tokens == 8 * len(texts)  # every scored candidate's tokens when the run has no total
    failed = result_of("beam", 4, "80", stream[:-3])  # no terminal event: counted as failed
    assert (failed.status, failed.steps) == ("failed", 1)
    second = [e for e in stream if isinstance(e, ev.StepSelected)][-1].kept[1]  # its text ends "candidate N."
    other = result_of("beam", 4, str(second), stream)
    assert (other.correct, other.any_correct) == (False, True)  # the second final candidate's answer is N


def test_the_entropy_exit_reports_its_mean_layer_and_the_verifier_work_saved(tmp_path, capsys):
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    out_json = tmp_path / "r.json"
    qwen = ["--model", "synthetic:tiny-qwen2", *TINY[2:], "--verifier", "self-judge", "--no-save"]
    exiting = ["--entropy-exit", "--entropy-theta", "1000", "--entropy-delta", "1000"]  # fires at layer 2 of 6
    assert main(["eval", str(problems), *qwen, *exiting, "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "entropy exit: mean layer" in out and "2.0 of 6" in out
    method = json.loads(out_json.read_text())["methods"][0]
    assert method["mean_exit_layer"] == 2.0 and method["verifier_layers"] == 6
    assert 0 < method["verifier_compute_saved"] < 1 and method["exit_disagreement"] is None
    assert main(["eval", str(problems), *qwen, *exiting, "--audit-early-exit", "--json", str(out_json)]) == 0
    method = json.loads(out_json.read_text())["methods"][0]
    assert method["verifier_compute_saved"] == 0 and 0 <= method["exit_disagreement"] <= 1
    assert "audit: exit differs" in capsys.readouterr().out
    assert main(["eval", str(problems), *qwen]) == 0
    assert "entropy exit" not in capsys.readouterr().out  # off: no exit rows


def test_a_calibration_with_no_scored_step_says_nothing_was_saved_and_exits_1(tmp_path, capsys, monkeypatch):
    """Every run failing (a question past the context) left no step to calibrate from, yet the eval exited 0."""
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))
    problems = write(tmp_path, json.dumps({"question": "What is 2+2? " * 2000, "answer": "4"}))
    assert main(["eval", str(problems), *TINY, "--no-save", "--calibrate"]) == 1
    assert "nothing was saved" in capsys.readouterr().err
    assert load_thresholds(tmp_path / "config" / "early_exit.json") is None


def test_a_calibration_that_could_not_be_saved_is_refused_before_it_runs(tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(blocker / "config"))  # under a file: no folder can be made
    assert main(["eval", str(SHIPPED), *TINY, "--no-save", "--limit", "1", "--calibrate"]) == 2
    captured = capsys.readouterr()
    assert f"cannot save thresholds in {blocker / 'config'}" in captured.err and "problems" not in captured.out


def test_a_folder_in_the_thresholds_files_place_is_refused_before_the_calibration_runs(tmp_path, capsys, monkeypatch):
    """It was found when saving, after every problem ran, and said to make the (writable) config folder writable."""
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))
    (tmp_path / "config" / "early_exit.json").mkdir(parents=True)
    assert main(["eval", str(SHIPPED), *TINY, "--no-save", "--limit", "1", "--calibrate"]) == 2
    captured = capsys.readouterr()
    assert "a folder has that name" in captured.err and "problems" not in captured.out


def test_saving_thresholds_into_an_unwritable_place_is_a_clear_error(tmp_path):
    from app.early_exit import Thresholds, save_thresholds

    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    with pytest.raises(ValueError, match=r"cannot save the thresholds to .* set BEAMWISE_CONFIG_DIR"):
        save_thresholds(Thresholds(0.8, 0.2, 10, 0.3, 0.95), blocker / "thresholds.json")


def test_the_table_counts_runs_with_no_answer_and_how_split_a_vote_was(tmp_path, capsys):
    """A finished run whose text stated no answer was only 'wrong', like one that answered 7 for 5; and a majority
    of 2 paths in 4 read like one of 4 in 4."""
    import dataclasses

    from app.eval_report import result_of, summarize, table
    from benchmarks.fake_search import fake_run
    from engine.config import SearchConfig

    stream = list(fake_run("q", SearchConfig(beams=2, width=2, max_steps=3, seed=1), finish_at_step=2))
    done = result_of("beam", 4, "80", stream)
    assert done.agreement == 0  # the fake's answer, 80, is none of its final paths' ("... candidate N.")
    assert result_of("beam", 4, "80", [*stream[:-1], dataclasses.replace(stream[-1], answer="no number")]) \
        .predicted is None
    answered = dataclasses.replace(done, agreement=0.5)
    unanswered = dataclasses.replace(done, predicted=None, correct=False, agreement=None)
    summary = summarize("beam", [answered, unanswered], 1.0)
    assert (summary.no_answer, summary.agreement) == (1, 0.5)
    assert "no answer found" in table([summary]) and "vote: paths agreeing" not in table([summary])
    assert re.search(r"vote: paths agreeing +50%", table([summary], vote=True))
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    out_json = tmp_path / "r.json"
    assert main(["eval", str(problems), *TINY, "--select", "majority", "--no-save", "--json", str(out_json)]) == 0
    assert "vote: paths agreeing" in capsys.readouterr().out
    method = json.loads(out_json.read_text())["methods"][0]
    run = json.loads(out_json.read_text())["runs"][0]  # a random-weight model states a number or not
    if run["predicted"] is None:
        assert (method["no_answer"], method["agreement"]) == (1, None)
    else:
        assert method["no_answer"] == 0 and 0 < method["agreement"] <= 1


def test_a_run_with_no_answer_says_so_on_its_progress_line(capsys):
    """It read 'wrong (answered None, expected 5)', Python's word for nothing."""
    import dataclasses

    from app.eval_report import result_of
    from benchmarks.fake_search import fake_run
    from engine.config import SearchConfig

    stream = list(fake_run("q", SearchConfig(beams=2, width=2, max_steps=3, seed=1), finish_at_step=2))
    result = result_of("beam", 4, "5", [*stream[:-1], dataclasses.replace(stream[-1], answer="I do not know.")])
    eval_runs.Evaluation._progress(None, 1, 3, result, stream[-1])
    assert capsys.readouterr().err.startswith("[eval] 1/3 beam: wrong (no answer found, expected 5); ")


def test_eval_help_says_its_prefix_cache_is_off_and_run_says_on(capsys):
    """eval's default differs from run's; each --help says its own."""
    from app.cli import build_parser

    assert build_parser().parse_args(["eval", "problems.jsonl"]).prefix_cache is False
    assert build_parser().parse_args(["run", "What is 2+3?"]).prefix_cache is True
    for command, default in (("eval", "off"), ("run", "on")):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        shown = " ".join(capsys.readouterr().out.split())
        assert f"prefills only the rest (default: {default}" in shown


@pytest.mark.parametrize(("given", "said"), [
    (["--compare", ""], "--compare takes methods from"),
    (["--compare", "beam,greedy", "--method", "dvts"], "--compare beam,greedy runs its own methods, so --method dvts"),
    (["--target-agreement", "0.8"], "--target-agreement sets what --calibrate aims for: add --calibrate"),
])  # fmt: skip
def test_options_eval_would_drop_are_refused(tmp_path, capsys, given, said):
    """`--compare ""` ran --method alone, --method beside --compare was dropped, --target-agreement without
    --calibrate did nothing: each unsaid."""
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    assert main(["eval", str(problems), *TINY, "--no-save", *given]) == 2
    assert said in capsys.readouterr().err
