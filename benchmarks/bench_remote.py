"""The server backend's own costs, against the fake server on 127.0.0.1 (no model: the client alone).

    python -m benchmarks.bench_remote [--trials 20]

Stop: a search whose server takes 30 s per answer is stopped 0.30-0.35 s after it began (its first request);
measured are the seconds from that moment (the press) to the end of the run, and to the server seeing the
client hang up. The client asks `should_stop()` every 50 ms while it waits, so up to 50 ms is expected.
Per request: a 4 x 4 beam search of 4 steps on an instant server; the milliseconds each /v1/completions
round trip costs the client (HTTP, JSON, the search's bookkeeping).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from engine.backends.openai import POLL_S, ServerConfig
from engine.config import SearchConfig
from engine.remote_search import run
from tests.fake_openai import MODEL, FakeServer

QUESTION = "A train travels 60 km in 45 minutes. What is its average speed in km/h?"


def stop_latency() -> tuple[float, float]:
    """(seconds from the Stop to the run's end, seconds from the Stop to the server noticing)."""
    with FakeServer(mode="slow", delay=30.0) as server:
        pressed = time.monotonic() + 0.3 + random.uniform(0.0, POLL_S)  # anywhere between two polls
        config = ServerConfig(server.url, MODEL, timeout_s=60.0)
        events = list(run(QUESTION, config, SearchConfig(), should_stop=lambda: time.monotonic() > pressed))
        ended = time.monotonic()
        while not server.abandoned and time.monotonic() < ended + 5:
            time.sleep(0.005)
    assert events[-1].type == "run_cancelled", events[-1]
    return ended - pressed, server.abandoned[0] - pressed


def per_request_ms() -> tuple[float, int]:
    search = SearchConfig(beams=4, width=4, step_tokens=16, max_steps=4)
    with FakeServer() as server:
        began = time.perf_counter()
        events = list(run(QUESTION, ServerConfig(server.url, MODEL), search))
        seconds = time.perf_counter() - began
        requests = len(server.requests)
    assert events[-1].type == "run_finished", events[-1]
    return 1000 * seconds / requests, requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    trials = parser.parse_args().trials
    ends, notices = zip(*(stop_latency() for _ in range(trials)), strict=True)
    print(
        f"Stop in flight, {trials} trials: run ended {1000 * statistics.median(ends):.1f} ms after the Stop "
        f"(max {1000 * max(ends):.1f}); server saw the hang-up after {1000 * statistics.median(notices):.1f} ms "
        f"(max {1000 * max(notices):.1f})"
    )
    costs = [per_request_ms() for _ in range(max(3, trials // 5))]
    ms = [c[0] for c in costs]
    print(
        f"client cost per request ({costs[0][1]} requests a search, {len(costs)} searches): "
        f"median {statistics.median(ms):.2f} ms, max {max(ms):.2f} ms"
    )


if __name__ == "__main__":
    main()
