"""A generator on an OpenAI-compatible /v1/completions server (vLLM, SGLang, llama.cpp's server).

Standard library only (http.client). One call of `complete` is one request with n=1: the server's prefix
cache does the KV reuse between a parent's children. Every failure becomes one of the RemoteError types of
engine/errors.py, whose message is what the user reads.

A request in flight can be cancelled: while the server computes or sends, the client waits on the socket in
short slices and asks `should_stop` between them; on a stop it closes the connection (vLLM, SGLang and
llama.cpp's server abort a request whose client left) and raises RequestCancelled. The same slices hold the
whole answer, headers and body, to the timeout: a socket's own timeout bounds each read only. The socket's
side of that is engine/backends/sockets.py; reading what the server answers is engine/backends/replies.py, what
a failed request says engine/backends/failures.py, and reading and checking the API key engine/backends/keys.py.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from engine.backends import failures
from engine.backends.addresses import api_base, check_address
from engine.backends.keys import api_key
from engine.backends.replies import (
    Completion,
    error_detail,
    first_top_logprobs,
    model_names,
    one_line,
    read_completion,
    read_retry_after,
    read_usage,
    redirect_error,
)
from engine.backends.sockets import POLL_S, AnswerTooLarge, RequestCancelled, SlicedSocket, StopFn, connect, never
from engine.errors import (
    ANSWER_SHAPE_HINT,
    ConfigError,
    LogprobsUnavailable,
    RemoteError,
    ServedModelNotFound,
    ServerError,
    ServerUnreachable,
    format_bytes,
)
from engine.text_cut import shorten

RETRYABLE = frozenset({408, 429, 500, 502, 503, 504})
RETRY_AFTER_MAX_S = 30.0  # a server asking for a longer wait (Retry-After) is said to be busy instead of waited on
MAX_ANSWER_BYTES = 64_000_000  # an answer is kB; past this the address answers with something else
MAX_TIMEOUT_S = 86_400.0  # a day: a socket cannot wait 1e10 s (time_t overflows), and no answer takes longer


@dataclass(frozen=True)
class ServerConfig:
    """Where the generator runs. The API key is named by an environment variable and read only when requests go out."""

    endpoint: str  # e.g. http://127.0.0.1:8000 (with or without a trailing /v1)
    served_model: str
    api_key_env: str | None = None
    timeout_s: float = 60.0
    retries: int = 2  # further tries after a connection error, a timeout, 429 or 5xx
    backoff_s: float = 0.5  # the wait before retry i is backoff_s * 2**i
    one_request_per_path: bool = False  # one request with n=M per kept path (vLLM, SGLang), not M with n=1
    prm_endpoint: str | None = None  # --verifier prm: a vLLM server of the PRM (its /pooling route)
    api_key: str | None = field(default=None, repr=False, compare=False)  # given directly (the window's keyring)
    key_source: str | None = None  # where `api_key` came from, for the record ("keyring"); never the key
    endpoint_option: str = "--endpoint"  # the options the user gave these by, which errors name: `bench --server`,
    model_option: str = "--served-model"  # a PRM server's --verifier-endpoint and --verifier-model

    def __post_init__(self) -> None:
        check_address(self.endpoint, self.endpoint_option)
        if self.prm_endpoint is not None:
            check_address(self.prm_endpoint, "--verifier-endpoint")
        if not 0 < self.timeout_s <= MAX_TIMEOUT_S:  # NaN too
            raise ConfigError(f"a server's timeout must be more than 0 and at most {MAX_TIMEOUT_S:,.0f} seconds "
                              f"(a day), not {self.timeout_s:g}.")

    @property
    def base_url(self) -> str:
        return api_base(self.endpoint)

    def to_dict(self) -> dict:
        """What a session records: never the key, only the variable's name."""
        return {
            "backend": "openai",
            "endpoint": self.endpoint,
            "served_model": self.served_model,
            "api_key_env": self.api_key_env,
            "key_source": self.key_source,
            "one_request_per_path": self.one_request_per_path,
            "prm_endpoint": self.prm_endpoint,
        }


