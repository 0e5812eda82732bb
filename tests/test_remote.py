"""`--backend openai`: a search through an OpenAI-compatible server (an in-process fake on 127.0.0.1).

The fake is deterministic (tests/fake_openai.py), so these tests check the requests the search sends,
the events, the tree, the recorded session and its exports, and each failure's one-line error.
The real-server tests (llama.cpp's server, vLLM) are in tests/test_real_server.py, behind the `server` marker.
"""

from __future__ import annotations

import ipaddress
import json
import math
import socket
import time
from pathlib import Path

import pytest

from app.cli import main
from app.export import export_session, import_session
from app.recorder import SessionRecorder
from app.store import SessionStore
from engine import events as ev
from engine.backends.openai import OpenAICompletions, ServerConfig, check_connection
from engine.backends.sockets import RequestCancelled
from engine.config import SearchConfig
from engine.errors import LogprobsUnavailable, RemoteError, ServedModelNotFound, ServerError, ServerUnreachable
from engine.remote_search import REMOTE_DEVICE, run
from tests.fake_openai import MODEL, FakeServer, closed_port

QUESTION = "A train travels 60 km in 45 minutes. What is its average speed in km/h?"
SEARCH = SearchConfig(beams=2, width=2, step_tokens=16, max_steps=4)


def config(url: str, **kw) -> ServerConfig:
    return ServerConfig(url, kw.pop("model", MODEL), timeout_s=kw.pop("timeout_s", 5.0), backoff_s=0.0, **kw)


def events_of(url: str, search: SearchConfig = SEARCH, **kw) -> list:
    return list(run(QUESTION, config(url, **kw), search))


def test_a_search_through_the_server_gives_a_well_formed_tree() -> None:
    with FakeServer() as server:
        events = events_of(server.url)
    types = [e.type for e in events]
    assert types[:3] == ["run_started", "prefill_done", "step_started"] and types[-1] == "run_finished"
    started = events[0]
    assert started.device == REMOTE_DEVICE and started.emulated is False and started.model == MODEL
    scored = {e.id: e for e in events if e.type == "candidate_scored"}
    selected = [e for e in events if e.type == "step_selected"]
    assert [len(s.kept) for s in selected] == [2, 2, 2]
    assert len(scored) == 4 + 4 + 4  # N*M children every step
    for s in selected:
        assert set(s.kept) | set(s.pruned) >= {e.id for e in scored.values() if e.step == s.step}
    finished = events[-1]
    assert len(finished.path) == 3 and finished.path[-1] in selected[-1].kept
    assert finished.answer.startswith("Step 1:") and "The answer is:" in finished.answer
    assert all(scored[c].parent == p for p, c in zip(finished.path, finished.path[1:], strict=False))
    # every request: n=1, a stop at the delimiter, the step's tokens, its own seed, log-probabilities
    assert len(server.requests) == 12
    first = server.requests[0]
    assert first["n"] == 1 and first["stop"] == ["\n\n"] and first["max_tokens"] == 16 and first["logprobs"] == 1
    assert len({r["seed"] for r in server.requests}) == 12
    assert any(r["prompt"].endswith("\n\n") and "Step 1:" in r["prompt"] for r in server.requests[4:])


def test_same_seed_same_tree() -> None:
    with FakeServer() as server:
        one, two = events_of(server.url), events_of(server.url)
    strip = [(e.type, getattr(e, "id", None), getattr(e, "text", None)) for e in one]
    assert strip == [(e.type, getattr(e, "id", None), getattr(e, "text", None)) for e in two]


@pytest.mark.parametrize("method", ["dvts", "best-of-n", "greedy"])
def test_every_method_runs_remotely(method: str) -> None:
    with FakeServer() as server:
        events = events_of(server.url, SearchConfig(beams=2, width=2, step_tokens=16, max_steps=4, method=method))
    assert events[-1].type == "run_finished", events[-1]


def test_cancel_stops_at_the_next_request() -> None:
    asked = []
    with FakeServer() as server:
        events = list(run(QUESTION, config(server.url), SEARCH, should_stop=lambda: asked.append(1) or len(asked) > 3))
    assert events[-1] == ev.RunCancelled(0) and not any(e.type == "run_finished" for e in events)


def test_length_cut_steps_keep_no_delimiter() -> None:
    with FakeServer() as server:
        events = events_of(server.url, SearchConfig(beams=1, width=2, step_tokens=2, max_steps=2))
    texts = [e.text for e in events if e.type == "candidate_text"]
    assert texts and all(len(t.split()) <= 2 and not t.endswith("\n\n") for t in texts)


