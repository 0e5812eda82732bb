"""A server run's words as a walkthrough met them: an address copied with its route (.../v1/completions) is asked
where the API is, a port past 65535 is said in Beamwise's words, each server error names its server, the API key's
advice holds Windows' shells too, a missing or empty --endpoint or --served-model says what to write, an --api-key
typed is refused without its value, a Ctrl+C while step 1 waits on the server says so, and the progress lines say
their seconds in one format."""

from __future__ import annotations

import os
import signal

import pytest

from app.cli import main
from app.run_cli import ServerProgress, _drive
from engine import events as ev
from engine.backends.openai import OpenAICompletions, ServerConfig, check_connection
from engine.errors import RemoteError, ServerError
from tests.fake_openai import MODEL, FakeServer
from tests.test_faults import fake

QUESTION = "What is 2+3?"


def config(url: str, **kw) -> ServerConfig:
    return ServerConfig(url, MODEL, timeout_s=5.0, backoff_s=0.0, **kw)


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


# 4. an address with the API's route, a port past 65535
@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions", "/v1/completions/", "/v1/models"])
def test_an_address_copied_with_its_route_is_asked_where_the_api_is(route: str) -> None:
    with FakeServer() as server:
        assert check_connection(config(server.url + route)).served == (MODEL,)
        assert len(server.requests) == 1  # the one-token completion, at /v1/completions (else a 404)


def test_a_port_past_65535_is_said_in_beamwises_words(capsys) -> None:
    code = main(["run", QUESTION, "--backend", "openai", "--endpoint", "http://127.0.0.1:99999", "--served-model",
                 MODEL, "--no-save"])
    line = one_line(capsys)
    assert code == 2 and "its port '99999' is not a port number (one from 1 to 65535)" in line, line
    assert "Port out of range" not in line, line


# 5. every server error names its server
def test_a_server_asking_for_a_long_wait_is_named() -> None:
    with FakeServer(busy=("60",)) as server:
        backend = OpenAICompletions(config(server.url, retries=2), sleep=lambda _s: None)
        with pytest.raises(ServerError) as info:
            backend.complete("x", max_tokens=4, stop=[], temperature=1.0, top_p=1.0, seed=0)
    assert str(info.value).startswith(f"the server at {server.url} answered HTTP 429: it is busy and asks to wait 60 s")


def test_a_redirecting_server_is_named_and_its_hint_names_the_option() -> None:
    with FakeServer(mode="redirect") as server:
        backend = OpenAICompletions(config(server.url, retries=0))
        with pytest.raises(ServerError) as info:
            backend.complete("x", max_tokens=4, stop=[], temperature=1.0, top_p=1.0, seed=0)
    assert str(info.value).startswith(f"the server at {server.url} answered HTTP 301: a redirect to")
    assert "as --endpoint (https://" in info.value.user_message()


def test_a_server_that_ignores_n_is_named() -> None:
    with FakeServer(mode="n-ignored") as server:
        backend = OpenAICompletions(config(server.url, one_request_per_path=True))
        with pytest.raises(RemoteError) as info:
            backend.complete_many("x", 4, max_tokens=4, stop=[], temperature=1.0, top_p=1.0, seed=0)
    assert str(info.value).startswith(f"the server at {server.url} answered 1 continuation(s) to a request for n=4")


# 7. the API key's advice for every shell
def test_an_unset_key_variable_is_said_for_windows_shells_too(capsys, monkeypatch) -> None:
    monkeypatch.delenv("NOPE_VAR", raising=False)
    code = main(["run", QUESTION, "--backend", "openai", "--endpoint", "http://127.0.0.1:1", "--served-model",
                 MODEL, "--api-key-env", "NOPE_VAR", "--no-save"])
    line = one_line(capsys)
    assert code == 2 and "Export NOPE_VAR" not in line, line
    assert "export NOPE_VAR=KEY" in line and '$env:NOPE_VAR = "KEY"' in line and "set NOPE_VAR=KEY" in line, line


# 8. what --backend openai lacks, with what to write
@pytest.mark.parametrize(("command", "args", "said"), [
    ("run", ["--served-model", MODEL], "--backend openai needs --endpoint URL, the server's address (e.g. --endpoint "
                                       "http://127.0.0.1:8000/v1). See `beamwise run --help`."),
    ("run", ["--endpoint", "http://127.0.0.1:1"], "--backend openai needs --served-model NAME, the model's name as "
                                                  "the server lists it at /v1/models (e.g. --served-model "),
    ("run", ["--endpoint", "http://127.0.0.1:1", "--served-model", " "], "the --served-model given is empty: write "
                                                                         "the model's name as the server lists it"),
    ("bench", ["--served-model", MODEL, "--no-local"], "--backend openai needs --server URL, the server's address "
                                                       "(e.g. --server http://127.0.0.1:8000/v1). See `beamwise "
                                                       "bench --help`."),
])  # fmt: skip
def test_a_missing_or_empty_server_option_says_what_to_write(capsys, command: str, args: list[str], said: str) -> None:
    question = [QUESTION, "--no-save"] if command == "run" else []
    assert main([command, *question, "--backend", "openai", *args]) == 2
    line = one_line(capsys)
    assert said in line, line


# 9. --api-key typed
@pytest.mark.parametrize("typed", [["--api-key", "sekrit123"], ["--api-key=sekrit123"]])
def test_an_api_key_typed_is_refused_without_its_value(capsys, typed: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["run", QUESTION, "--backend", "openai", "--endpoint", "http://127.0.0.1:1", "--served-model", MODEL,
              *typed])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "sekrit123" not in err, err
    assert "--api-key-env NAME" in err and "history" in err and "unrecognized arguments: --api-key" in err, err


# 10. Ctrl+C while step 1 waits on the server
@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
def test_a_stop_while_step_1_waits_on_the_server_says_so(capsys) -> None:
    args = type("Args", (), {"no_save": True, "db": None, "json": False})()

    def events(should_stop):
        yield started_event()  # the server was checked; step 1's requests are in flight
        os.kill(os.getpid(), signal.SIGINT)
        assert should_stop()
        yield ev.RunCancelled(step=0)

    assert _drive(args, None, events, ServerProgress()) == 130
    err = capsys.readouterr().err
    assert "stopping: step 1 is waiting for the server; the run ends without it and nothing is recorded" in err, err
    assert "no step has begun yet" not in err


# 11. one format for the progress lines' seconds
def test_a_server_runs_progress_says_its_seconds_in_one_format() -> None:
    now = [0.0]
    progress = ServerProgress(clock=lambda: now[0])
    lines = []
    for seconds in (9.0, 9.96, 10.0, 11.0):
        now[0] = seconds
        lines.append(progress.line())
    assert lines == ["checking the server, 9.0 s", "checking the server, 10.0 s", "checking the server, 10.0 s",
                     "checking the server, 11.0 s"]
    progress.apply(started_event())
    now[0] = 21.0
    assert progress.line() == "waiting for the server's first answer, 10.0 s"


def started_event() -> ev.RunStarted:
    return next(iter(fake(1)))
