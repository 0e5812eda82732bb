"""A new user's walk through README's "Using a server": each thing met there is said on one line, in the words of
the command given, with advice that fits it (a timeout too large, a password in the address, bench's options and
retries, a PRM's pooled shape, a refused key on the PRM's server, broken log-probabilities, spaces around the
address, a local model's options given with a server, the keyring's own words)."""

from __future__ import annotations

import dataclasses
import gc
import math
import time
from pathlib import Path

import keyring
import pytest
from keyring.backends.fail import Keyring as NoKeyring

from app.cli import main
from app.server_keys import KeyringUnavailable, load_key
from engine.backends.addresses import address_problem
from engine.backends.openai import OpenAICompletions, ServerConfig
from engine.backends.sockets import connect, never
from engine.config import SearchConfig
from engine.errors import ConfigError, RemoteError, ServerError
from engine.remote_search import run
from engine.verifiers.base import StepToScore
from engine.verifiers.served_prm import ServedPRM
from tests.fake_openai import MODEL, PRM, FakeServer

QUESTION = "A train travels 60 km in 45 minutes. What is its average speed in km/h?"
SEARCH = SearchConfig(beams=1, width=2, step_tokens=16, max_steps=1)


def server_run(url: str, *extra: str) -> list[str]:
    return ["run", QUESTION, "--backend", "openai", "--endpoint", url, "--served-model", MODEL, "--no-save",
            "--request-timeout", "2", *extra]


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("beamwise: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# 1. --request-timeout inf
@pytest.mark.parametrize("timeout", ["inf", "1e10", "nan", "86401"])
@pytest.mark.parametrize("command", ["run", "bench"])
def test_a_timeout_too_large_is_refused_with_the_largest(capsys, command: str, timeout: str) -> None:
    """Before, inf and 1e10 failed inside the socket (OverflowError: timestamp out of range), exit 1."""
    with FakeServer() as server:
        args = server_run(server.url) if command == "run" else [
            "bench", "--backend", "openai", "--server", server.url, "--served-model", MODEL, "--no-local"]
        code = main([*args, "--request-timeout", timeout])
        assert not server.requests
    line = one_error(capsys)
    assert code == 2 and "--request-timeout must be more than 0 and at most 86,400 seconds" in line, line


def test_a_day_is_the_largest_timeout_taken(capsys) -> None:
    with FakeServer() as server:
        assert main([*server_run(server.url), "--request-timeout", "86400", "--max-steps", "1"]) == 0
    with pytest.raises(ConfigError, match="at most 86,400 seconds"):
        ServerConfig("http://127.0.0.1:8000", MODEL, timeout_s=math.inf)


# 2. a password in the address
@pytest.mark.parametrize("address", ["http://user:SECRETPW@127.0.0.1:PORT", "http://SECRETPW@127.0.0.1:PORT"])
def test_a_password_in_the_address_is_refused_and_not_echoed(capsys, tmp_path: Path, address: str) -> None:
    """Before, it was taken, never sent (a key server said 401) and stored in the session database as typed."""
    db = tmp_path / "sessions.db"
    with FakeServer(key="SECRETPW") as server:
        url = address.replace("PORT", server.url.rsplit(":", 1)[1])
        code = main(["run", QUESTION, "--backend", "openai", "--endpoint", url, "--served-model", MODEL,
                     "--db", str(db)])
        assert not server.requests
    line = one_error(capsys)
    assert code == 2 and "user name or password" in line and "--api-key-env" in line, line
    assert "SECRETPW" not in line and "***@127.0.0.1" in line
    assert not db.exists() or b"SECRETPW" not in db.read_bytes()


def test_the_window_refuses_a_password_in_the_address_too() -> None:
    assert "user name or password" in address_problem("http://me:pw@gpu-box:8000")
    assert address_problem("http://gpu-box:8000/v1/a@b") == ""  # an @ in the path is not a user


# 3. bench names --server and retries its connection check
def test_bench_without_its_address_names_server(capsys) -> None:
    """Before, it said "--backend openai needs --endpoint", an option bench's README never names."""
    code = main(["bench", "--backend", "openai", "--served-model", MODEL, "--no-local"])
    line = one_error(capsys)
    assert code == 2 and "--backend openai needs --server URL" in line and "--endpoint" not in line, line
    assert line.endswith("See `beamwise bench --help`."), line


def test_bench_retries_its_connection_check_as_run_does(capsys) -> None:
    """A server busy once (429) at the connection check: before, bench failed at once where run retried it."""
    with FakeServer(busy=(None,)) as server:
        code = main(["bench", "--backend", "openai", "--server", server.url, "--served-model", MODEL, "--no-local",
                     "--beams", "1", "--width", "2", "--step-tokens", "8", "--gen-tokens", "8",
                     "--question", QUESTION, "--request-timeout", "2"])
    out = capsys.readouterr().out
    assert code == 0 and "openai (fake-model): answer" in out, out


# 4. a PRM server's pooled shape
class Pools:
    def __init__(self, pooled: list) -> None:
        self.pooled = pooled

    def pool(self, messages: list[dict]) -> list:
        return self.pooled


@pytest.mark.parametrize(("pooled", "said"), [
    ([[0.1, 0.2, 0.7]], "pooled 3 numbers per step"),
    ([0.9], "pooled a bare number per step"),
    (["yes"], "pooled text per step"),
    ([[0.1, 0.9], [0.2, 0.8]], "pooled 2 value(s) for 1 step(s)"),
])  # fmt: skip
def test_a_prm_servers_other_shape_is_said_as_what_came(pooled: list, said: str) -> None:
    """Before, three numbers or a bare number for one step said "pooled 1 value(s) for 1 step(s)", which reads
    as right."""
    with pytest.raises(RemoteError) as caught:
        ServedPRM(Pools(pooled)).score([StepToScore(QUESTION, (), "Step 1: idea 1.", ())])
    assert said in str(caught.value) and "instead of one [P(-), P(+)] pair per step" in str(caught.value)


# 5. a refused key on the PRM's server
def test_a_refused_key_on_the_prm_server_names_its_address_and_option() -> None:
    prm_search = SearchConfig(beams=1, width=2, step_tokens=16, max_steps=1, verifier="prm", verifier_model=PRM)
    with FakeServer() as generator, FakeServer(mode="prm", key="sk-prm") as prm:
        cfg = ServerConfig(generator.url, MODEL, prm_endpoint=prm.url, backoff_s=0.0, timeout_s=2.0, api_key="sk")
        failed = list(run(QUESTION, cfg, prm_search))[-1]
        no_key = list(run(QUESTION, dataclasses.replace(cfg, api_key=None), prm_search))[-1]
    assert failed.error == "ServerError" and f"the server at {prm.url} answered HTTP 401" in failed.message
    assert "API key of the --verifier-endpoint server (--api-key-env NAME" in failed.message
    assert "both servers" in failed.message
    assert f"the server at {prm.url} answered HTTP 401: it needs an API key, and none was sent" in no_key.message
    assert "--api-key-env NAME" in no_key.message and "both servers" in no_key.message, no_key.message


def test_a_refused_key_on_the_generator_names_endpoint() -> None:
    with FakeServer(key="sk") as server:
        cfg = ServerConfig(server.url, MODEL, backoff_s=0.0, timeout_s=2.0, api_key="sk-wrong")
        failed = list(run(QUESTION, cfg, SEARCH))[-1]
    assert f"the server at {server.url} answered HTTP 401" in failed.message
    assert "API key of the --endpoint server" in failed.message and "both servers" not in failed.message


# 6. broken log-probabilities, and what came instead of text
class BrokenLogprobs(FakeServer):
    """Answers in the OpenAI shape, with a first log-probability that is not one."""

    value: object = math.nan

    def _choice(self, prompt: str, seed: int, max_tokens: int) -> dict:
        choice = super()._choice(prompt, seed, max_tokens)
        choice["logprobs"]["token_logprobs"][0] = self.value
        return choice


@pytest.mark.parametrize("value", [math.nan, 0.5, "-0.5"])
def test_broken_log_probabilities_are_not_said_as_a_wrong_address(value) -> None:
    """Before, they were advised "check that --endpoint is its OpenAI-compatible API, not another program"."""
    with BrokenLogprobs() as server:
        server.value = value
        failed = list(run(QUESTION, ServerConfig(server.url, MODEL, backoff_s=0.0, timeout_s=2.0), SEARCH))[-1]
    assert "log-probabilities are not log-probabilities" in failed.message
    assert "its log-probabilities are broken" in failed.message and "another program" not in failed.message


def test_an_answer_without_text_says_what_its_choice_holds_not_a_cut_repr() -> None:
    """Before: "...holds no text: {'choices': [...], 'usage': {'prompt_tokens':." cut mid-structure."""
    with FakeServer(mode="no-text") as server:
        failed = list(run(QUESTION, ServerConfig(server.url, MODEL, backoff_s=0.0, timeout_s=2.0), SEARCH))[-1]
    assert "an answer whose choices hold no text (a choice holds index, finish_reason" in failed.message
    assert "{" not in failed.message


def test_an_answer_without_choices_says_what_it_holds() -> None:
    backend = OpenAICompletions(ServerConfig("http://127.0.0.1:9", MODEL))
    backend._request = lambda method, path, body, **kw: {"object": "error", "usage": {"prompt_tokens": 3}}
    with pytest.raises(ServerError, match=r"an answer without choices \(it holds object, usage\)"):
        backend.complete("Q", max_tokens=1, stop=[], temperature=0.0, top_p=1.0, seed=0)


# 7. spaces around the address
def test_spaces_around_the_address_are_trimmed(capsys) -> None:
    """Before: "...is not a URL like http://host:8000 (Port could not be cast to integer value as '18000 ')"."""
    with FakeServer() as server:
        code = main(server_run(f"  {server.url} ", "--max-steps", "1"))
        assert code == 0 and server.requests


def test_an_address_the_client_cannot_read_is_not_said_as_a_server_down() -> None:
    with pytest.raises(RemoteError) as caught:
        OpenAICompletions(ServerConfig(" http://127.0.0.1:8000 ", MODEL, retries=0)).check_model()
    assert "is not a URL like http://host:8000" in str(caught.value)
    assert "server is running" not in caught.value.user_message()


# 8. a local model's options with a server
def test_a_local_models_options_are_refused_with_a_server(capsys) -> None:
    """Before, they ran as "policy remote" without a word."""
    with FakeServer() as server:
        code = main(server_run(server.url, "--model", "synthetic:tiny-llama", "--device", "cuda", "--policy", "lbs",
                               "--kv-budget", "1MB", "--dtype", "float16", "--speculative", "--prefix-cache-ram",
                               "1GB"))
        assert not server.requests
    line = one_error(capsys)
    assert code == 2 and ("--model, --dtype, --device, --policy, --kv-budget, --speculative and --prefix-cache-ram "
                          "apply to a model run on this machine") in line, line
    assert "leave them out, or leave out --backend openai" in line


def test_a_switch_turned_off_is_named_as_typed_and_defaults_typed_are_refused_too(capsys) -> None:
    """Defaults typed (`--policy auto --model bundled`) were taken, though README says these are refused; left
    out, the run goes ahead (tests/test_server_typed_options.py has each option)."""
    with FakeServer() as server:
        assert main(server_run(server.url, "--no-prefix-cache")) == 2
        assert "--no-prefix-cache applies to a model run on this machine" in one_error(capsys)
        assert main(server_run(server.url, "--policy", "auto", "--model", "bundled", "--max-steps", "1")) == 2
        assert "--model and --policy apply to a model run on this machine" in one_error(capsys)
        assert main(server_run(server.url, "--max-steps", "1")) == 0


# 9. the keyring's own words
def test_the_keyrings_words_are_not_cut_mid_word() -> None:
    """Before: "...if you want to use the non-recommend)." (cut at 160 characters)."""
    before = keyring.get_keyring()
    keyring.set_keyring(NoKeyring())
    try:
        with pytest.raises(KeyringUnavailable) as caught:
            load_key("http://127.0.0.1:8000")
    finally:
        keyring.set_keyring(before)
    message = str(caught.value)
    assert "non-recommend)" not in message
    assert message.startswith("the system keyring cannot be used here (No recommended backend was available.")
    assert message.endswith("backends).") or message.endswith("available).")


def test_a_socket_whose_timeout_the_system_refuses_is_closed() -> None:
    """Before, settimeout's OverflowError (1e10 s) left the connected socket open (a ResourceWarning)."""
    with FakeServer() as server:
        port = int(server.url.rsplit(":", 1)[1])
        with pytest.raises(OverflowError):
            connect(("127.0.0.1", port), 1e10, time.monotonic() + 5, never, False)
        gc.collect()  # an unclosed socket warns here, inside the test


def test_the_window_refuses_an_address_with_a_password_without_showing_the_password():
    pytest.importorskip("PySide6")
    from app.gui.server_panel import ServerChoice

    with pytest.raises(ValueError) as refused:
        ServerChoice("http://me:SECRETPW@gpu-box:8000", "m")
    assert "SECRETPW" not in str(refused.value) and "***@gpu-box" in str(refused.value)
