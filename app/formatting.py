"""Formatting the exports, the CLI and the window share: scores, sizes (decimal units, as the options take
them: 32MB is 32,000,000 B, shown as 32.0 MB everywhere), ratios, durations and cut text; a step's idle
row-slots, a run's goodput and what it speculated."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engine.errors import format_bytes, format_bytes_up
from engine.events import RunFinished, TransferStats
from engine.text_cut import shorten


def brief(text: str | None, limit: int = 80) -> str:
    """Whitespace collapsed, cut at `limit` characters with an ellipsis (never inside a letter and its accent, a
    flag or an emoji: engine/text_cut.py)."""
    return shorten(" ".join((text or "").split()), limit)


def local_time(stamp: str | None, seconds: bool = False) -> str:
    """A session's stored time ('2026-12-07T14:39:30+00:00', in the zone of the machine that recorded it) in this
    machine's local time: '2026-12-07 23:39' in Tokyo (with `seconds`, '2026-12-07 23:39:30'). A time stored
    without a zone is shown as written; text that is no time, cut to the same width, as it is."""
    try:
        when = datetime.fromisoformat(stamp or "")
        when = when.astimezone() if when.tzinfo is not None else when
        return when.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")
    except (ValueError, OverflowError, OSError):  # no time, or one the local zone cannot hold (year 1, 9999)
        return (stamp or "")[:19 if seconds else 16].replace("T", " ")


def score(value: float | None, missing: str = "-") -> str:
    """A verifier score to three places; `missing` when there is none yet."""
    return missing if value is None else f"{value:.3f}"


def sentence(text: str) -> str:
    """A message as a sentence of its own: its first letter upper-case ('cannot reach ...' -> 'Cannot reach ...')."""
    return text[:1].upper() + text[1:]


def steps(count: int) -> str:
    """'1 step', '3 steps'."""
    return f"{count} step{'' if count == 1 else 's'}"


def size(value: float | None) -> str:
    """Bytes in decimal units (32.0 MB, the units of --kv-budget and the settings); '-' when not recorded."""
    return "-" if value is None else format_bytes(value)


def kv_budget(generator: int, verifier: int, whole: int | None, show=size) -> str:
    """The whole KV budget, and the generator's part beside it where a verifier keeps KV (`--kv-budget 1MB
    --verifier self-judge`: '1.0 MB (500.0 kB for the generator)'); `whole` is None when the budget was read
    from free memory, and is then the two parts' sum."""
    if not verifier:
        return show(generator)
    return f"{show(whole or generator + verifier)} ({show(generator)} for the generator)"


def context_full_text(finished: RunFinished) -> str:
    """The line that says the search ended (or some of its paths did) because the model's context is full."""
    kept = len(finished.completions) or finished.context_full
    context = f"the model's context ({finished.context_length:,} tokens) is full"
    if finished.context_full >= kept:
        return f"{context}: the paths stop here"
    return f"{context} for {finished.context_full} of the {kept} kept paths: they stop there"


def every_step_text(every_step_bytes: int) -> str:
    """Said when a run starts whose KV budget is below what its longest step may need (a run failed at a later
    step unwarned, though the budget every step needs is known at the start)."""
    return (f"this KV budget is below what the search's longest step may need, so a step may be refused: "
            f"--kv-budget {format_bytes_up(every_step_bytes)} is enough for every step (paths that end early need "
            "less)")


def verifier_place(device: int, host: int, missing: str = "-") -> str:
    """Where the verifier keeps a step's KV: '12.3 kB on GPU' or '... on CPU'; `missing` when it keeps none."""
    if device:
        return f"{size(device)} on GPU"
    return f"{size(host)} on CPU" if host else missing


def axis_size(value: float) -> str:
    """A chart tick: bytes in decimal units without a trailing '.0' (0 B, 500 kB, 1.5 MB)."""
    text = format_bytes(value)
    number, unit = text.split(" ")
    return f"{number.removesuffix('.0')} {unit}"


def ratio(value: float | None) -> str:
    """One format for every ratio column: three significant figures and an x (0.0012x, 0.98x, 3.4x)."""
    return "-" if value is None else f"{value:.3g}x"


def seconds(value: float) -> str:
    """A duration for people: 12 µs, 0.95 ms, 0.21 s, 4.7 s, 1 min 12 s (never 0.00095 s or 1e-05 s)."""
    if value < 1e-8:  # nothing a person could tell from no time at all
        return "0 s"
    if value < 1e-4:
        return f"{_two_digits(value * 1e6)} µs"
    if value < 0.1:
        return f"{_two_digits(value * 1000)} ms"
    if value < 9.95:  # what rounds to 10 is said as 10 s is: a line at 9.96 s read "10.0 s", the next "11 s"
        return f"{value:.2g} s" if value < 1 else f"{value:.1f} s"
    if value < 59.5:
        return f"{value:.0f} s"
    minutes, rest = divmod(round(value), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def _two_digits(value: float) -> str:
    """About two significant digits, never in exponent form: 0.95, 12, 100 (not 1e+02)."""
    return f"{value:.2g}" if value < 9.95 else str(round(value))


def settings(data: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in data.items()) or "-"


def idle_text(event: TransferStats, detail: bool = True) -> str:
    """'idle 12 of 42 slots (30 tok speculated, 2 runs in other beams' rows)' (the step's idle row-slots after
    speculation, of those before it; `detail`: and what filled the difference, and how many children's runs
    went to rows other beams were done with), or 'idle 12 slots' when the step speculated nothing: each
    speculated token filled a slot that would have idled."""
    before = event.idle_row_slots + event.speculative_tokens
    if not event.speculative_tokens:
        return f"idle {event.idle_row_slots} slots"
    made = f" ({event.speculative_tokens} tok speculated{_lent(event.speculative_lent_runs)})" if detail else ""
    return f"idle {event.idle_row_slots} of {before} slots{made}"


def goodput_text(event: RunFinished) -> str:
    """FlashTTS's goodput and, when the run recorded it, the answer path's tokens per second of the whole run."""
    text = (f"goodput: {event.goodput:.1f} tokens/s (FlashTTS: each kept beam's path tokens per second of "
            "its completion time, averaged)")
    answer = event.answer_tokens_per_second
    return text + (f"\nthe answer's path: {answer:.1f} tokens/s of the whole run" if answer else "")


def speculation_text(event: RunFinished, separator: str) -> str:
    """'; speculated 177 tokens, 29 kept (16%); 3 of 12 steps verified ahead used', or nothing when the
    run speculated none (the look-ahead part only when the verifier looked ahead)."""
    made, used = event.speculative_tokens, event.speculative_used
    if not made:
        return ""
    ahead = event.lookahead_verified
    looked = f"{separator}{event.lookahead_used} of {ahead} steps verified ahead used" if ahead else ""
    lent = _lent(event.speculative_lent_runs)
    return f"{separator}speculated {made} tokens, {used} kept ({used / made:.0%}){lent}{looked}"


def _lent(runs: int) -> str:
    """', 2 runs in other beams' rows' (speculative runs decoded in rows lent to them), or nothing for none."""
    return f", {runs} run{'' if runs == 1 else 's'} in other beams' rows" if runs else ""


def prefix_disk_text(problem: str) -> str:
    """What the window and the command line say when the prefix cache's disk tier cannot write its folder."""
    return (f"the prefix cache cannot write its disk folder ({problem}): this run's blocks are kept in memory "
            "only, for this process. Set BEAMWISE_PREFIX_CACHE_DIR to a folder you can write.")
