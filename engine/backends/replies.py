"""Reading a server's answers: completions, log-probabilities, and the words of its errors.

Servers answer /v1/completions in two shapes (OpenAI's legacy one, which vLLM and SGLang keep, and llama.cpp's)
and a proxy or gateway may answer anything. Every reader here checks what it reads: a value of the wrong kind
becomes a ServerError that says what came, never a fault deeper in the run.
"""

from __future__ import annotations

import email.utils
import html
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from engine.errors import LOGPROB_VALUES_HINT, LogprobsUnavailable, ServerError

ROUNDING = 1e-3  # a log-probability this far above 0 is a probability of 1 rounded, read as 0
PAGE_CHARS = 160  # an error page's text longer than this is a full page (a login's menus): said by its title


@dataclass(frozen=True)
class Completion:
    text: str  # without the stop string
    logprobs: tuple[float, ...]  # one per generated token
    ended_by_eos: bool  # the model ended the answer (not a stop string, not max_tokens)
    at_stop: bool  # the server stopped at a stop string (which it leaves out of `text`)
    prompt_tokens: int | None  # the server's count, when it reports usage
    top1: tuple[float, ...] = ()  # each token's top-1 probability, where the server sent top log-probabilities


def read_completion(choice: dict, usage: dict, stop: Sequence[str]) -> Completion:
    """One choice -> text, token log-probabilities and whether the model ended the answer."""
    text = choice.get("text") or ""
    values = _token_logprobs(choice.get("logprobs"), text, usage)
    reason = choice.get("finish_reason")
    if "stop_reason" in choice:  # vLLM and SGLang: the matched stop string, or None / a token id for EOS
        by_eos = reason == "stop" and choice["stop_reason"] not in stop
    else:  # plain OpenAI shape: "stop" is both EOS and a stop string; the text says which
        by_eos = reason == "stop" and not stop
    at_stop = reason == "stop" and not by_eos and bool(stop)
    top1 = _token_top1(choice.get("logprobs"), values)
    return Completion(text, values, by_eos, at_stop, usage.get("prompt_tokens"), top1)


def read_usage(answer: dict) -> dict[str, int]:
    """The answer's token counts that are counts: a server or proxy may send `usage` of another shape, or
    text for a number, which would otherwise fail the run later as a fault in Beamwise."""
    usage = answer.get("usage")
    return {k: v for k, v in usage.items() if type(v) is int and v >= 0} if isinstance(usage, dict) else {}


def _token_logprobs(logprobs: object, text: str, usage: dict) -> tuple[float, ...]:
    """The sampled tokens' log-probabilities, in either shape servers answer /v1/completions with:
    {"token_logprobs": [...]} (OpenAI's legacy shape, vLLM, SGLang) or {"content": [{"logprob"}]} (llama.cpp)."""
    values = None
    if isinstance(logprobs, dict) and isinstance(logprobs.get("token_logprobs"), list):
        values = logprobs["token_logprobs"]
    elif isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
        values = [item.get("logprob") for item in logprobs["content"] if isinstance(item, dict)]
    elif logprobs is None and not text and not usage.get("completion_tokens"):
        values = []  # nothing was generated (llama.cpp then sends null)
    if values is None:
        raise LogprobsUnavailable("the server returned no token log-probabilities for /v1/completions.")
    return tuple(_logprob(v) for v in values if v is not None)


def _token_top1(logprobs: object, values: tuple[float, ...]) -> tuple[float, ...]:
    """Each generated token's top-1 probability, from the per-position top log-probabilities (`logprobs`: 1 asks
    for the most likely token; a server may add the sampled one): the largest of each position, at least the
    sampled token's. () when the server sent none, or not one per token."""
    positions = None
    if isinstance(logprobs, dict) and isinstance(logprobs.get("top_logprobs"), list):
        positions = [list(top.values()) if isinstance(top, dict) else [] for top in logprobs["top_logprobs"]]
    elif isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
        positions = [[i.get("logprob") for i in (item.get("top_logprobs") or []) if isinstance(i, dict)]
                     for item in logprobs["content"] if isinstance(item, dict)]
    if positions is None or len(positions) != len(values):
        return ()
    best = [max([_logprob(v) for v in top if v is not None] + [sampled])
            for top, sampled in zip(positions, values, strict=True)]
    return tuple(math.exp(lp) for lp in best)


