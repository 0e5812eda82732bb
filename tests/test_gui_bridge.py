"""The engine thread bridge: signal order, Stop, failures, model caching and recording (fake engine)."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QObject

from app.gui.bridge import SearchBridge, describe_device, describe_error
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.errors import ModelLoadError

SPEC = ModelSpec(source="synthetic:fake")
SEARCH = SearchConfig(beams=2, width=2, max_steps=3)
CACHE = CacheConfig()


class CountingLoader:
    """Loads instantly, reporting progress twice; fails for sources that start with 'bad'."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, spec: ModelSpec, device: str, progress: Any) -> Any:
        self.calls.append((spec.source, device))
        if spec.source.startswith("bad"):
            raise ModelLoadError(f"no model at {spec.source}")
        progress("reading weights", 0.5)
        progress("ready", 1.0)
        return SimpleNamespace(name=f"model:{spec.source}", device="cpu")


def run_fake(question: str, loaded: Any, search: SearchConfig, cache: CacheConfig, *, should_stop: Any) -> Iterator:
    return fake_run(question, search, cache, should_stop=should_stop)


@pytest.fixture
def make_bridge(qtbot):
    bridges: list[SearchBridge] = []

    def make(**kwargs: Any) -> SearchBridge:
        kwargs.setdefault("loader", CountingLoader())
        kwargs.setdefault("run", run_fake)
        bridge = SearchBridge(**kwargs)
        bridges.append(bridge)
        return bridge

    yield make
    for bridge in bridges:
        bridge.shutdown()


def captured(function: Any, depth: int) -> list[Any]:
    """What `function` holds through its closure (and a bound method through its object), `depth` closures deep."""
    found, frontier = [], [function]
    for _ in range(depth):
        held = [getattr(f, "__self__", None) for f in frontier]
        held += [cell.cell_contents for f in frontier for cell in (getattr(f, "__closure__", None) or ())]
        found += [h for h in held if h is not None]
        frontier = [h for h in held if callable(h)]
    return found


def collect(bridge: SearchBridge) -> list[Any]:
    seen: list[Any] = []
    bridge.event_emitted.connect(seen.append)
    return seen


def test_run_emits_load_then_every_event_then_finished_in_order(qtbot, make_bridge):
    bridge = make_bridge()
    w = bridge
    expected = list(fake_run("q", SEARCH, CACHE))
    signals = [w.load_progress, w.load_progress, w.model_loaded, *[w.event_emitted] * len(expected), w.run_finished]

    def is_type(name: str):
        return lambda event: event.type == name

    checks = [None, None, None, *[is_type(e.type) for e in expected], None]
    loaded: list[tuple[str, str]] = []
    bridge.model_loaded.connect(lambda name, device: loaded.append((name, device)))
    seen = collect(bridge)
    with qtbot.waitSignals(signals, order="strict", check_params_cbs=checks, timeout=5000):
        bridge.request_run("q", SPEC, SEARCH, CACHE)
    assert loaded == [("model:synthetic:fake", "cpu (emulated GPU)")]
    assert seen == expected


def test_events_arrive_on_the_gui_thread(qtbot, make_bridge):
    bridge = make_bridge()
    threads: list[bool] = []
    bridge.event_emitted.connect(lambda _e: threads.append(threading.current_thread() is threading.main_thread()))
    with qtbot.waitSignal(bridge.run_finished, timeout=5000):
        bridge.request_run("q", SPEC, SEARCH, CACHE)
    assert threads and all(threads)
    assert bridge.thread.isRunning()


def test_model_is_cached_between_runs_and_reloaded_when_changed(qtbot, make_bridge):
    loader = CountingLoader()
    bridge = make_bridge(loader=loader)
    for spec in (SPEC, SPEC, ModelSpec(source="synthetic:other")):
        with qtbot.waitSignal(bridge.run_finished, timeout=5000):
            bridge.request_run("q", spec, SEARCH, CACHE)
    assert loader.calls == [("synthetic:fake", "auto"), ("synthetic:other", "auto")]


class Weights:
    """A loaded model whose parts refer to each other, as modules and their hooks may: only a full collection
    frees it."""

    def __init__(self, source: str) -> None:
        self.name, self.device, self.me = f"model:{source}", "cpu", self


class CycleLoader:
    """Loads `Weights`; `alive_at_next_load`: for each load, whether each model loaded before it still lived."""

    def __init__(self) -> None:
        self.loaded: list[weakref.ref] = []
        self.alive_at_next_load: list[bool] = []

    def __call__(self, spec: ModelSpec, device: str, progress: Any) -> Weights:
        self.alive_at_next_load.extend(ref() is not None for ref in self.loaded)
        model = Weights(spec.source)
        self.loaded.append(weakref.ref(model))
        return model


