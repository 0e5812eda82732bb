"""What new users met with a generator server (walk-throughs A and B): each failure names the option to change,
in the words of the command they ran, on one line; a Ctrl+C before the search began says nothing was recorded."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from app.cli import main
from app.run_cli import ServerProgress
from app.store import SessionStore
from engine.backends.addresses import address_problem
from engine.backends.openai import ServerConfig
from engine.config import SearchConfig
from engine.remote_search import run
from tests.fake_openai import MODEL, PRM, FakeServer, closed_port

QUESTION = "A train travels 60 km in 45 minutes. What is its average speed in km/h?"
PRM_SEARCH = SearchConfig(beams=1, width=2, step_tokens=16, max_steps=2, verifier="prm", verifier_model=PRM)


def server_run(url: str, *extra: str) -> list[str]:
    return ["run", QUESTION, "--backend", "openai", "--endpoint", url, "--served-model", MODEL, "--no-save",
            "--request-timeout", "2", *extra]


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("beamwise: error:")]


def test_a_wrong_prm_name_is_said_before_the_run_in_the_words_of_verifier_model() -> None:
    """Before, `--verifier-model wrong-prm` with --verifier-endpoint ran step 1 first, then said 'Pass
    --served-model as the server names it': the generator's option, which was right."""
    wrong = SearchConfig(beams=1, width=2, step_tokens=16, max_steps=2, verifier="prm", verifier_model="wrong-prm")
    with FakeServer(mode="prm") as server:
        events = list(run(QUESTION, ServerConfig(server.url, MODEL, prm_endpoint=server.url, backoff_s=0.0), wrong))
    assert [e.type for e in events] == ["run_failed"] and events[0].error == "ServedModelNotFound"
    assert "serves fake-model, fake-prm, not 'wrong-prm'" in events[0].message
    assert "Pass --verifier-model as the server names it" in events[0].message
    assert not server.requests and not server.pooled  # nothing was asked of either model


def test_an_unreachable_prm_server_names_verifier_endpoint() -> None:
    """Before, a --verifier-endpoint with nothing listening said 'Check --endpoint and --served-model'."""
    with FakeServer() as server:
        cfg = ServerConfig(server.url, MODEL, prm_endpoint=f"http://127.0.0.1:{closed_port()}", timeout_s=2.0,
                           backoff_s=0.0)
        failed = list(run(QUESTION, cfg, PRM_SEARCH))[-1]
    assert failed.error == "ServerUnreachable" and "cannot reach the server at http://127.0.0.1:" in failed.message
    assert "Check --verifier-endpoint and --verifier-model" in failed.message and "--served-model" not in (
        failed.message)


def test_a_prm_server_without_the_prm_verifier_is_refused_not_ignored(capsys) -> None:
    """Before, `--verifier-endpoint URL` without --verifier prm ran the logprob verifier and never asked it (a
    local run refuses a server's options it would ignore)."""
    with FakeServer(mode="prm") as server:
        code = main(server_run(server.url, "--verifier-endpoint", server.url))
        assert not server.requests
    (line,) = error_lines(capsys)
    assert code == 2 and "--verifier-endpoint names a PRM server, but the verifier is logprob: add --verifier prm" in (
        line)


def test_an_answer_that_is_not_http_is_said_on_one_line(capsys) -> None:
    """Before, a port that answered bytes that are not HTTP was 'cannot reach the server', and the bytes (a NUL, a
    CR) were printed raw: the message broke over two lines."""
    with FakeServer(mode="not-http") as server:
        code = main(server_run(server.url))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "\x00" not in err and "\r" not in err, repr(err)
    assert "answered with something that is not HTTP (it began " in err and "THIS IS NOT HTTP" in err
    assert "cannot reach" not in err


@pytest.mark.parametrize(("mode", "said"), [("no-text", "an answer whose choices hold no text"),
                                            ("nested", "an answer that is not JSON")])
def test_an_answer_of_the_wrong_shape_says_the_server_answered(capsys, mode: str, said: str) -> None:
    """Before, an HTTP 200 of the wrong shape ended 'and that the server is running', although it had answered."""
    with FakeServer(mode=mode) as server:
        code = main(server_run(server.url))
    (line,) = error_lines(capsys)
    assert code == 2 and said in line and "that the server is running" not in line
    assert "The server is running but did not answer in the shape asked for: check that --endpoint is" in line


def test_an_http_address_names_its_port_and_https_means_443(capsys) -> None:
    """Before, `--endpoint http://127.0.0.1` was asked on port 80 ('cannot reach ...: Connection refused'), while
    the README said an address is checked to be http(s)://host:port before any request."""
    assert main(server_run("http://127.0.0.1")) == 2
    (line,) = error_lines(capsys)
    assert "the --endpoint 'http://127.0.0.1' is not a server address like http://gpu-box:8000: it names no port" in (
        line)
    assert address_problem("http://127.0.0.1:80/v1") == address_problem("https://gpu-box/v1") == ""


def test_bench_names_its_own_option_for_the_server(capsys) -> None:
    """Before, `bench --server URL` failed with 'Check --endpoint', an option bench's README never names."""
    bench = ["bench", "--backend", "openai", "--served-model", MODEL, "--no-local", "--request-timeout", "2"]
    assert main([*bench, "--server", f"http://127.0.0.1:{closed_port()}"]) == 2
    (unreachable,) = error_lines(capsys)
    assert main([*bench, "--server", "gpu-box:8000"]) == 2
    (malformed,) = error_lines(capsys)
    assert "Check --server and --served-model" in unreachable and "--endpoint" not in unreachable
    assert "the --server 'gpu-box:8000' is not a server address" in malformed and "--endpoint" not in malformed


@pytest.mark.skipif(os.name == "nt", reason="a SIGINT sent to this process is POSIX")
@pytest.mark.parametrize("when", ["checking the server", "in step 2"])
def test_ctrl_c_says_whether_anything_was_recorded(tmp_path: Path, capsys, when: str) -> None:
    """Before, Ctrl+C while a silent server was checked said 'the steps chosen so far are kept' and 'cancelled
    after step 0', and nothing said that no session was recorded (a local run says so). A run stopped after a step
    is recorded as before, and says so."""
    mode, ready = ("silent", lambda s: s.asked.is_set()) if when == "checking the server" else (
        "slow", lambda s: len(s.requests) > 2)  # beams 1 x width 2: step 1 is 2 requests
    with FakeServer(mode=mode, delay=0.2 if mode == "slow" else 30.0) as server:
        def interrupt() -> None:
            end = time.monotonic() + 30
            while not ready(server) and time.monotonic() < end:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt, daemon=True).start()
        code = main(["run", QUESTION, "--backend", "openai", "--endpoint", server.url, "--served-model", MODEL,
                     "--beams", "1", "--width", "2", "--request-timeout", "20", "--db", str(tmp_path / "s.db")])
    captured = capsys.readouterr()
    notes = [line for line in captured.err.splitlines() if line.startswith("beamwise: ")]
    with SessionStore(tmp_path / "s.db") as store:
        sessions = store.list_sessions()
    assert code == 130
    if when == "checking the server":
        assert notes == ["beamwise: stopping: the search has not begun, so nothing will be recorded (Ctrl+C again to "
                         "quit now)", "beamwise: stopped before the search began: nothing was recorded"]
        assert "cancelled before the search began" in captured.out and sessions == []
    else:
        assert notes[-1] == "beamwise: recorded as session 1, cancelled after step 1", notes
        assert [s["status"] for s in sessions] == ["cancelled"]


def test_a_server_runs_progress_says_it_checks_the_server_not_that_it_loads_a_model() -> None:
    """Before, the heartbeat said 'loading the model' while a server run waited for the server's model list."""
    now = [0.0]
    progress = ServerProgress(clock=lambda: now[0])
    now[0] = 3.0
    assert progress.line() == "checking the server, 3.0 s"
