"""A server error's hint names the options that server was given by, built from them (engine/errors.py
`RemoteError.advice`): the generator's --endpoint and --served-model, `bench --server`, or a PRM server's
--verifier-endpoint and --verifier-model."""

from __future__ import annotations

from engine.errors import (
    ANSWER_SHAPE_HINT,
    LogprobsUnavailable,
    RemoteError,
    ServedModelNotFound,
    ServerError,
    ServerUnreachable,
)


def test_a_server_error_names_the_generators_options_by_default() -> None:
    unreachable = ServerUnreachable("cannot reach the server at http://127.0.0.1:9: Connection refused.")
    assert unreachable.user_message() == (
        "cannot reach the server at http://127.0.0.1:9: Connection refused. Check --endpoint and --served-model, "
        "and that the server is running (see README, Using a server).")
    assert ServedModelNotFound("no model 'x'.").user_message() == (
        "no model 'x'. Pass --served-model as the server names it (GET /v1/models lists them).")
    assert "check that --endpoint is its OpenAI-compatible API" in ServerError(200, "no text",
                                                                               ANSWER_SHAPE_HINT).user_message()


def test_each_hint_names_the_options_its_server_was_given_by() -> None:
    assert "Check --server and --served-model, and" in ServerUnreachable("x.").naming(
        "--server", "--served-model").user_message()
    prm = ServedModelNotFound("no model 'p'.").naming("--verifier-endpoint", "--verifier-model").user_message()
    assert prm.endswith("Pass --verifier-model as the server names it (GET /v1/models lists them).")
    shape = ServerError(200, "no text", ANSWER_SHAPE_HINT).naming("--server", "--served-model").user_message()
    assert "check that --server is its OpenAI-compatible API" in shape and "--endpoint" not in shape


def test_a_hint_that_names_no_option_and_one_with_braces_are_shown_as_given() -> None:
    """Only {endpoint} and {model} are the options; a hint that quotes what the user typed keeps its braces."""
    logprobs = LogprobsUnavailable("no log-probabilities.").naming("--server", "--served-model")
    assert logprobs.user_message() == ("no log-probabilities. Use a server that honours `logprobs` on "
                                       "/v1/completions (vLLM, SGLang and llama.cpp's server do).")
    quoted = RemoteError("no key.", hint="Export {A} with the server's API key, or leave out --api-key-env.")
    assert quoted.naming("--server", "--served-model").user_message().endswith("Export {A} with the server's API "
                                                                                "key, or leave out --api-key-env.")