class OpenAICompletions:
    """One served model; `complete` asks for one continuation of a prompt text."""

    def __init__(
        self, config: ServerConfig, *, sleep: Callable[[float], None] | None = None, should_stop: StopFn = never
    ) -> None:
        self.cfg, self.should_stop = config, should_stop
        self.sleep = sleep or self._sleep_unless_stopped
        self.api_key = api_key(config.api_key, config.api_key_env, config.key_source)  # KeyUnusable says why not
        self.requests = 0

    @property
    def name(self) -> str:
        return self.cfg.served_model

    @contextmanager
    def _naming_options(self) -> Iterator[None]:
        """A failure's hint names the options this server was given by: before, a PRM server's errors said to
        check --endpoint and --served-model, and `bench --server`'s said --endpoint."""
        try:
            yield
        except RemoteError as error:
            error.naming(self.cfg.endpoint_option, self.cfg.model_option)
            raise

    def check_model(self) -> tuple[str, ...]:
        """The served models' names; fails early and clearly when none is `served_model`.
        An API without /models (a 404 in JSON, or with no body) passes with an empty list (the first completion
        will tell); a 404 page in HTML or text is a web server, not an API, and is refused here, before a run
        records anything (`python -m http.server` passed, and the run failed at its first completion)."""
        with self._naming_options():
            return self._check_model()

    def _check_model(self) -> tuple[str, ...]:
        try:
            listing = self._request("GET", "/models", None)
        except ServedModelNotFound:
            return ()
        except ServerError as error:  # an API with no /models route (its 404 in JSON): the first completion will tell
            if error.status != 404 or getattr(error, "web_page", False):
                raise
            return ()
        data = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(data, list):  # a listing of another shape names no model: the first completion will tell
            data = []
        served = tuple(m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str))
        if served and self.cfg.served_model not in served:
            raise ServedModelNotFound(
                f"the server at {self.cfg.endpoint} serves {model_names(served)}, not {self.cfg.served_model!r}."
            )
        return served

    def complete(
        self, prompt: str, *, max_tokens: int, stop: Sequence[str], temperature: float, top_p: float, seed: int
    ) -> Completion:
        """One continuation of `prompt` (n=1)."""
        return self.complete_many(
            prompt, 1, max_tokens=max_tokens, stop=stop, temperature=temperature, top_p=top_p, seed=seed
        )[0]

    def complete_many(
        self,
        prompt: str,
        n: int,
        *,
        max_tokens: int,
        stop: Sequence[str],
        temperature: float,
        top_p: float,
        seed: int,
    ) -> list[Completion]:
        """`n` continuations of `prompt` in one request; a server that answers fewer does not honour n."""
        with self._naming_options():
            return self._complete_many(prompt, n, max_tokens, stop, temperature, top_p, seed)

    def _complete_many(
        self, prompt: str, n: int, max_tokens: int, stop: Sequence[str], temperature: float, top_p: float, seed: int
    ) -> list[Completion]:
        body = {
            "model": self.cfg.served_model,
            "prompt": prompt,
            "n": n,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "seed": seed,
            "logprobs": 1,
        }
        if stop:
            body["stop"] = list(stop)
        answer = self._request("POST", "/completions", body)
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or not choices:
            raise _shape_error(f"an answer without choices ({_outline(answer)})", self.cfg.endpoint)
        textless = [c for c in choices if not (isinstance(c, dict) and isinstance(c.get("text", 0), str | None))]
        if textless:  # a text of None is an empty one
            raise _shape_error(f"an answer whose choices hold no text ({_outline(textless[0], 'a choice')})",
                               self.cfg.endpoint)
        if len(choices) != n:
            raise RemoteError(
                f"the server at {self.cfg.endpoint} answered {len(choices)} continuation(s) to a request for n={n}: "
                "it does not honour n.",
                hint="Leave out --one-request-per-path (one request per child works with every server).",
            )
        usage = read_usage(answer)
        ordered = sorted(choices, key=lambda c: c["index"] if isinstance(c.get("index"), int) else 0)
        return [read_completion(choice, usage, stop) for choice in ordered]

    def first_token_choices(self, prompt: str, k: int) -> tuple[dict[str, float], int]:
        """The `k` likeliest first tokens of a greedy reply to `prompt` with their log-probabilities, and the
        prompt's tokens as the server counted them (0 when it does not say)."""
        with self._naming_options():
            return self._first_token_choices(prompt, k)

    def _first_token_choices(self, prompt: str, k: int) -> tuple[dict[str, float], int]:
        body = {
            "model": self.cfg.served_model,
            "prompt": prompt,
            "n": 1,
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": k,
        }
        answer = self._request("POST", "/completions", body)
        try:
            logprobs = answer["choices"][0].get("logprobs")
        except (KeyError, IndexError, TypeError, AttributeError) as error:  # AttributeError: a choice that is text
            raise _shape_error(f"an answer without choices ({_outline(answer)})", self.cfg.endpoint) from error
        top = first_top_logprobs(logprobs)
        if not top:
            raise LogprobsUnavailable(
                f"the server at {self.cfg.endpoint} returned no top log-probabilities (`logprobs` > 1), which the "
                "self-judge reads."
            )
        return top, read_usage(answer).get("prompt_tokens", 0)

    # -- HTTP ----------------------------------------------------------------------------------
    def pool(self, messages: list[dict]) -> list:
        """vLLM's /pooling on a chat: the served model's pooled output (for a PRM, one [P(-), P(+)] per step tag)."""
        with self._naming_options():
            answer = self._request("POST", "/pooling", {"model": self.cfg.served_model, "messages": messages}, v1=False)
            try:
                data = answer["data"][0]["data"]
            except (KeyError, IndexError, TypeError) as error:
                raise _shape_error(f"a /pooling answer without data ({_outline(answer)})", self.cfg.endpoint) from error
            if not isinstance(data, list):
                raise _shape_error(f"a /pooling answer whose data is not a list ({_outline(data, 'its data')})",
                                   self.cfg.endpoint)
            return data

    def _request(self, method: str, path: str, body: dict | None, *, v1: bool = True) -> dict:
        """JSON in, JSON out; retries connection errors, timeouts, 429 and 5xx with bounded backoff."""
        url = (self.cfg.base_url if v1 else self.cfg.base_url.removesuffix("/v1")) + path
        for attempt in range(self.cfg.retries + 1):
            last = attempt == self.cfg.retries
            try:
                return self._send(method, url, body)
            except (ServerUnreachable, ServerError) as error:
                status = getattr(error, "status", None)
                if last or (status is not None and status not in RETRYABLE):
                    raise
                wait = self._wait_before_retry(error, attempt)
            self.sleep(wait)
            if self.should_stop():
                raise RequestCancelled
        raise AssertionError("unreachable")

    def _wait_before_retry(self, error: Exception, attempt: int) -> float:
        """The backoff, or longer when the server said how long with Retry-After (a 429 or 503 under load); a
        server that asks for more than RETRY_AFTER_MAX_S is busy for now, and the run says so instead of waiting."""
        wait = self.cfg.backoff_s * 2**attempt
        asked = getattr(error, "retry_after", None)
        if asked is not None and asked > RETRY_AFTER_MAX_S:
            raise ServerError(
                getattr(error, "status", 0) or 429,
                f"it is busy and asks to wait {asked:.0f} s before trying again",
                hint="Run again later, or ask the server's owner about its limits.",
                endpoint=self.cfg.endpoint,
            ) from error
        return max(wait, asked or 0.0)

    def _sleep_unless_stopped(self, seconds: float) -> None:
        """The backoff before a retry, in slices so that a Stop does not wait it out."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0 and not self.should_stop():
            time.sleep(min(left, POLL_S))

    def _send(self, method: str, url: str, body: dict | None) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode() if body is not None else None
        parts = urllib.parse.urlsplit(url)
        tls = parts.scheme == "https"  # TLS is begun by connect, so that its handshake waits in slices too
        self.requests += 1
        deadline = time.monotonic() + self.cfg.timeout_s
        try:
            connection = http.client.HTTPConnection(
                parts.hostname or "", parts.port or (443 if tls else 80), timeout=self.cfg.timeout_s
            )
        except (http.client.InvalidURL, ValueError) as error:  # the address's fault: not retried, nothing to run
            raise failures.bad_address(self.cfg, error) from error
        connection._create_connection = lambda address, timeout, source=None: connect(  # http.client's hook
            address, timeout, deadline, self.should_stop, tls
        )
        try:
            connection.request(method, parts.path, body=data, headers=headers)
            sliced = SlicedSocket(connection.sock, deadline, self.should_stop, MAX_ANSWER_BYTES)
            response = http.client.HTTPResponse(sliced, method=method)
            response.begin()
            status, raw = response.status, response.read()
        except TimeoutError as error:
            raise failures.timed_out(self.cfg) from error
        except (http.client.IncompleteRead, http.client.RemoteDisconnected) as error:
            raise failures.cut_off(self.cfg, error) from error
        except http.client.InvalidURL as error:  # raised before sending: not the server's answer
            raise failures.bad_address(self.cfg, error) from error
        except ssl.SSLError as error:  # an OSError too, but a certificate refused or no TLS is no 'cannot reach'
            raise failures.tls_failed(self.cfg, error, _reason(error)) from error
        except AnswerTooLarge as error:
            raise RemoteError(
                f"the server at {self.cfg.endpoint} sent more than {format_bytes(MAX_ANSWER_BYTES)} for one answer "
                "(an answer is a few kB); Beamwise stopped reading it.",
                hint="Check that the address is the server's OpenAI-compatible API, not a file or a stream.",
            ) from error
        except http.client.HTTPException as error:  # a status line that is not one: not 'cannot reach', and not raw
            raise failures.not_http(self.cfg, error) from error
        except OSError as error:
            raise ServerUnreachable(f"cannot reach the server at {self.cfg.endpoint}: {_reason(error)}.") from error
        finally:
            connection.close()  # on a Stop too: the server drops a request whose client left
        if 300 <= status < 400:
            raise redirect_error(status, response.getheader("Location"), self.cfg.endpoint)
        if status >= 400:
            error = failures.http_error(self.cfg, status, error_detail(raw), method, url)
            error.retry_after = read_retry_after(response.getheader("Retry-After"))
            error.web_page = _web_page(raw)
            raise error
        try:
            return json.loads(raw.decode())
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:  # nested past Python's stack
            raise _shape_error(f"an answer that is not JSON ({error})", self.cfg.endpoint, status) from error


@dataclass(frozen=True)
class ConnectionCheck:
    """What "Test connection" found: the served models and the time of a one-token completion."""

    served: tuple[str, ...]
    seconds: float

    def sentence(self, config: ServerConfig) -> str:
        others = [m for m in self.served if m != config.served_model]
        listed = f"; it also serves {model_names(others)}" if others else ""
        return (
            f"Connected: {config.served_model} at {config.endpoint} answered with log-probabilities "
            f"in {self.seconds:.2f} s{listed}."
        )


def check_connection(config: ServerConfig, *, should_stop: StopFn = never, retries: int = 0) -> ConnectionCheck:
    """The model list, then one token with log-probabilities: raises the RemoteError that a search would meet
    first (unreachable, refused key, wrong model, no log-probabilities). No retries by default ("Test
    connection": an answer now or why not); `bench` retries as the run after it does (`config.retries`)."""
    backend = OpenAICompletions(replace(config, retries=retries), should_stop=should_stop)
    started = time.perf_counter()
    served = backend.check_model()
    backend.complete("Hello", max_tokens=1, stop=[], temperature=0.0, top_p=1.0, seed=0)
    return ConnectionCheck(served, time.perf_counter() - started)


def _shape_error(what: str, endpoint: str, status: int = 200) -> ServerError:
    """An answer that came but is not the one asked for: it says what was missing, not that the server may be down,
    and which server sent it (a PRM server's or the generator's, one of `bench`'s)."""
    return ServerError(status, what, hint=ANSWER_SHAPE_HINT, endpoint=endpoint)


def _outline(value: object, what: str = "it") -> str:
    """What came instead, said whole: an object by its keys, anything else by its kind and start. Before, the
    answer's text was cut at 200 characters, mid-structure ("...'usage': {'prompt_tokens':.")."""
    if isinstance(value, dict):
        keys = [one_line(str(k))[:40] for k in list(value)[:10]]
        more = f" and {len(value) - 10} more" if len(value) > 10 else ""
        return f"{what} holds {', '.join(keys) + more}" if keys else f"{what} is an empty object"
    if isinstance(value, list):
        return f"{what} is a list of {len(value)} item(s)"
    if isinstance(value, str):
        return f"{what} is the text {shorten(one_line(value), 60)!r}"
    return f"{what} is {'null' if value is None else one_line(repr(value))[:40]}"


def _web_page(raw: bytes) -> bool:
    """Whether an error's body is a page or text, not JSON: what a web server answers a path it does not have,
    where an API answers JSON (or, at most, nothing)."""
    if not raw.strip():
        return False
    try:
        json.loads(raw.decode())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return True
    return False


def _reason(error: Exception) -> str:
    return str(getattr(error, "strerror", None) or error or type(error).__name__)
