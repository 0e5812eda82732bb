"""The generator server's options (`--backend openai`, README "Using a server"): how `run`, `bench` and `gui` take
them, and the ServerConfig they make, with a refusal that says what to write where one is missing."""

from __future__ import annotations

import argparse

from app.options import UsageError

BACKENDS = ("local", "openai")


def add_backend_options(parser: argparse.ArgumentParser, prm_server: bool = True) -> None:
    """Where the generator runs: this machine, or an OpenAI-compatible server (vLLM, SGLang, llama.cpp).
    `prm_server` False: the command refuses --verifier-endpoint (bench scores with the server's log-probabilities),
    so its help does not list it; it is still parsed, to be refused in words that say why."""
    g = parser.add_argument_group("generator server (see README, Using a server)")
    g.add_argument("--backend", default="local", choices=BACKENDS,
                   help="local: load --model here; openai: a /v1/completions server at --endpoint")
    g.add_argument("--endpoint", "--server", default=None, metavar="URL",
                   help="openai: the server, e.g. http://gpu-box:8000 (http:// needs its port; https:// is 443 "
                        "without one)")
    g.add_argument("--served-model", default=None, metavar="NAME", help="openai: the model name the server serves")
    g.add_argument("--api-key-env", default=None, metavar="NAME",
                   help="openai: the environment variable holding the API key (the key is never recorded)")
    g.add_argument("--request-timeout", type=float, default=None, metavar="SECONDS",
                   help=f"openai: seconds to wait for one answer before retrying (default: {REQUEST_TIMEOUT:g})")
    g.add_argument("--verifier-endpoint", default=None, metavar="URL",
                   help="openai, --verifier prm: a vLLM server of the PRM (--verifier-model is its served name)"
                   if prm_server else argparse.SUPPRESS)
    g.add_argument("--one-request-per-path", action="store_true",
                   help="openai: one request with n=M for each kept path instead of M with n=1 (vLLM, SGLang)")


REQUEST_TIMEOUT = 60.0  # seconds, --request-timeout's default; the largest is the client's (MAX_TIMEOUT_S)
SERVER_ONLY = (("--endpoint", "endpoint"), ("--served-model", "served_model"), ("--api-key-env", "api_key_env"),
               ("--request-timeout", "request_timeout"),
               ("--verifier-endpoint", "verifier_endpoint"), ("--one-request-per-path", "one_request_per_path"))


def _given(value: object) -> bool:
    """Whether an option left at None/False (its 'not given') was given: `--request-timeout 0` is given."""
    return value is not None and value is not False and value != ""


def server_from_args(args: argparse.Namespace, endpoint_option: str = "--endpoint"):
    """The ServerConfig of `--backend openai`, or None for a local run; missing options are a UsageError, and so
    are a server's options on a local run (they would be ignored: the run would load a model here instead).
    `endpoint_option`: the address's option as the command names it (`bench --server`), which its errors say.
    The address and the model's name are trimmed, as the window trims them: '  http://host:8000 ' read as a
    port '8000 ' that is not a number."""
    if getattr(args, "backend", "local") != "openai":
        given = [endpoint_option if name == "endpoint" else flag for flag, name in SERVER_ONLY
                 if _given(getattr(args, name, None))]
        if given:
            them = "it" if len(given) == 1 else "them"
            raise UsageError(f"{' and '.join(given)} {'is' if len(given) == 1 else 'are'} for a server: add "
                             f"--backend openai to use {them}, or leave {them} out to run --model on this machine")
        return None
    from engine.backends.openai import MAX_TIMEOUT_S, ServerConfig

    if problem := _server_named(args, endpoint_option):
        raise UsageError(problem)
    endpoint, model = args.endpoint.strip(), args.served_model.strip()
    timeout = REQUEST_TIMEOUT if args.request_timeout is None else args.request_timeout
    if not 0 < timeout <= MAX_TIMEOUT_S:  # inf and 1e10 failed inside the socket as a fault in Beamwise; NaN too
        raise UsageError(f"--request-timeout must be more than 0 and at most {MAX_TIMEOUT_S:,.0f} seconds (a "
                         f"day), not {timeout:g}")
    prm_endpoint = args.verifier_endpoint.strip() if args.verifier_endpoint is not None else None
    return ServerConfig(endpoint, model, args.api_key_env, timeout_s=timeout, endpoint_option=endpoint_option,
                        one_request_per_path=args.one_request_per_path, prm_endpoint=prm_endpoint)


def _server_named(args: argparse.Namespace, endpoint_option: str) -> str:
    """What `--backend openai` lacks of the server's address and its model's name, with what to write, or ''.
    It said "--backend openai needs --endpoint", no example, and said so of a --served-model '' that was given."""
    wanted = ((endpoint_option, args.endpoint, "URL", "the server's address",
               f"{endpoint_option} http://127.0.0.1:8000/v1"),
              ("--served-model", args.served_model, "NAME", "the model's name as the server lists it at /v1/models",
               "--served-model Qwen/Qwen2.5-Math-7B-Instruct"))
    missing = [f"{flag} {metavar}, {what} (e.g. {example})" for flag, value, metavar, what, example in wanted
               if value is None]
    empty = [f"the {flag} given is empty: write {what} (e.g. {example})" for flag, value, _, what, example in wanted
             if value is not None and not value.strip()]
    said = ([f"--backend openai needs {' and '.join(missing)}"] if missing else []) + empty
    command = getattr(args, "command", None) or "run"
    return f"{'; '.join(said)}. See `beamwise {command} --help`." if said else ""
