"""A generator on an OpenAI-compatible /v1/completions server (vLLM, SGLang, llama.cpp's server).

Standard library only (urllib). One call of `complete` is one request with n=1: the server's prefix cache
does the KV reuse between a parent's children. Every failure becomes one of the RemoteError types of
engine/errors.py, whose message is what the user reads.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.errors import LogprobsUnavailable, RemoteError, ServedModelNotFound, ServerError, ServerUnreachable

RETRYABLE = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class ServerConfig:
    """Where the generator runs. The API key is named by an environment variable and read only when requests go out."""

    endpoint: str  # e.g. http://127.0.0.1:8000 (with or without a trailing /v1)
    served_model: str
    api_key_env: str | None = None
    timeout_s: float = 60.0
    retries: int = 2  # further tries after a connection error, a timeout, 429 or 5xx
    backoff_s: float = 0.5  # the wait before retry i is backoff_s * 2**i

    @property
    def base_url(self) -> str:
        url = self.endpoint.rstrip("/")
        return url if url.endswith("/v1") else f"{url}/v1"

    def to_dict(self) -> dict:
        """What a session records: never the key, only the variable's name."""
        return {"backend": "openai", "endpoint": self.endpoint, "served_model": self.served_model,
                "api_key_env": self.api_key_env}


@dataclass(frozen=True)
class Completion:
    text: str  # without the stop string
    logprobs: tuple[float, ...]  # one per generated token
    ended_by_eos: bool  # the model ended the answer (not a stop string, not max_tokens)
    at_stop: bool  # the server stopped at a stop string (which it leaves out of `text`)
    prompt_tokens: int | None  # the server's count, when it reports usage


class OpenAICompletions:
    """One served model; `complete` asks for one continuation of a prompt text."""

    def __init__(self, config: ServerConfig, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.cfg, self.sleep = config, sleep
        self.api_key = _read_key(config.api_key_env)
        self.requests = 0

    @property
    def name(self) -> str:
        return self.cfg.served_model

    def check_model(self) -> None:
        """Fail early and clearly when the server serves no model of that name (servers without /models pass)."""
        try:
            listing = self._request("GET", "/models", None)
        except ServedModelNotFound:  # no /models route: the first completion will tell
            return
        served = [m.get("id") for m in listing.get("data", []) if isinstance(m, dict)]
        if served and self.cfg.served_model not in served:
            raise ServedModelNotFound(
                f"the server at {self.cfg.endpoint} serves {', '.join(map(str, served))}, "
                f"not {self.cfg.served_model!r}."
            )

    def complete(
        self, prompt: str, *, max_tokens: int, stop: Sequence[str], temperature: float, top_p: float, seed: int
    ) -> Completion:
        body = {
            "model": self.cfg.served_model, "prompt": prompt, "n": 1, "max_tokens": max_tokens,
            "temperature": temperature, "top_p": top_p, "seed": seed, "logprobs": 1,
        }
        if stop:
            body["stop"] = list(stop)
        answer = self._request("POST", "/completions", body)
        try:
            choice = answer["choices"][0]
        except (KeyError, IndexError, TypeError) as error:
            raise ServerError(200, f"an answer without choices: {str(answer)[:200]}") from error
        return _completion(choice, answer.get("usage") or {}, stop)

    # -- HTTP ----------------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: dict | None) -> dict:
        """JSON in, JSON out; retries connection errors, timeouts, 429 and 5xx with bounded backoff."""
        url = self.cfg.base_url + path
        for attempt in range(self.cfg.retries + 1):
            last = attempt == self.cfg.retries
            try:
                return self._send(method, url, body)
            except (ServerUnreachable, ServerError) as error:
                status = getattr(error, "status", None)
                if last or (status is not None and status not in RETRYABLE):
                    raise
            self.sleep(self.cfg.backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    def _send(self, method: str, url: str, body: dict | None) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        self.requests += 1
        try:
            with urllib.request.urlopen(request, timeout=self.cfg.timeout_s) as response:
                return json.loads(response.read().decode())
        except urllib.error.HTTPError as error:
            raise self._http_error(error.code, _detail(error)) from error
        except TimeoutError as error:
            raise self._timeout() from error
        except (urllib.error.URLError, ConnectionError, OSError) as error:
            reason = getattr(error, "reason", error)
            if isinstance(reason, TimeoutError):
                raise self._timeout() from error
            raise ServerUnreachable(f"cannot reach the server at {self.cfg.endpoint}: {reason}.") from error
        except json.JSONDecodeError as error:
            raise ServerError(200, f"an answer that is not JSON ({error})") from error

    def _timeout(self) -> ServerUnreachable:
        return ServerUnreachable(
            f"the server at {self.cfg.endpoint} did not answer within {self.cfg.timeout_s:g} s "
            f"({self.cfg.retries + 1} tries)."
        )

    def _http_error(self, status: int, detail: str) -> Exception:
        model_missing = "model" in detail.lower() and ("not found" in detail.lower() or "does not exist" in detail)
        if status == 404 or model_missing:
            return ServedModelNotFound(
                f"the server at {self.cfg.endpoint} has no model {self.cfg.served_model!r} (HTTP {status}: {detail})."
            )
        if status in (401, 403):
            return ServerError(status, detail, hint="Set the API key in the variable named by --api-key-env.")
        return ServerError(status, detail)


def _completion(choice: dict, usage: dict, stop: Sequence[str]) -> Completion:
    """One choice -> text, token log-probabilities and whether the model ended the answer."""
    logprobs = choice.get("logprobs") or {}
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    text = choice.get("text") or ""
    if values is None:
        raise LogprobsUnavailable("the server returned no token log-probabilities for /v1/completions.")
    reason = choice.get("finish_reason")
    if "stop_reason" in choice:  # vLLM and SGLang: the matched stop string, or None / a token id for EOS
        by_eos = reason == "stop" and choice["stop_reason"] not in stop
    else:  # plain OpenAI shape: "stop" is both EOS and a stop string; the text says which
        by_eos = reason == "stop" and not stop
    at_stop = reason == "stop" and not by_eos and bool(stop)
    values = tuple(float(v) for v in values if v is not None)
    return Completion(text, values, by_eos, at_stop, usage.get("prompt_tokens"))


def _detail(error: urllib.error.HTTPError) -> str:
    try:
        raw = error.read().decode(errors="replace")
    except OSError:
        return error.reason or ""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        return raw.strip()[:200]
    message = data.get("message") or (data.get("error") or {})
    if isinstance(message, dict):
        message = message.get("message", "")
    return str(message or raw)[:200]


def _read_key(variable: str | None) -> str | None:
    if variable is None:
        return None
    key = os.environ.get(variable)
    if not key:
        raise RemoteError(f"the environment variable {variable} (--api-key-env) is not set or is empty.",
                          hint=f"Export {variable} with the server's API key, or leave out --api-key-env.")
    return key
