"""`--backend openai` against a real OpenAI-compatible server (marker `server`; README, Using a server).

Where the server comes from, first found wins:
- BEAMWISE_TEST_SERVER_URL and BEAMWISE_TEST_SERVED_MODEL: a server already running (vLLM, SGLang,
  llama.cpp), with BEAMWISE_TEST_SERVER_KEY_ENV naming the variable of its API key if it wants one;
- `llama-server` (llama.cpp) on PATH: started here on 127.0.0.1 on the bundled GGUF;
- BEAMWISE_LLAMA_CPP_PYTHON: the Python of a separate environment with `llama-cpp-python[server]`,
  started here the same way (`python -m llama_cpp.server`).
Without one, every test here skips and says how to get one.

What is compared: the server runs the quantised GGUF with its own kernels while the local engine runs
the dequantised weights in float32, so the trees differ in their tokens. These tests check the shape
(events in order, N x M children a step, kept paths, a parent chain, a recorded and exported session,
Stop mid-request, the errors), never that the answers match.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.export import export_session
from app.recorder import SessionRecorder
from app.store import SessionStore
from engine import events as ev
from engine.backends.openai import ServerConfig, check_connection
from engine.config import SearchConfig
from engine.remote_search import REMOTE_DEVICE, run
from tests.fake_openai import closed_port

pytestmark = pytest.mark.server

ALIAS = "smollm2-bundled"
QUESTION = "What is 12 + 7?"
SEARCH = SearchConfig(beams=2, width=2, step_tokens=24, max_steps=3, seed=3)
HOW = (
    "no OpenAI-compatible server to test against: set BEAMWISE_TEST_SERVER_URL and BEAMWISE_TEST_SERVED_MODEL, "
    "or put llama.cpp's llama-server on PATH (README, Using a server)"
)


def _launch_command(gguf: Path, port: int) -> list[str] | None:
    """The command that serves the bundled GGUF on 127.0.0.1:port, or None when nothing here can."""
    common = ["--host", "127.0.0.1", "--port", str(port)]
    if binary := shutil.which("llama-server"):
        return [binary, "-m", str(gguf), *common, "--alias", ALIAS, "-c", "4096", "--seed", "0"]
    if python := os.environ.get("BEAMWISE_LLAMA_CPP_PYTHON"):
        return [
            python,
            "-m",
            "llama_cpp.server",
            "--model",
            str(gguf),
            *common,
            "--model_alias",
            ALIAS,
            "--n_ctx",
            "4096",
        ]
    return None


def _wait_until_serving(url: str, process: subprocess.Popen, seconds: float = 180.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the server exited with status {process.returncode} before serving")
        try:
            with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.5)  # still loading the model (llama.cpp answers 503 meanwhile)
    pytest.fail(f"the server at {url} did not serve within {seconds:.0f} s")


@pytest.fixture(scope="module")
def server() -> Iterator[ServerConfig]:
    if url := os.environ.get("BEAMWISE_TEST_SERVER_URL"):
        model = os.environ.get("BEAMWISE_TEST_SERVED_MODEL")
        if not model:
            pytest.skip("BEAMWISE_TEST_SERVER_URL is set without BEAMWISE_TEST_SERVED_MODEL")
        yield ServerConfig(url, model, os.environ.get("BEAMWISE_TEST_SERVER_KEY_ENV"), timeout_s=120.0)
        return
    from engine.bundled import bundled_gguf_path

    try:
        gguf = bundled_gguf_path()
    except Exception as error:  # the bundled model package is not installed
        pytest.skip(f"the bundled GGUF is not installed ({error})")
    port = closed_port()
    command = _launch_command(gguf, port)
    if command is None:
        pytest.skip(HOW)
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=sys.stderr)
    try:
        _wait_until_serving(url, process)
        yield ServerConfig(url, ALIAS, timeout_s=120.0)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def test_the_connection_check_passes(server: ServerConfig) -> None:
    check = check_connection(server)
    assert server.served_model in check.served or check.served == ()


def test_a_search_gives_a_well_formed_tree(server: ServerConfig) -> None:
    events = list(run(QUESTION, server, SEARCH))
    assert events[-1].type == "run_finished", events[-1]
    assert events[0].device == REMOTE_DEVICE and events[0].model == server.served_model
    texts = [e for e in events if e.type == "candidate_text"]
    scored = {e.id: e for e in events if e.type == "candidate_scored"}
    selected = [e for e in events if e.type == "step_selected"]
    assert len(scored) == len(texts) and all(t.tokens > 0 or t.finished for t in texts)
    assert len([c for c in scored.values() if c.step == 1]) == SEARCH.beams * SEARCH.width
    for step in selected:
        assert set(step.kept) <= set(scored) and len(step.kept) <= SEARCH.beams
        if step.step > 1:  # every expanded path has M children
            parents = [c.parent for c in scored.values() if c.step == step.step]
            assert all(parents.count(p) == SEARCH.width for p in set(parents))
    finished = events[-1]
    assert finished.answer and finished.path[-1] in selected[-1].kept
    assert all(scored[c].parent == p for p, c in zip(finished.path, finished.path[1:], strict=False))
    # the logprob verifier's score is exp(mean log-probability) of the server's own tokens: in (0, 1]
    assert all(0.0 < e.score <= 1.0 for e in scored.values() if e.tokens > 0)


def test_the_session_records_and_exports(server: ServerConfig, tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "s.db")
    recorder = SessionRecorder(store)
    for event in run(QUESTION, server, SEARCH):
        recorder.write(event)
    recorder.close()
    sid = recorder.session_id
    assert store.get_session(sid)["status"] == "finished"
    stored = store.events(sid)
    assert stored[-1].type == "run_finished" and stored[0].device == REMOTE_DEVICE
    for fmt in ("md", "html", "json"):
        assert export_session(store, sid, fmt, tmp_path / f"s.{fmt}").stat().st_size > 0


def test_stop_ends_a_long_request(server: ServerConfig) -> None:
    """A Stop half a second into a 2,000-token request: the connection is closed, the run ends cancelled."""
    long_steps = SearchConfig(beams=1, width=1, step_tokens=2000, max_steps=1, step_delimiter=None)
    began, asked = time.monotonic(), []

    def stop() -> bool:
        late = time.monotonic() - began > 0.5
        asked.append(late)
        return late

    events = list(run("Count from 1 to 5000, one number a line:", server, long_steps, should_stop=stop))
    if events[-1].type == "run_finished" and not any(asked):
        pytest.skip(f"the model ended its answer in {time.monotonic() - began:.2f} s, before the Stop")
    assert events[-1] == ev.RunCancelled(0)
    assert time.monotonic() - began < 10.0


def test_a_wrong_model_name_is_said(server: ServerConfig) -> None:
    events = list(
        run(QUESTION, ServerConfig(server.endpoint, "no-such-model", server.api_key_env, timeout_s=30), SEARCH)
    )
    assert events[-1].type == "run_failed" and events[-1].error == "ServedModelNotFound"  # /v1/models says


def test_the_self_judge_reads_the_servers_top_logprobs(server: ServerConfig) -> None:
    """The server's own shape of top log-probabilities (vLLM's top_logprobs, llama.cpp's content[])."""
    judged = SearchConfig(beams=1, width=2, step_tokens=24, max_steps=2, verifier="self-judge")
    events = list(run(QUESTION, server, judged))
    assert events[-1].type == "run_finished", events[-1]
    scores = [e.score for e in events if e.type == "candidate_scored"]
    assert scores and all(0.0 <= s <= 1.0 for s in scores)
    assert all(e.verifier_tokens > 0 for e in events if e.type == "step_selected")


def test_one_request_per_path(server: ServerConfig) -> None:
    batched = ServerConfig(
        server.endpoint, server.served_model, server.api_key_env, timeout_s=120.0, one_request_per_path=True
    )
    events = list(run(QUESTION, batched, SEARCH))
    if events[-1].type == "run_failed" and "does not honour n" in events[-1].message:
        pytest.skip(f"this server does not honour n: {events[-1].message}")
    assert events[-1].type == "run_finished", events[-1]
    assert len([e for e in events if e.type == "candidate_scored" and e.step == 1]) == SEARCH.beams * SEARCH.width
