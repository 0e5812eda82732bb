"""What a walk through the README found: the Models picture's example model listed as a problem, a server's group
said done before it was written, a web server's 404 taken for an API without /models, and two refusals that
left out what the README names ('none' for --step-delimiter, `lbs` for --policies)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from app.cli import main
from app.heartbeat import StepProgress
from app.store import SessionStore
from engine import events as ev
from engine.backends.openai import OpenAICompletions, ServerConfig
from engine.config import SearchConfig
from engine.errors import ServerError
from engine.remote_search import REMOTE_DEVICE
from tests.fake_openai import MODEL, FakeServer
from tests.plain_web import plain_files, serving

ROOT = Path(__file__).resolve().parent.parent


# 1. docs/screenshots.py's example model
def test_the_screenshots_example_model_is_listed_whole(tmp_path):
    """It served config.json and zeroed weights only: the Models picture showed "model folder has no tokenizer"
    in red, and the table shrank to its Name column."""
    spec = importlib.util.spec_from_file_location("screenshots", ROOT / "docs" / "screenshots.py")
    screenshots = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(screenshots)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", BEAMWISE_DATA_DIR=str(tmp_path / "data"),
               BEAMWISE_CONFIG_DIR=str(tmp_path / "config"))
    screenshots.pull_a_model(env)
    listed = subprocess.run([sys.executable, "-m", "app.cli", "models", "list"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    row = next(line for line in listed.stdout.splitlines() if line.startswith("example--tiny-llama"))
    assert listed.returncode == 0 and row.split()[1] == "generator", listed.stdout + listed.stderr
    assert "models folder (downloaded)" in row and "problem" not in listed.stdout + listed.stderr, row


# 4. the heartbeat's group count
def _remote_started() -> ev.RunStarted:
    return ev.RunStarted(question="q", model=MODEL, verifier="logprob", device=REMOTE_DEVICE, emulated=False,
                         policy="remote", kv_budget_bytes=0, search={"beams": 2, "width": 2}, cache={})


def test_a_servers_group_is_done_once_its_candidates_are_written():
    """The server's search says its one group before its requests go out: the line said "1 group(s) done,
    0/4 candidates written" while the server wrote them."""
    progress = StepProgress()
    progress.apply(_remote_started())
    progress.apply(ev.StepStarted(step=1, beams=()))
    progress.apply(ev.GroupScheduled(step=1, group=0, candidates=(1, 2, 3, 4), prefetched=()))
    assert ", 0 group(s) done, 0/4 candidates written (0 tokens)" in progress.line()
    for cid in (1, 2, 3):
        progress.apply(ev.CandidateText(1, cid, None, "x", 5, False, 0))
    assert ", 0 group(s) done, 3/4 candidates written (15 tokens)" in progress.line()
    progress.apply(ev.CandidateText(1, 4, None, "x", 5, False, 0))
    assert progress.groups == 1


def test_a_run_against_a_server_never_says_a_group_done_before_its_candidates_are():
    from engine import remote_search

    search = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8)
    progress, said = StepProgress(), []
    with FakeServer() as server:
        for event in remote_search.run("What is 2+3?", ServerConfig(server.url, MODEL), search):
            progress.apply(event)
            said.append((progress.groups, progress.generated, progress.candidates, event.type))
    writing = [s for s in said if s[3] in ("group_scheduled", "candidate_text")]
    assert writing and all(groups == (generated == candidates) for groups, generated, candidates, _ in writing), said


def test_the_engines_group_is_said_once_decoded_and_counted_then():
    """engine/search.py says a group when the policy has decoded it, its text right after: counted there."""
    progress = StepProgress()
    progress.apply(ev.RunStarted(question="q", model="m", verifier="logprob", device="cpu (emulated GPU)",
                                 emulated=True, policy="lbs", kv_budget_bytes=1, search={"beams": 2, "width": 2},
                                 cache={}))
    progress.apply(ev.StepStarted(step=1, beams=()))
    progress.apply(ev.GroupScheduled(step=1, group=0, candidates=(1, 2), prefetched=()))
    assert progress.groups == 1


# 5. a web server is no API without /models
def test_a_plain_web_server_is_refused_at_the_model_check_and_nothing_is_recorded(tmp_path, capsys):
    """Its 404 to /v1/models passed as an API without /models: the run printed its model line, failed at the first
    completion (HTTP 501) and recorded a failed session."""
    db = tmp_path / "srv.db"
    with serving(plain_files(tmp_path / "site")) as url:
        code = main(["run", "x", "--backend", "openai", "--endpoint", url, "--served-model", "m", "--db", str(db),
                     "--max-steps", "1", "--request-timeout", "5"])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert f"HTTP 404: nothing is served at {url}/v1/models" in captured.err, captured.err
    assert "there is no OpenAI-compatible API at this address" in captured.err and "501" not in captured.err
    assert f"model m at {url}" not in captured.out  # the run's first line never came
    if db.exists():
        with SessionStore(db) as store:
            assert store.list_sessions() == []


class NoModelsRoute(BaseHTTPRequestHandler):
    """An API without /models: its 404 in JSON, or with no body."""

    body = b'{"error": {"message": "not found"}}'

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args) -> None:
        pass


class EmptyNotFound(NoModelsRoute):
    body = b""


@pytest.mark.parametrize("handler", [NoModelsRoute, EmptyNotFound])
def test_an_api_without_a_models_route_still_passes_the_check(handler):
    with serving(handler) as url:
        assert OpenAICompletions(ServerConfig(url, MODEL, retries=0)).check_model() == ()


def test_the_web_servers_404_is_a_server_error_from_the_check(tmp_path):
    with serving(plain_files(tmp_path)) as url, pytest.raises(ServerError) as refused:
        OpenAICompletions(ServerConfig(url, MODEL, retries=0)).check_model()
    assert refused.value.status == 404 and "no OpenAI-compatible API" in refused.value.user_message()


# 6. refusals that name what the README names
def test_a_broken_step_delimiter_escape_says_none_as_help_does(capsys):
    with pytest.raises(SystemExit) as refused:
        main(["run", "hi", "--step-delimiter", "\\x"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "has a broken escape" in err
    assert "give 'none' to cut steps by length only" in err and "leave it empty" not in err, err


def test_an_unknown_bench_policy_lists_lbs_too(capsys):
    assert main(["bench", "--policies", "lbz"]) == 2
    err = capsys.readouterr().err
    assert "unknown policies ['lbz']; choose from in_device, layerwise" in err
    assert "or lbs (lbs:+prefix_order)." in err, err
