"""`run --backend openai` as a new user types it: a local model's option typed at its default value is refused as
README says (it was taken, as if left out), --threads where no PRM is loaded here, a PRM server without its served
name asks for that name (not a folder), and the prompt line says only what is known of a server's prompt."""

from __future__ import annotations

import pytest

from app.cli import main
from tests.fake_openai import MODEL, PRM, FakeServer
from tests.test_server_as_a_user import one_error

QUESTION = "A train travels 60 km in 45 minutes. What is its average speed in km/h?"


def server_run(url: str, *extra: str) -> list[str]:
    return ["run", QUESTION, "--backend", "openai", "--endpoint", url, "--served-model", MODEL, "--no-save",
            "--request-timeout", "2", "--beams", "1", "--width", "2", "--max-steps", "1", *extra]


@pytest.mark.parametrize("typed, named", [
    (["--model", "bundled"], "--model applies"),
    (["--dtype", "float32"], "--dtype applies"),
    (["--device", "auto"], "--device applies"),
    (["--policy", "auto"], "--policy applies"),
    (["--prefix-cache"], "--prefix-cache applies"),
    (["--prefix-order"], "--prefix-order applies"),
    (["--threads", "1"], "--threads applies"),
    (["--model", "bundled", "--policy", "auto", "--threads", "1"], "--model, --policy and --threads apply"),
])  # fmt: skip
def test_a_local_option_typed_at_its_default_is_refused(capsys, typed, named) -> None:
    with FakeServer() as server:
        code = main(server_run(server.url, *typed))
        assert not server.requests
    line = one_error(capsys)
    assert code == 2 and f"{named} to a model run on this machine" in line, line


def test_threads_are_taken_where_a_prm_loaded_here_uses_them(capsys) -> None:
    with FakeServer() as server:
        code = main(server_run(server.url, "--threads", "1", "--verifier", "prm", "--verifier-model",
                               "synthetic:tiny-qwen-prm"))
    assert code == 0, capsys.readouterr().err


def test_a_run_without_local_options_is_taken(capsys) -> None:
    with FakeServer() as server:
        assert main(server_run(server.url, "--seed", "3")) == 0, capsys.readouterr().err


def test_a_prm_server_without_its_model_asks_for_the_served_name(capsys) -> None:
    """Before: "the prm verifier needs a PRM: choose its folder (--verifier-model PATH)"."""
    with FakeServer() as server, FakeServer(mode="prm") as prm:
        code = main(server_run(server.url, "--verifier", "prm", "--verifier-endpoint", prm.url))
        assert not server.requests and not prm.pooled
    line = one_error(capsys)
    assert code == 2 and "--verifier-model NAME" in line and "served name" in line, line
    assert "folder" not in line and "PATH" not in line, line


def test_a_prm_server_with_its_model_runs(capsys) -> None:
    with FakeServer() as server, FakeServer(mode="prm") as prm:
        code = main(server_run(server.url, "--verifier", "prm", "--verifier-endpoint", prm.url,
                               "--verifier-model", PRM))
    assert code == 0, capsys.readouterr().err


@pytest.mark.parametrize("mode, said", [
    ("ok", "tokens (sent to the server)"),
    ("odd-shapes", "prompt: its tokens not counted by the server (sent to the server)"),  # `usage` unreadable
])
def test_a_server_runs_prompt_line_says_what_is_known(capsys, mode, said) -> None:
    """Before: "prompt: 33 tokens (0 cached, 33 computed), prefill 0.00 s", the server's cache unknown here and
    the time the first request's."""
    with FakeServer(mode=mode) as server:
        assert main(server_run(server.url)) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("prompt:")]
    assert said in line and "cached" not in line and "prefill" not in line, line
