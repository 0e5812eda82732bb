"""Engine exception types: each says what went wrong and what the user can do about it."""

from __future__ import annotations

import math
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engine.events import RunFailed
from engine.text_cut import shorten


class BeamwiseError(Exception):
    """Base class of every error the engine reports to a user."""

    hint: str = ""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint or self.hint

    def user_message(self) -> str:
        text, hint = str(self).strip(), self.advice()
        if not hint:
            return text
        stop = "" if not text or text.endswith((".", "!", "?")) else "."  # a server's own words may end bare
        return f"{text}{stop} {hint}".strip()

    def advice(self) -> str:
        """The hint as the user reads it."""
        return self.hint


class ConfigError(BeamwiseError, ValueError):
    """Settings the user gave that cannot run (a config's own checks, a bench's names and budget): the message says
    what to change. A ValueError too, so code that catches the configs' ValueErrors (the window's settings, argparse
    types) keeps catching them; the CLI says it as the user's error, where a plain ValueError is a fault."""


class ModelLoadError(BeamwiseError):
    """The model could not be found, read or built."""

    hint = ("Pick the bundled model, a name `beamwise models list` (the window's Models tab) shows, a transformers "
            "folder with config.json, a .gguf file or synthetic:NAME.")


class InvalidPrompt(BeamwiseError):
    """The question is empty or longer than the model's context."""


class KVBudgetTooSmall(BeamwiseError):
    """The KV budget cannot hold even one candidate for one step."""

    def __init__(self, budget_bytes: int, needed_bytes: int, what: str = "one candidate",
                 budget_name: str = "KV budget", *, usable_bytes: int | None = None,
                 whole_bytes: int | None = None, needed_for: str = "this step",
                 smallest: str = "the smallest budget that works") -> None:  # fmt: skip
        """`usable_bytes`: the part of the budget the step could use (less than `budget_bytes` while other
        programs hold device memory); `whole_bytes`: a budget with which no step of the search is refused, where
        a later step may need more than `needed_bytes` (what `needed_for` needs): an offloading policy's is less
        than the whole search's KV, which it moves through the budget; `smallest`: what `needed_bytes` is
        ("the smallest share that holds it" for the verifier's part, which is not the KV budget). The budgets
        it suggests are printed rounded up (`format_bytes_up`): typed back as shown, they are enough."""
        usable = "" if usable_bytes is None else (
            f" ({format_bytes(usable_bytes)} of it usable now: other programs hold device memory)")
        if whole_bytes is None:
            need = f"{smallest} is {format_bytes_up(needed_bytes)}"
        else:
            need = (f"{needed_for} needs {format_bytes_up(needed_bytes)}, "
                    f"and {format_bytes_up(whole_bytes)} is enough for every step of this search")
        super().__init__(
            f"{budget_name} {format_bytes(budget_bytes)}{usable} is too small for {what}; {need}.",
            hint="Raise the KV budget, shorten the step or the question, or use a smaller model.",
        )
        self.budget_bytes = budget_bytes
        self.needed_bytes = needed_bytes
        self.what = what
        self.usable_bytes = usable_bytes
        self.whole_bytes = whole_bytes
        self.needed_for = needed_for


class PrefixCacheTooSmall(BeamwiseError):
    """The prefix cache's RAM cap cannot hold the blocks a running search pins."""

    def __init__(self, cap_bytes: int, needed_bytes: int, what: str) -> None:
        super().__init__(
            f"the prefix cache's RAM cap {cap_bytes:,} bytes ({format_bytes(cap_bytes)}) is too small for {what}; "
            "the smallest cap "
            f"that works is {needed_bytes:,} bytes ({format_bytes_up(needed_bytes)}).",
            hint=f"Use --prefix-cache-ram {needed_bytes} or more, or run with --no-prefix-cache.",
        )
        self.cap_bytes = cap_bytes
        self.needed_bytes = needed_bytes