def test_a_replaced_model_is_freed_before_the_next_one_loads(qtbot, make_bridge):
    """Before, a model held in a reference cycle stayed in memory beside the next one until some later full
    collection (never during a run, whose start freezes what is alive): on a GPU, two models' weights at once."""
    loader = CycleLoader()
    gc.disable()  # no automatic pass may free it by chance: only the bridge's own
    try:
        bridge = make_bridge(loader=loader)
        for spec in (SPEC, ModelSpec(source="synthetic:other")):
            with qtbot.waitSignal(bridge.run_finished, timeout=5000):
                bridge.request_run("q", spec, SEARCH, CACHE)
    finally:
        gc.enable()
    assert loader.alive_at_next_load == [False]



def test_a_replaced_models_prefix_blocks_leave_ram_and_stay_on_disk(qtbot, make_bridge, tmp_path, monkeypatch):
    """The prefix cache's RAM tier of every model the window had run stayed for the window's life (each up to a
    quarter of the free RAM), though only the loaded model can use it and its disk tier holds the same blocks."""
    from engine.kv import prefix_cache

    monkeypatch.setenv("BEAMWISE_PREFIX_CACHE_DIR", str(tmp_path / "prefix-kv"))
    prefix_cache.forget_shared()
    bridge = make_bridge(loader=None, run=None)  # the engine's own loader and search
    search, cache = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=4), CacheConfig(prefix_cache=True)
    kept = []
    try:
        for source in ("synthetic:tiny-llama", "synthetic:tiny-qwen2"):
            with qtbot.waitSignal(bridge.run_finished, timeout=60000):
                bridge.request_run("How fast is a train that covers 60 km in 45 minutes?", ModelSpec(source=source),
                                   search, cache)
            kept.append({key: len(shared.entries) for key, shared in prefix_cache._SHARED.items()})
    finally:
        prefix_cache.forget_shared()
    first, second = kept
    assert len(first) == 1 and next(iter(first.values())) > 0  # the run kept its prompt's blocks
    assert list(second) != list(first) and len(second) == 1  # only the loaded model's tier is in RAM
    assert sum(1 for _ in (tmp_path / "prefix-kv").rglob("*") if _.is_file()) >= sum(first.values())

def gated(gate: threading.Event):
    """fake_run that pauses after step 1 until the test opens the gate (no sleeps, no races)."""

    def run(question: str, loaded: Any, search: SearchConfig, cache: CacheConfig, *, should_stop: Any) -> Iterator:
        for event in fake_run(question, search, cache, should_stop=should_stop):
            yield event
            if isinstance(event, ev.StepSelected) and event.step == 1:
                gate.wait(timeout=10)

    return run


def test_stop_mid_run_cancels_at_next_step_and_a_second_run_works(qtbot, make_bridge):
    gate = threading.Event()
    bridge = make_bridge(run=gated(gate))
    seen = collect(bridge)

    def stop_after_first_step(event: Any) -> None:
        if isinstance(event, ev.StepSelected) and event.step == 1:
            bridge.stop()
            gate.set()

    bridge.event_emitted.connect(stop_after_first_step)
    with qtbot.waitSignal(bridge.run_finished, timeout=5000):
        bridge.request_run("q", SPEC, SearchConfig(beams=2, width=2, max_steps=5), CACHE)
    assert isinstance(seen[-1], ev.RunCancelled) and seen[-1].step == 1
    assert not any(isinstance(e, ev.StepStarted) and e.step == 2 for e in seen)

    seen.clear()
    bridge.event_emitted.disconnect(stop_after_first_step)
    with qtbot.waitSignal(bridge.run_finished, timeout=5000):
        bridge.request_run("q", SPEC, SEARCH, CACHE)
    assert isinstance(seen[-1], ev.RunFinished)


def test_bad_model_gives_load_failed_then_finished_and_the_thread_lives(qtbot, make_bridge):
    bridge = make_bridge()
    messages: list[str] = []
    bridge.load_failed.connect(messages.append)
    with qtbot.waitSignals([bridge.load_failed, bridge.run_finished], order="strict", timeout=5000):
        bridge.request_run("q", ModelSpec(source="bad/path"), SEARCH, CACHE)
    assert "no model at bad/path" in messages[0] and "Pick the bundled model" in messages[0]
    with qtbot.waitSignal(bridge.run_finished, timeout=5000):
        bridge.request_run("q", SPEC, SEARCH, CACHE)