def first_top_logprobs(logprobs: object) -> dict[str, float]:
    """{token: log-probability} of the first generated position: {"top_logprobs": [{token: lp}, ...]} (OpenAI's
    legacy shape, vLLM, SGLang) or {"content": [{"top_logprobs": [{"token", "logprob"}]}]} (llama.cpp)."""
    if not isinstance(logprobs, dict):
        return {}
    legacy = logprobs.get("top_logprobs")
    if isinstance(legacy, list) and legacy and isinstance(legacy[0], dict):
        return {str(t): _logprob(v) for t, v in legacy[0].items() if v is not None}
    content = logprobs.get("content")
    if isinstance(content, list) and content and isinstance(content[0], dict):
        items = content[0].get("top_logprobs") or []
        return {str(i.get("token")): _logprob(i["logprob"]) for i in items if isinstance(i, dict) and "logprob" in i}
    return {}


def _logprob(value: object) -> float:
    """A log-probability as the server sent it, checked: a number at most 0 (-inf included). Text or an object
    would end the run as a fault in Beamwise; NaN, +inf or 5.0 would score paths with nonsense (NaN sorts
    anywhere, exp(1e308) overflows)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value) or value > ROUNDING:
        raise ServerError(200, f"an answer whose log-probabilities are not log-probabilities (one is {value!r:.60})",
                          hint=LOGPROB_VALUES_HINT)  # it answered in the OpenAI shape: its address is right
    return min(float(value), 0.0)


def read_retry_after(value: str | None) -> float | None:
    """The seconds a Retry-After header asks for: a number, or an HTTP date; None when there is none to read."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def redirect_error(status: int, location: str | None, endpoint: str) -> ServerError:
    """A redirect is not followed: the request and its API key would go wherever the answer says. Before, its
    empty body was read as 'an answer that is not JSON', which named neither the redirect nor where it led. The
    hint names the option the server was given by ({endpoint}: the window says its field): "as the endpoint" was
    the command line's word in the window too."""
    return ServerError(
        status,
        f"a redirect to {location or 'an address it does not name'}, which Beamwise does not follow",
        hint="Give the address the server redirects to as {endpoint} (https:// where it says so).",
        endpoint=endpoint,
    )


def error_detail(raw: bytes) -> str:
    """The server's own words from an error body: OpenAI's {"error": {"message"}}, {"message"} or plain text."""
    text = raw.decode(errors="replace")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return one_line(_page_text(text))[:200]
    if not isinstance(data, dict):
        return one_line(text)[:200]
    message = data.get("message") or (data.get("error") or {})
    if isinstance(message, dict):
        message = message.get("message", "")
    return one_line(str(message or text))[:200]


def _page_text(text: str) -> str:
    """An HTML error page (a proxy's 502, a login page) as its words instead of 200 characters of markup: its
    title with the words of a short page after it (a web server's message: "Error response: ... Message:
    Unsupported method ('POST')", where the title alone said "Error response"), its title alone for a long one
    (a login page's text is its menus), its text without the tags where it has no title."""
    if not re.search(r"<\s*(html|head|body|title|h1)\b", text[:2000], re.IGNORECASE):
        return text
    found = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
    title = one_line(html.unescape(found.group(1))) if found else ""
    shown = re.sub(r"<(head|script|style|title)\b.*?</\1\s*>", " ", text, flags=re.IGNORECASE | re.DOTALL)
    words = one_line(html.unescape(re.sub(r"<[^>]*>", " ", shown)))
    if title and words.startswith(title):  # the page's heading repeats its title
        words = words[len(title):].strip()
    if not title or not words:
        return title or words
    return title if len(words) > PAGE_CHARS else f"{title}: {words}"


def model_names(models: Sequence[str], shown: int = 8) -> str:
    """Served model names for a one-line message: a gateway may list hundreds, and a name may hold a newline."""
    names = ", ".join(one_line(name)[:80] for name in models[:shown])
    return names + (f" and {len(models) - shown} more (GET /v1/models lists them)" if len(models) > shown else "")


def one_line(text: str) -> str:
    """A server's words as one line: an HTML error page or a traceback spans many, which broke the one-line
    error, and a control character (a NUL, an escape) is for the terminal, not the reader."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())