class SearchTooLarge(BeamwiseError):
    """The search would need more memory than the machine has; refused before anything is allocated."""

    def __init__(self, needed_bytes: int, available_bytes: int, largest: str, share: float = 1.0) -> None:
        room = (f"the {format_bytes(available_bytes)} of memory free" if share >= 1 else
                f"the {format_bytes(available_bytes * share)} a search may take ({share:.0%} of the "
                f"{format_bytes(available_bytes)} of memory free: the model and the app need the rest)")
        super().__init__(
            f"this search needs about {format_bytes(needed_bytes)} of KV cache, more than {room}; the largest "
            f"setting that fits is {largest}.",
            hint="Lower --beams, --width, --max-steps or --step-tokens.",
        )
        self.needed_bytes = needed_bytes
        self.available_bytes = available_bytes


def format_bytes(n: float) -> str:
    """Human-readable decimal size, the units every size option takes (`--kv-budget 64MB` is 64,000,000 B):
    1500 -> '1.5 kB', 32_000_000 -> '32.0 MB'."""
    units = ["B", "kB", "MB", "GB", "TB"]
    value = float(n)
    for unit in units:
        if abs(value) < 1000 or unit == units[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def format_bytes_up(n: float) -> str:
    """`format_bytes` rounded up at the precision shown, for a size the user is told is enough: typed back as
    printed (`--kv-budget 61.5kB`) it is never less than `n` (61,440 B -> '61.5 kB', where nearest gives 61.4)."""
    whole = math.ceil(n)
    if whole < 1000:
        return f"{whole} B"
    for power, unit in enumerate(["kB", "MB", "GB", "TB"], start=1):
        tenths = -(-whole // 10 ** (3 * power - 1))  # `n` in tenths of `unit`, rounded up
        if tenths < 10_000 or unit == "TB":  # 999.95 kB rounds up to 1.0 MB, not 1000.0 kB
            return f"{tenths // 10}.{tenths % 10} {unit}"
    raise AssertionError("unreachable")


@contextmanager
def load_errors(path: Path | str, what: str, verb: str = "load", hint: str = "") -> Iterator[None]:
    """Turn any failure inside into a one-line ModelLoadError naming `path`."""
    try:
        yield
    except ModelLoadError:
        raise
    except Exception as exc:  # third-party loaders raise anything from OSError to struct.error
        detail = _detail(exc)
        raise ModelLoadError(
            f"could not {verb} {what} at {path}: {detail}",
            hint=hint or "Check that the files are complete (download them again if unsure), or pick another model.",
        ) from exc


def _detail(exc: Exception) -> str:
    """A third-party error as one sentence: its lines joined (a validator puts the field on one line and what is
    wrong on the next), cut at 300 characters, ending in a full stop before the hint."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__
    text = shorten(text, 300)
    return text if text.endswith((".", "!", "?", "…")) else text + "."


class NotAPRM(BeamwiseError):
    """A verifier folder is not a process reward model of a family Beamwise knows."""

    hint = (
        "Point --verifier-model to a Qwen2.5-Math-PRM, Skywork-o1-Open-PRM, Math-Shepherd or RLHFlow PRM folder "
        "(config.json, tokenizer and safetensors weights), or to synthetic:tiny-qwen-prm and the like."
    )


class ChatTemplateUnusable(BeamwiseError):
    """A verifier model's chat template does not keep a step's text where Beamwise can find it."""

    hint = "Use another verifier (logprob reads no template) or another model."


class PRMHeadMissing(NotAPRM):
    """The folder has a PRM's body but not the weights of its reward head."""

    hint = "The download may be incomplete: get the PRM's weight files (*.safetensors) again."


class PRMFamilyUnnamed(NotAPRM):
    """The folder holds a causal LM with no reward head whose folder and config name no PRM family: it may be a
    Math-Shepherd or RLHFlow PRM (plain causal LMs), which only a name the user gives can tell."""


class LayersUnavailable(BeamwiseError):
    """The verifier cannot be run layer by layer (its body or its readout is not a logit-lens one)."""

    hint = "Run without --entropy-exit, or with the self-judge, Math-Shepherd or RLHFlow verifier."


class GeneratorLayersUnavailable(LayersUnavailable):
    """The self-judge verifier cannot be run layer by layer: the body it runs is the generator's own, so the cure is
    another generator or verifier (LayersUnavailable's hint offered the self-judge verifier already in use)."""

    hint = ("The self-judge verifier is the generator itself, so the exit needs a Llama-, Mistral- or Qwen2-shaped "
            "generator; or score the steps with a Math-Shepherd or RLHFlow PRM, or run without --entropy-exit.")


class RemoteError(BeamwiseError):
    """A generator server (OpenAI-compatible: vLLM, SGLang, llama.cpp) could not do what the search asked."""

    hint = "Check {endpoint} and {model}, and that the server is running (see README, Using a server)."
    endpoint_option = "--endpoint"  # the options its server was given by, which a hint names as {endpoint} and
    model_option = "--served-model"  # {model}: the generator's, unless `naming` says otherwise

    def naming(self, endpoint_option: str, model_option: str) -> RemoteError:
        """This error with its hint naming the options its server was given by: `bench --server`, or a PRM
        server's --verifier-endpoint and --verifier-model, where the hints name the generator's by default."""
        self.endpoint_option, self.model_option = endpoint_option, model_option
        return self

    def advice(self) -> str:
        """The hint with its {endpoint} and {model} as the options this server was given by. Before, the hint was
        written with the generator's options and a regex rewrote them; other braces stay as they are (a hint
        may quote what the user typed)."""
        return self.hint.replace("{endpoint}", self.endpoint_option).replace("{model}", self.model_option)


ANSWER_SHAPE_HINT = (
    "The server is running but did not answer in the shape asked for: check that {endpoint} is its "
    "OpenAI-compatible API (http://host:port or .../v1), not another program on that port."
)  # an HTTP 200 whose body is not the answer: the server runs, so its address or its kind is what to check

LOGPROB_VALUES_HINT = (
    "The server answered in the OpenAI shape, but its log-probabilities are broken: check its version and its "
    "settings (vLLM, SGLang and llama.cpp's server send log-probabilities of 0 or less), or use another server."
)  # an answer of the right shape whose values are not log-probabilities (NaN, above 0, text): not its address


class ServerUnreachable(RemoteError):
    """No connection to the server, or it did not answer within the timeout (after the retries)."""


class ServedModelNotFound(RemoteError):
    """The server answered 404 or 'model not found': it serves no model of that name."""

    hint = "Pass {model} as the server names it (GET /v1/models lists them)."


class LogprobsUnavailable(RemoteError):
    """The server returned no token log-probabilities; the logprob verifier and verify-skip need them."""

    hint = "Use a server that honours `logprobs` on /v1/completions (vLLM, SGLang and llama.cpp's server do)."


class ServerError(RemoteError):
    """The server answered with an HTTP error (4xx or 5xx) that retrying did not fix."""

    retry_after: float | None = None  # seconds the server asked to wait (Retry-After), if it said

    def __init__(self, status: int, detail: str, hint: str = "", endpoint: str = "") -> None:
        """`endpoint`: the server's address, said where the run asks more than one (a PRM server beside the
        generator's: a 401 named neither)."""
        at = f" at {endpoint}" if endpoint else ""
        super().__init__(f"the server{at} answered HTTP {status}: {detail}", hint=hint)
        self.status = status


def failure(error: Exception) -> RunFailed:
    """The RunFailed that reports `error` to the user, so a run ends with an event instead of a raise.

    A BeamwiseError says what to change itself. Running out of memory is a size the user can change
    (torch's OutOfMemoryError is matched by name: this module loads without torch). Anything else is a
    fault in Beamwise: the message says so rather than sending the user to change settings that did not
    cause it, and the traceback goes with the event, so a saved or exported session carries what a report needs.
    """
    name = type(error).__name__
    if isinstance(error, BeamwiseError):
        return RunFailed(name, error.user_message())
    text = str(error)
    if isinstance(error, MemoryError) or name == "OutOfMemoryError" or "out of memory" in text.lower():
        return RunFailed(name, f"{text or 'Out of memory'}. Try fewer beams, shorter steps, a smaller KV budget or "
                               "a smaller model.")
    return RunFailed(name, f"{name}: {text or 'no details'}. This is a fault in Beamwise, not in your settings: "
                           "please report it with the error's details below (a saved session keeps them too).",
                     details="".join(traceback.format_exception(error)))


class PrefillStopped(Exception):
    """The run's stop came while the prompt's KV was loaded or computed, `tokens` of it done: the search ends the
    run cancelled before step 1 (engine/search.py), and `KVCache.close` frees it as after any cancel."""

    def __init__(self, tokens: int) -> None:
        super().__init__(f"stopped in the prefill, {tokens} prompt token(s) done")
        self.tokens = tokens