def test_closing_while_a_model_loads_does_not_wait_for_the_load(qtbot, make_bridge):
    """Closing the window mid-load waited for the whole load (minutes for a large model; the loader has no stop
    point inside). The engine thread now stops waiting for it; the load's progress still comes from that thread."""
    release, done = threading.Event(), threading.Event()

    def slow_loader(spec: ModelSpec, device: str, progress: Any) -> Any:
        progress("reading weights", 0.1)
        release.wait(10)  # a long read with no stop point inside
        done.set()
        return SimpleNamespace(name="late", device="cpu")

    bridge = make_bridge(loader=slow_loader)
    progress: list[tuple[str, bool]] = []
    finished: list[bool] = []
    bridge.load_progress.connect(lambda message, _f: progress.append(
        (message, threading.current_thread() is threading.main_thread())))
    bridge.run_finished.connect(lambda: finished.append(True))
    bridge.request_run("q", SPEC, SEARCH, CACHE)
    qtbot.waitUntil(lambda: bool(progress), timeout=5000)
    assert progress == [("reading weights", True)]
    try:
        bridge.shutdown()
        assert not done.is_set() and not bridge.thread.isRunning()  # it returned with the load still reading
        qtbot.waitUntil(lambda: bool(finished), timeout=1000)  # the request ended as every request does
        # the abandoned load ends last: it must hold no Qt object, whose last reference would then go on its
        # plain Python thread, deleting it there (a full CI run crashed so, in this test's teardown)
        (load,) = [t for t in threading.enumerate() if t.name == "beamwise-load"]
        held = captured(load._target, depth=4)
        assert held and not [o for o in held if isinstance(o, QObject)]
    finally:
        release.set()


def test_engine_exception_becomes_failed_not_a_dead_thread(qtbot, make_bridge):
    def broken(question: str, loaded: Any, search: SearchConfig, cache: CacheConfig, *, should_stop: Any) -> Iterator:
        yield from list(fake_run(question, search, cache))[:3]
        raise RuntimeError("tensor shapes disagree")

    bridge = make_bridge(run=broken)
    failures: list[ev.RunFailed] = []
    bridge.failed.connect(failures.append)
    with qtbot.waitSignals([bridge.failed, bridge.run_finished], order="strict", timeout=5000):
        bridge.request_run("q", SPEC, SEARCH, CACHE)
    (failure,) = failures
    assert failure.error == "RuntimeError" and failure.message.startswith("RuntimeError: tensor shapes disagree.")
    assert "fault in Beamwise" in failure.message
    assert "Traceback" in failure.details and "in broken" in failure.details  # where it was raised
    assert bridge.thread.isRunning()


class MemoryRecorderStore:
    def __init__(self) -> None:
        self.written: list[Any] = []
        self.thread: threading.Thread | None = None
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_events_are_recorded_in_the_worker_thread(qtbot, make_bridge, monkeypatch):
    store = MemoryRecorderStore()

    class Recorder:
        session_id = 7

        def __init__(self, s: MemoryRecorderStore) -> None:
            self.store = s

        def write(self, event: Any) -> None:
            self.store.thread = threading.current_thread()
            self.store.written.append(event)

        def close(self) -> None:
            pass

    import app.journal_import

    seam = lambda s, notify, previous=None: Recorder(s)  # noqa: E731 - the bridge's seam
    monkeypatch.setattr(app.journal_import, "recorder_for", seam)
    bridge = make_bridge(store_factory=lambda: store)
    sessions: list[int] = []
    bridge.session_recorded.connect(sessions.append)
    with qtbot.waitSignal(bridge.run_finished, timeout=5000):
        bridge.request_run("q", SPEC, SEARCH, CACHE)
    assert [e.type for e in store.written] == [e.type for e in fake_run("q", SEARCH, CACHE)]
    assert store.thread is not threading.main_thread()
    assert sessions == [7]
    bridge.shutdown()
    assert store.closed


def test_runs_are_saved_in_a_real_session_store(qtbot, make_bridge, tmp_path):
    store_mod = pytest.importorskip("app.store")
    path = tmp_path / "sessions.db"
    bridge = make_bridge(store_factory=lambda: store_mod.SessionStore(path))
    sessions: list[int] = []
    bridge.session_recorded.connect(sessions.append)
    with qtbot.waitSignal(bridge.run_finished, timeout=5000):
        bridge.request_run("q", SPEC, SEARCH, CACHE)
    with store_mod.SessionStore(path) as reader:
        assert reader.events(sessions[0]) == list(fake_run("q", SEARCH, CACHE))