def test_verify_skip_uses_the_servers_logprobs() -> None:
    search = SearchConfig(beams=2, width=2, step_tokens=16, max_steps=4, verify_skip=True, tau_conf=0.1, r_gap=0.0)
    with FakeServer() as server:
        events = events_of(server.url, search)
    assert all(e.verify_skipped for e in events if e.type == "step_selected")


def test_the_session_records_and_exports_like_a_local_run(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "s.db")
    recorder = SessionRecorder(store)
    with FakeServer() as server:
        for event in run(QUESTION, config(server.url, api_key_env=None), SEARCH):
            recorder.write(event)
    sid = recorder.session_id
    assert store.get_session(sid)["status"] == "finished"
    for fmt in ("md", "html"):
        assert "The answer is" in export_session(store, sid, fmt, tmp_path / f"s.{fmt}").read_text(encoding="utf-8")
    dump = export_session(store, sid, "json", tmp_path / "s.json")
    again = import_session(SessionStore(tmp_path / "other.db"), dump)
    assert again >= 1


def test_the_api_key_is_sent_but_never_recorded(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("BEAMWISE_TEST_KEY", "sk-secret-123")
    db = tmp_path / "s.db"
    with FakeServer() as server:
        assert main(["run", QUESTION, "--backend", "openai", "--endpoint", server.url, "--served-model", MODEL,
                     "--api-key-env", "BEAMWISE_TEST_KEY", "--max-steps", "3", "--db", str(db)]) == 0
    assert server.headers[0]["Authorization"] == "Bearer sk-secret-123"
    assert b"sk-secret-123" not in db.read_bytes()
    assert main(["sessions", "export", "--db", str(db), "1", "--format", "json", "-o", str(tmp_path / "e.json")]) == 0
    assert "sk-secret-123" not in (tmp_path / "e.json").read_text(encoding="utf-8")


def test_cli_json_lines(capsys, tmp_path: Path) -> None:
    with FakeServer() as server:
        code = main(["run", QUESTION, "--backend", "openai", "--endpoint", server.url, "--served-model", MODEL,
                     "--beams", "2", "--width", "2", "--json", "--no-save"])
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["device"] == REMOTE_DEVICE and lines[-1]["type"] == "run_finished"
    assert lines[0]["cache"]["served_model"] == MODEL


def failure(url: str, **kw) -> ev.RunFailed:
    events = events_of(url, **kw)
    assert [e.type for e in events][-1:] == ["run_failed"] and len(events) <= 2, events  # run_started at most
    return events[-1]


def test_unreachable_server_is_one_clear_error() -> None:
    failed = failure(f"http://127.0.0.1:{closed_port()}")
    assert failed.error == "ServerUnreachable" and "cannot reach the server" in failed.message


def test_wrong_model_name() -> None:
    with FakeServer() as server:
        failed = failure(server.url, model="no-such-model")
    assert failed.error == "ServedModelNotFound" and "serves fake-model, not 'no-such-model'" in failed.message


def test_a_404_from_completions_is_a_wrong_model() -> None:
    with FakeServer(mode="404") as server:
        failed = failure(server.url)
    assert failed.error == "ServedModelNotFound" and "has no model 'fake-model'" in failed.message
    assert len(server.requests) == 1  # a 404 is not retried


def test_a_500_is_retried_then_reported() -> None:
    with FakeServer(mode="500") as server:
        failed = failure(server.url, retries=2)
    assert failed.error == "ServerError" and "HTTP 500: internal error" in failed.message
    assert len(server.requests) == 3


def test_a_server_without_logprobs() -> None:
    with FakeServer(mode="no-logprobs") as server:
        failed = failure(server.url)
    assert failed.error == "LogprobsUnavailable"


def test_a_server_whose_choices_hold_no_text_is_said_not_read_as_empty_steps() -> None:
    """Before, every step came back empty and the run 'finished' with an empty answer."""
    with FakeServer(mode="no-text") as server:
        failed = failure(server.url)
    assert failed.error == "ServerError" and "an answer whose choices hold no text" in failed.message


def test_a_slow_server_times_out() -> None:
    with FakeServer(mode="slow", delay=1.0) as server:
        failed = failure(server.url, timeout_s=0.2, retries=1)
    assert failed.error == "ServerUnreachable" and "did not answer within 0.2 s (2 tries)" in failed.message


def test_the_timeout_bounds_an_answer_that_trickles_in() -> None:
    """The headers at once, then a byte every 0.1 s (about 30 s in all): before, the socket's timeout bounded each
    read only, so the run waited out the whole trickle; now the whole answer must come within the timeout."""
    with FakeServer(mode="trickle", delay=0.1) as server:
        began = time.monotonic()
        failed = failure(server.url, timeout_s=0.3, retries=1)
        waited = time.monotonic() - began
    assert failed.error == "ServerUnreachable" and "did not answer within 0.3 s (2 tries)" in failed.message
    assert waited < 5.0


def test_stop_ends_an_answer_that_trickles_in() -> None:
    with FakeServer(mode="trickle", delay=0.1) as server:
        began = time.monotonic()
        events = list(run(QUESTION, config(server.url, timeout_s=30.0), SEARCH,
                          should_stop=lambda: time.monotonic() - began > 0.3))
        ended = time.monotonic()
    assert [e.type for e in events] == ["run_started", "run_cancelled"] and ended - began < 5.0


def test_backoff_is_bounded() -> None:
    waits: list[float] = []
    backend = OpenAICompletions(ServerConfig(f"http://127.0.0.1:{closed_port()}", MODEL, retries=3, backoff_s=0.5),
                                sleep=waits.append)
    with pytest.raises(ServerUnreachable):
        backend.complete("x", max_tokens=4, stop=[], temperature=1.0, top_p=1.0, seed=0)
    assert waits == [0.5, 1.0, 2.0]


@pytest.mark.parametrize(("busy", "waits"), [
    (("2",), [2.0]),  # seconds, longer than the backoff: waited as asked
    (("0",), [0.5]),  # shorter: the backoff still spaces the tries
    ((None, "x"), [0.5, 1.0]),  # no header, or one that cannot be read: the backoff alone
    (("Wed, 21 Oct 2015 07:28:00 GMT",), [0.5]),  # a date already past
])
def test_a_busy_server_is_retried_after_the_wait_it_asks_for(busy, waits) -> None:
    seen: list[float] = []
    with FakeServer(busy=busy) as server:
        backend = OpenAICompletions(ServerConfig(server.url, MODEL, timeout_s=5.0, retries=3, backoff_s=0.5),
                                    sleep=seen.append)
        assert backend.complete("x", max_tokens=4, stop=[], temperature=1.0, top_p=1.0, seed=0).text
    assert seen == pytest.approx(waits)


def test_a_server_asking_for_a_long_wait_is_said_to_be_busy_at_once() -> None:
    seen: list[float] = []
    with FakeServer(busy=("3600",)) as server:
        backend = OpenAICompletions(ServerConfig(server.url, MODEL, timeout_s=5.0, retries=3, backoff_s=0.5),
                                    sleep=seen.append)
        with pytest.raises(ServerError, match="busy and asks to wait 3600 s before trying again") as info:
            backend.complete("x", max_tokens=4, stop=[], temperature=1.0, top_p=1.0, seed=0)
    assert seen == [] and len(server.requests) == 1 and "Run again later" in info.value.user_message()


def test_a_name_server_that_does_not_answer_holds_neither_a_stop_nor_the_timeout(monkeypatch) -> None:
    real = socket.getaddrinfo

    def unanswered(host, *args, **kwargs):
        if host == "gpu-box.example":
            time.sleep(5)  # a resolver waiting on a name server that went away
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", unanswered)
    cfg = ServerConfig("http://gpu-box.example:8000", MODEL, timeout_s=0.5, retries=0)
    ask = {"max_tokens": 4, "stop": [], "temperature": 1.0, "top_p": 1.0, "seed": 0}
    started = time.monotonic()
    with pytest.raises(ServerUnreachable, match=r"did not answer within 0\.5 s"):
        OpenAICompletions(cfg).complete("x", **ask)
    assert time.monotonic() - started < 2.0
    started = time.monotonic()
    stopped = OpenAICompletions(ServerConfig(cfg.endpoint, MODEL, timeout_s=30.0, retries=0),
                                should_stop=lambda: time.monotonic() > started + 0.3)
    with pytest.raises(RequestCancelled):
        stopped.complete("x", **ask)
    assert time.monotonic() - started < 2.0


def test_errors_are_remote_errors() -> None:
    for error in (ServerUnreachable, ServedModelNotFound, LogprobsUnavailable):
        assert error("x").user_message().startswith("x. ")  # the hint follows a full stop
        assert error("x.").user_message().startswith("x. ")
    assert ServerError(502, "bad gateway").status == 502


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--endpoint", "http://127.0.0.1:9"], "--backend openai needs --served-model"),
        (["--served-model", MODEL], "--backend openai needs --endpoint"),
    ],
)
def test_cli_usage_errors_exit_2(capsys, args: list[str], message: str) -> None:
    assert main(["run", QUESTION, "--backend", "openai", *args, "--no-save"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("command", ["run", "bench"])
@pytest.mark.parametrize(("args", "named"), [
    (["--endpoint", "http://127.0.0.1:9"], "{address} is for a server: add --backend openai to use it"),
    (["--server", "http://127.0.0.1:9", "--served-model", MODEL, "--one-request-per-path"],
     "{address} and --served-model and --one-request-per-path are for a server: add --backend openai to use them"),
])  # fmt: skip
def test_a_servers_options_without_the_openai_backend_are_said_not_ignored(capsys, command, args, named) -> None:
    """Before, `run --endpoint URL` loaded the bundled model here and never asked the server. The address is
    named as the command names it (bench's is --server; it said --endpoint)."""
    assert main([command, *([QUESTION] if command == "run" else []), "--model", "synthetic:tiny-llama", *args,
                 "--no-save" if command == "run" else "--plan-only"]) == 2
    named = named.format(address="--endpoint" if command == "run" else "--server")
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"beamwise: error: {named}") and len(err.splitlines()) == 1, err
    assert "or leave" in err and "to run --model on this machine" in err


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--endpoint", "CLOSED"], "cannot reach the server"),
        (["--verifier", "prm", "--verifier-model", "/no/such/prm"], "/no/such/prm"),
        (["--api-key-env", "BEAMWISE_UNSET_VARIABLE"], "BEAMWISE_UNSET_VARIABLE"),
    ],
)
def test_cli_server_errors_are_one_line_exit_2(capsys, extra: list[str], needle: str) -> None:
    with FakeServer() as server:
        endpoint = ["--endpoint", server.url] if "--endpoint" not in extra else []
        extra = [f"http://127.0.0.1:{closed_port()}" if a == "CLOSED" else a for a in extra]
        code = main(["run", QUESTION, "--backend", "openai", *endpoint, "--served-model", MODEL, *extra, "--no-save",
                     "--request-timeout", "2"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("beamwise: error:")]
    assert code == 2 and len(errors) == 1 and needle in errors[0], errors


def test_stop_aborts_the_request_in_flight() -> None:
    """The server takes 10 s per answer; a Stop 0.3 s into the first request closes its connection: the server
    sees the client leave and the run ends cancelled, without waiting out the answer."""
    with FakeServer(mode="slow", delay=10.0) as server:
        began = time.monotonic()
        events = list(run(QUESTION, config(server.url, timeout_s=30.0), SEARCH,
                          should_stop=lambda: time.monotonic() - began > 0.3))
        ended = time.monotonic()
        for _ in range(200):  # the handler notices the hang-up within its next 10 ms slice
            if server.abandoned:
                break
            time.sleep(0.01)
    assert events[-1] == ev.RunCancelled(0) and [e.type for e in events] == ["run_started", "run_cancelled"]
    assert ended - began < 5.0  # not the 10 s the answer would have taken
    assert len(server.abandoned) == 1 and server.abandoned[0] < began + 5.0


def test_stop_during_the_backoff_does_not_wait_it_out() -> None:
    began = time.monotonic()
    backend = OpenAICompletions(ServerConfig(f"http://127.0.0.1:{closed_port()}", MODEL, retries=3, backoff_s=20.0),
                                should_stop=lambda: time.monotonic() - began > 0.2)
    with pytest.raises(RequestCancelled):
        backend.complete("x", max_tokens=4, stop=[], temperature=1.0, top_p=1.0, seed=0)
    assert time.monotonic() - began < 5.0


def test_a_refused_key_is_a_clear_401(monkeypatch) -> None:
    monkeypatch.setenv("BEAMWISE_TEST_KEY", "sk-wrong")
    with FakeServer(key="sk-right") as server:
        failed = failure(server.url, api_key_env="BEAMWISE_TEST_KEY")
    assert failed.error == "ServerError" and "HTTP 401: the API key was refused (Invalid API key)" in failed.message
    assert "--api-key-env" in failed.message and len(server.headers) == 0  # GET /models only, not retried


def test_a_server_that_dies_mid_run_keeps_the_steps_done(tmp_path: Path) -> None:
    """Step 1 (4 requests) succeeds, then every answer is a 500: the session is stored as failed, with step 1."""
    store = SessionStore(tmp_path / "s.db")
    recorder = SessionRecorder(store)
    with FakeServer(fail_after=4) as server:
        for event in run(QUESTION, config(server.url, retries=1), SEARCH):
            recorder.write(event)
    recorder.close()
    session = store.get_session(recorder.session_id)
    assert session["status"] == "failed"
    stored = store.events(recorder.session_id)
    assert [e.step for e in stored if e.type == "step_selected"] == [1]
    assert stored[-1].type == "run_failed" and "HTTP 500" in stored[-1].message


def test_check_connection_says_what_it_found() -> None:
    with FakeServer() as server:
        check = check_connection(config(server.url))
        assert check.served == (MODEL,) and "answered with log-probabilities" in check.sentence(config(server.url))
        with pytest.raises(ServedModelNotFound, match="serves fake-model, not 'other'"):
            check_connection(config(server.url, model="other"))
    with FakeServer(mode="no-logprobs") as server, pytest.raises(LogprobsUnavailable):
        check_connection(config(server.url))
    with pytest.raises(ServerUnreachable, match="cannot reach the server"):
        check_connection(config(f"http://127.0.0.1:{closed_port()}"))


def test_a_gateway_listing_hundreds_of_models_is_named_in_one_short_line(monkeypatch) -> None:
    from engine.backends.openai import ConnectionCheck

    names = [f"team/model-{i}" for i in range(300)] + ["bad\nname"]
    backend = OpenAICompletions(config("http://127.0.0.1:9"))
    monkeypatch.setattr(backend, "_request", lambda *args, **kw: {"data": [{"id": n} for n in names]})
    with pytest.raises(ServedModelNotFound) as info:
        backend.check_model()
    said = info.value.user_message()
    assert "team/model-7 and 293 more (GET /v1/models lists them)" in said and len(said) < 500 and "\n" not in said
    line = ConnectionCheck((*names, MODEL), 0.1).sentence(config("http://127.0.0.1:9"))
    assert "and 293 more" in line and "\n" not in line


def test_a_key_given_directly_is_sent_and_not_in_the_record() -> None:
    with FakeServer(key="sk-from-keyring") as server:
        cfg = config(server.url, api_key="sk-from-keyring", key_source="keyring")
        events = list(run(QUESTION, cfg, SEARCH))
    assert events[-1].type == "run_finished"
    assert "sk-from-keyring" not in repr(cfg) and "sk-from-keyring" not in json.dumps(ev.to_dict(events[0]))
    assert events[0].cache["key_source"] == "keyring"


def test_bench_puts_the_server_beside_a_local_run(capsys, tmp_path: Path) -> None:
    report = tmp_path / "remote.json"
    with FakeServer() as server:
        code = main(["bench", "--backend", "openai", "--server", server.url, "--served-model", MODEL,
                     "--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "8",
                     "--gen-tokens", "24", "--question", QUESTION, "--step-delimiter", "\\n\\n", "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 0, out
    remote, local = json.loads(report.read_text(encoding="utf-8"))["runs"]
    assert (remote["backend"], remote["model"], remote["ok"]) == ("openai", MODEL, True)
    assert [s["requests"] for s in remote["steps"]] == [4, 4, 4]  # N x M completions a step; the model check apart
    assert [s["tokens"] for s in remote["steps"]] == [16, 16, 20]  # the fake's words: 4 a step, 5 in the answer
    assert remote["requests"] == len(server.requests) - 1 == 12  # the connection check's one token apart
    assert local["backend"] == "local" and local["ok"] and local["requests"] == 0 and local["tokens"] > 0
    assert all(s["seconds"] > 0 for s in remote["steps"] + local["steps"])
    lines = out.splitlines()
    assert any(line.split()[:4] == ["1", "openai", MODEL, "4"] for line in lines)
    assert any(line.split()[:2] == ["1", "local"] for line in lines)
    assert any(line.split()[:5] == ["total", "openai", MODEL, "12", "52"] for line in lines)


def test_bench_on_a_server_that_dies_mid_search_exits_2_with_one_readable_line(capsys) -> None:
    """The server's failure is not a fault in Beamwise: exit 2 as `run` gives, and its words end in a stop."""
    with FakeServer(fail_after=5) as server:  # the connection check, then step 1 (4), then 500s
        code = main(["bench", "--backend", "openai", "--server", server.url, "--served-model", MODEL, "--no-local",
                     "--beams", "2", "--width", "2", "--step-tokens", "8", "--gen-tokens", "24",
                     "--question", QUESTION, "--step-delimiter", "\\n\\n", "--request-timeout", "2"])
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "did not finish" in x]
    assert code == 2 and "HTTP 500" in line and ".;" not in line and " s in all" in line


def test_bench_without_a_server_is_one_clear_line(capsys) -> None:
    code = main(["bench", "--backend", "openai", "--server", f"http://127.0.0.1:{closed_port()}", "--served-model",
                 MODEL, "--request-timeout", "2"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("beamwise: error:")]
    assert code == 2 and len(err) == 1 and "cannot reach the server" in err[0]


def test_top_log_probabilities_give_each_tokens_top1_probability() -> None:
    """RKSC's confidence from a server: the largest of each position's top log-probabilities (vLLM may add the
    sampled token beside the top one); none when the server sent no top log-probabilities."""
    from engine.backends.replies import read_completion

    legacy = {"text": " 7", "finish_reason": "length", "logprobs": {
        "token_logprobs": [-0.5, -2.0], "top_logprobs": [{" 7": -0.5}, {"x": -0.2, "y": -2.0}]}}
    assert read_completion(legacy, {}, []).top1 == pytest.approx((math.exp(-0.5), math.exp(-0.2)))
    llama = {"text": " 7", "finish_reason": "length", "logprobs": {"content": [
        {"logprob": -1.0, "top_logprobs": [{"token": "a", "logprob": -0.1}]}, {"logprob": -0.3, "top_logprobs": []}]}}
    assert read_completion(llama, {}, []).top1 == pytest.approx((math.exp(-0.1), math.exp(-0.3)))
    bare = {"text": " 7", "finish_reason": "length", "logprobs": {"token_logprobs": [-0.5, -2.0]}}
    assert read_completion(bare, {}, []).top1 == ()


@pytest.mark.parametrize("value", ["-0.5", {"logprob": -0.5}, True, math.nan, math.inf, 5.0])
@pytest.mark.parametrize("shape", ["legacy", "llama.cpp", "top", "judge"])
def test_log_probabilities_that_are_not_are_the_servers_error(value, shape: str) -> None:
    """Before, text or an object ended the run as 'a fault in Beamwise' (exit 1, a traceback), and NaN, +inf or
    5.0 were scored ('score nan', 'score 54.598') and the run finished as if nothing were wrong."""
    from engine.backends.replies import first_top_logprobs, read_completion

    logprobs = {
        "legacy": {"token_logprobs": [-0.1, value]},
        "llama.cpp": {"content": [{"logprob": -0.1}, {"logprob": value}]},
        "top": {"token_logprobs": [-0.1], "top_logprobs": [{"a": value}]},
        "judge": {"top_logprobs": [{" Yes": value}]},
    }[shape]
    with pytest.raises(ServerError, match="log-probabilities are not log-probabilities"):
        if shape == "judge":
            first_top_logprobs(logprobs)
        else:
            read_completion({"text": " 7 8", "finish_reason": "length", "logprobs": logprobs}, {}, [])


def test_extreme_log_probabilities_are_read() -> None:
    """-inf (probability 0) and huge negatives are log-probabilities; a hair above 0 is a rounded 0."""
    from engine.backends.replies import read_completion

    choice = {"text": " 7", "finish_reason": "length", "logprobs": {
        "token_logprobs": [-math.inf, 1e-7], "top_logprobs": [{"a": -1e308}, {"b": 1e-7}]}}
    read = read_completion(choice, {}, [])
    assert read.logprobs == (-math.inf, 0.0) and read.top1 == (0.0, 1.0)


def test_llama_cpp_answers_are_read_too() -> None:
    """llama.cpp's server puts log-probabilities under "content" and sends no stop_reason: a stop is then the
    delimiter (it cannot say EOS), so the run ends by the answer mark, with the same texts and scores."""
    with FakeServer(mode="llama.cpp") as server:
        llama = events_of(server.url)
    with FakeServer() as server:
        vllm = events_of(server.url)
    assert llama[-1].type == "run_finished"
    scores = [(e.id, e.text, e.score) for e in llama if e.type == "candidate_scored"]
    assert scores and scores == [(e.id, e.text, e.score) for e in vllm if e.type == "candidate_scored"]


def test_one_request_per_path_asks_n_children_at_once() -> None:
    with FakeServer() as server:
        events = events_of(server.url, one_request_per_path=True)
    assert events[-1].type == "run_finished"
    # step 1: the prompt's N x M children in one request; then one request per kept path with n=M
    assert [r["n"] for r in server.requests] == [4, 2, 2, 2, 2]
    texts = [e for e in events if e.type == "candidate_text"]
    assert len(texts) == 12 and events[0].cache["one_request_per_path"] is True
    by_parent: dict = {}
    for t in texts:
        by_parent.setdefault((t.step, t.parent), []).append(t.text)
    assert all(len(v) == (4 if k[0] == 1 else 2) for k, v in by_parent.items())
    assert any(len(set(v)) > 1 for v in by_parent.values())  # siblings differ (seed + choice index)


def test_a_server_that_ignores_n_is_said() -> None:
    with FakeServer(mode="n-ignored") as server:
        failed = failure(server.url, one_request_per_path=True)
    assert failed.error == "RemoteError" and "answered 1 continuation(s) to a request for n=4" in failed.message
    assert "--one-request-per-path" in failed.message


@pytest.mark.parametrize("verifier", ["logprob", "self-judge"])
def test_answers_of_odd_shapes_are_read_where_they_can_be(verifier: str) -> None:
    """`usage` a list or counts as text, choices' indices as text, a model listing whose data is not a list:
    before, each ended the run as 'a fault in Beamwise' (AttributeError, TypeError); they say nothing the search
    needs, so they are passed over."""
    search = SearchConfig(beams=2, width=2, step_tokens=16, max_steps=4, verifier=verifier)
    with FakeServer(mode="odd-shapes") as server:
        events = events_of(server.url, search, one_request_per_path=True)
        assert check_connection(config(server.url)).served == ()
    assert events[-1].type == "run_finished", events[-1]
    assert next(e for e in events if e.type == "prefill_done").prompt_tokens == 0


def test_a_redirect_is_named_not_read_as_an_answer_that_is_not_json() -> None:
    with FakeServer(mode="redirect") as server:
        failed = failure(server.url)
        backend = OpenAICompletions(config(server.url, retries=2))
        with pytest.raises(ServerError) as refused:
            backend.complete("x", max_tokens=4, stop=[], temperature=1.0, top_p=1.0, seed=0)
    assert "HTTP 301: a redirect to https://elsewhere.example/v1/completions" in str(refused.value)
    assert failed.error == "ServerError" and "not JSON" not in failed.message
    assert "HTTP 301: a redirect to https://elsewhere.example/v1/models, which Beamwise does not" in failed.message
    assert backend.requests == 1 and len(server.headers) == 1  # not retried, not followed


@pytest.mark.parametrize(("endpoint", "why"), [
    ("127.0.0.1:8000", "it must begin with http:// or https://"),
    ("gpu-box:8000", "it must begin with http:// or https://"),
    ("ftp://127.0.0.1:8000", "it must begin with http:// or https://"),
    ("http://", "it names no host"),
    ("http://127.0.0.1:99999", "its port '99999' is not a port number (one from 1 to 65535)"),
    ("http://127.0.0.1:abc", "its port 'abc' is not a port number (one from 1 to 65535)"),
    ("http://127.0.0.1:8000/v1?key=1", "a query (?...) or fragment (#...) cannot be part of it"),
])  # fmt: skip
def test_an_address_that_is_not_one_is_refused_before_any_request(capsys, endpoint: str, why: str) -> None:
    """Before, an address without http:// read as host '' and failed after three tries with 'cannot reach the
    server: Name or service not known'; ftp:// was asked over http."""
    code = main(["run", QUESTION, "--backend", "openai", "--endpoint", endpoint, "--served-model", MODEL, "--no-save"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"the --endpoint {endpoint!r} is not a server address like http://gpu-box:8000: {why}" in err


def test_an_address_with_a_path_or_a_trailing_slash_is_asked() -> None:
    with FakeServer() as server:
        for endpoint in (f"{server.url}/", f"{server.url}/v1/", f" {server.url}"):
            assert check_connection(config(endpoint)).served == (MODEL,)


def test_an_answer_cut_off_is_said_not_called_unreachable() -> None:
    with FakeServer(mode="cut") as server:
        failed = failure(server.url, retries=1)
    assert failed.error == "ServerUnreachable" and "cannot reach" not in failed.message
    assert "closed the connection in the middle of its answer (" in failed.message and "more were due)" in (
        failed.message)
    assert len(server.requests) == 2  # retried, as a server restarting may answer the next try


def test_json_nested_past_the_stack_is_the_servers_error() -> None:
    """Before, RecursionError: the run ended as 'a fault in Beamwise' and `bench` printed a traceback."""
    from engine.backends.replies import error_detail

    with FakeServer(mode="nested") as server:
        failed = failure(server.url)
    assert failed.error == "ServerError" and "HTTP 200: an answer that is not JSON" in failed.message
    assert error_detail(b"[" * 100_000 + b"]" * 100_000).startswith("[[[")


def test_an_answer_past_the_size_limit_is_not_read_into_memory(monkeypatch) -> None:
    """Before, the client read whatever came until the timeout: an address that streams a file or an endless body
    filled the memory ('Out of memory. Try fewer beams...'). The fake sends 16 MB; the limit here is 1 MB."""
    import engine.backends.openai as openai

    monkeypatch.setattr(openai, "MAX_ANSWER_BYTES", 1_000_000)
    with FakeServer(mode="long") as server:
        failed = failure(server.url, retries=2)
    assert failed.error == "RemoteError" and "sent more than 1.0 MB for one answer" in failed.message
    assert len(server.requests) == 1  # not retried: the next answer would be as large


def test_the_connection_check_says_one_try_as_one() -> None:
    """Before, the check (one try, no retries) said 'did not answer within 0.2 s (1 tries)'."""
    with FakeServer(mode="slow", delay=1.0) as server, pytest.raises(ServerUnreachable) as silent:
        OpenAICompletions(config(server.url, timeout_s=0.2, retries=0)).complete(
            "x", max_tokens=4, stop=[], temperature=1.0, top_p=1.0, seed=0)
    assert str(silent.value).endswith("did not answer within 0.2 s.")


def self_signed(folder: Path) -> tuple[str, str]:
    """A certificate for 127.0.0.1 that no authority signed, and its key (files in `folder`)."""
    pytest.importorskip("cryptography")
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                  critical=False)
                   .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_file), str(key_file)


def test_an_untrusted_certificate_is_said_once_with_what_to_do(tmp_path: Path, monkeypatch) -> None:
    """Before: 'cannot reach the server ... CERTIFICATE_VERIFY_FAILED', tried three times, with the hint to check
    that the server is running. The same server is asked once SSL_CERT_FILE names its certificate."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    cert, key = self_signed(tmp_path)
    with FakeServer(tls=(cert, key)) as server:
        backend = OpenAICompletions(config(server.url, retries=2))
        with pytest.raises(RemoteError) as refused:
            backend.check_model()
        monkeypatch.setenv("SSL_CERT_FILE", cert)
        assert check_connection(config(server.url)).served == (MODEL,)  # TLS through the sliced reader
    message = refused.value.user_message()
    assert "showed a certificate this machine does not trust (self-signed certificate)" in message
    assert "SSL_CERT_FILE" in message and backend.requests == 1


def test_a_404_that_names_no_model_is_a_wrong_address() -> None:
    """An endpoint with a wrong path prefix: the server answers 404 'not found' to every route. Before, the run
    said it 'has no model 'fake-model'' and sent the user to check --served-model, which was right."""
    with FakeServer() as server:
        failed = failure(f"{server.url}/api")
    assert failed.error == "ServerError" and "no model" not in failed.message
    assert f"HTTP 404: nothing is served at {server.url}/api/v1/completions (not found)" in failed.message
    assert "Check the address" in failed.message and server.requests == []


@pytest.mark.parametrize(("body", "said"), [
    (b"<html>\n<head><title>500 Internal Server Error</title></head>\n<body>\n</body>\n</html>\n",
     "HTTP 500: 500 Internal Server Error"),  # an HTML page by its title, not its markup
    (b"<!DOCTYPE html><html><body><h1>Service &amp; more</h1>\n<p>Try later</p></body></html>",
     "HTTP 500: Service & more Try later"),  # without a title: its text
    (json.dumps({"error": {"message": "bad request:\n  field 'prompt'\n  too long"}}).encode(),
     "HTTP 500: bad request: field 'prompt' too long"),
    (b"\xff\x00\x1b[31mbroken", "HTTP 500: \ufffd [31mbroken"),
])  # fmt: skip
def test_a_servers_error_in_many_lines_is_said_in_one(body: bytes, said: str) -> None:
    """Before, the server's words went out as they came: an HTML page or a multi-line message broke the one-line
    error over several lines, and a NUL or an escape went to the terminal."""
    from engine.backends.replies import error_detail

    assert str(ServerError(500, error_detail(body))) == f"the server answered {said}"


def test_stop_ends_a_connection_request_that_goes_unanswered() -> None:
    """The server's box went away (its connection requests are dropped): before, a Stop waited for the connect's
    timeout (30 s here); now the connection is made in slices that see the Stop."""
    from tests.fake_openai import unanswered_port

    with unanswered_port() as port:
        if port is None:
            pytest.skip("this system refuses a connection to a full queue instead of leaving it unanswered")
        began = time.monotonic()
        backend = OpenAICompletions(config(f"http://127.0.0.1:{port}", timeout_s=30.0),
                                    should_stop=lambda: time.monotonic() - began > 0.3)
        with pytest.raises(RequestCancelled):
            backend.complete("x", max_tokens=4, stop=[], temperature=1.0, top_p=1.0, seed=0)
        assert time.monotonic() - began < 5.0
        with pytest.raises(ServerUnreachable, match=r"did not answer within 0\.3 s\."):
            OpenAICompletions(config(f"http://127.0.0.1:{port}", timeout_s=0.3, retries=0)).check_model()


def test_stop_ends_a_tls_handshake_that_goes_unanswered() -> None:
    """An https address whose server takes the connection and never answers the handshake (the queue of a socket
    that is never accepted from): before, a Stop waited for the socket's timeout (30 s here)."""
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(4)
        began = time.monotonic()
        backend = OpenAICompletions(config(f"https://127.0.0.1:{mute.getsockname()[1]}", timeout_s=30.0),
                                    should_stop=lambda: time.monotonic() - began > 0.3)
        with pytest.raises(RequestCancelled):
            backend.check_model()
        assert time.monotonic() - began < 5.0


def test_no_key_to_a_server_that_needs_one_says_it_needs_one() -> None:
    """With no --api-key-env the run said "the API key was refused ... Check the API key", of a key never sent."""
    with FakeServer(key="sk-right") as server:
        failed = failure(server.url)
    assert failed.error == "ServerError" and "HTTP 401: it needs an API key, and none was sent" in failed.message
    assert "refused" not in failed.message and "--api-key-env NAME" in failed.message, failed.message