def test_a_broken_store_is_reported_and_the_run_still_completes(qtbot, make_bridge):
    def factory() -> Any:
        raise OSError("database disk image is malformed")

    bridge = make_bridge(store_factory=factory)
    seen = collect(bridge)
    problems: list[str] = []
    bridge.recording_failed.connect(problems.append)
    with qtbot.waitSignal(bridge.run_finished, timeout=5000):
        bridge.request_run("q", SPEC, SEARCH, CACHE)
    assert isinstance(seen[-1], ev.RunFinished)
    assert problems and "not being saved" in problems[0]


def test_describe_helpers():
    assert describe_error(ValueError("x")) == "ValueError: x"
    assert "Pick the bundled" in describe_error(ModelLoadError("gone"))
    assert describe_device(SimpleNamespace(device="cpu")) == "cpu (emulated GPU)"
    assert describe_device(SimpleNamespace(device="cuda:0")) == "cuda:0"


def test_idle_after_a_run_the_worker_gives_cached_memory_back_and_says_how_much(qtbot, make_bridge):
    """A game started after a question gets the VRAM and pinned RAM torch kept cached; the model stays loaded."""
    from engine.idle import Released

    threads: list[int] = []

    def release() -> Released:
        threads.append(threading.get_ident())
        return Released(device_bytes=3 * 10**9, host_bytes=5 * 10**9)

    bridge = make_bridge(release=release, idle_release_ms=30)
    with qtbot.waitSignal(bridge.run_finished, timeout=5000):
        bridge.request_run("q", SPEC, SEARCH, CACHE)
    with qtbot.waitSignal(bridge.memory_released, timeout=5000) as given:
        pass
    assert given.args == [3 * 10**9, 5 * 10**9] and threads and threads[0] != threading.get_ident()
    assert not bridge.idle.isActive(), "once per idle spell"


def test_a_request_before_the_idle_spell_ends_keeps_the_memory_cached(qtbot, make_bridge):
    released: list[bool] = []
    bridge = make_bridge(release=lambda: released.append(True), idle_release_ms=60_000)
    with qtbot.waitSignal(bridge.run_finished, timeout=5000):
        bridge.request_run("q", SPEC, SEARCH, CACHE)
    assert bridge.idle.isActive()
    bridge.request_run("q", SPEC, SEARCH, CACHE)
    assert not bridge.idle.isActive(), "a new question needs the cached memory: no release during it"
    with qtbot.waitSignal(bridge.run_finished, timeout=5000):
        pass
    assert bridge.idle.isActive() and released == []


def test_nothing_is_released_without_a_model_and_a_failed_release_is_only_a_message(qtbot, make_bridge):
    calls: list[str] = []

    def broken() -> Any:
        calls.append("release")
        raise RuntimeError("driver says no")

    bridge = make_bridge(release=broken, idle_release_ms=60_000)
    bridge.release_requested.emit()  # no model loaded yet: nothing torch could hold for it
    with qtbot.waitSignal(bridge.model_loaded, timeout=5000):
        bridge.request_load(SPEC)
    assert calls == []
    with qtbot.waitSignal(bridge.recording_failed, timeout=5000) as said:
        bridge.release_requested.emit()
    assert calls == ["release"] and "driver says no" in said.args[0]


@pytest.mark.parametrize("end", [ev.RunCancelled(0),
                                 ev.RunFailed("ServerUnreachable", "nothing answered")])
def test_an_end_before_the_start_is_shown_not_recorded(qtbot, make_bridge, tmp_path, end):
    """A Stop or a failure while a server is checked comes as its end event alone: the recorder refused it and the
    status bar said "Saving this run stopped: ValueError: the recorder got run_cancelled before run_started"."""
    store_mod = pytest.importorskip("app.store")
    path = tmp_path / "sessions.db"
    bridge = make_bridge(store_factory=lambda: store_mod.SessionStore(path),
                         remote_run=lambda question, server, search, *, should_stop, **_: iter([end]))
    seen, problems = collect(bridge), []
    bridge.recording_failed.connect(problems.append)
    with qtbot.waitSignal(bridge.run_finished, timeout=5000):
        bridge.request_remote_run("q", object(), SEARCH)
    assert seen == [end] and problems == []
    with store_mod.SessionStore(path) as reader:
        assert reader.list_sessions() == []
