"""Shared fixtures: tiny synthetic models, loaded once per test session."""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
import threading
import time

import pytest

MADE_HERE = "BEAMWISE_TESTS_SCRATCH"  # the variables scratch_folder set, so a pytest-xdist worker knows them


def scratch_folder(variable: str, prefix: str) -> None:
    """Point `variable` at a new temporary folder, removed when the test run ends, unless it is already set. A
    pytest-xdist worker inherits the folders its controller made here and makes its own: workers share none."""
    made_here = [name for name in os.environ.get(MADE_HERE, "").split(os.pathsep) if name]
    if variable in os.environ and not (os.environ.get("PYTEST_XDIST_WORKER") and variable in made_here):
        return
    os.environ[variable] = folder = tempfile.mkdtemp(prefix=prefix)
    os.environ[MADE_HERE] = os.pathsep.join(sorted({*made_here, variable}))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)


os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # GUI tests run headless unless told otherwise
# Commands run without --db record into a scratch folder, never the developer's own sessions.
scratch_folder("BEAMWISE_DATA_DIR", "beamwise-tests-")
# ... and keep their prefix KV cache (on by default in the CLI) out of the developer's cache folder.
scratch_folder("BEAMWISE_PREFIX_CACHE_DIR", "beamwise-prefix-kv-")

from app.threads import usable_cores  # noqa: E402  (after the environment above)
from engine.config import ModelSpec  # noqa: E402
from engine.models import load_model  # noqa: E402


def join_background_threads(seconds: float) -> list[str]:
    """Wait for the app's daemon threads still at work (a window's plan, a load), `seconds` at most in all; the
    names of those still running then."""
    deadline = time.monotonic() + seconds
    threads = [t for t in threading.enumerate() if t.daemon and t.name.startswith("beamwise-")]
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [thread.name for thread in threads if thread.is_alive()]


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker's torch takes its share of the cores: two workers of two threads each on two
    cores would wait for each other's threads at every parallel operation (app/threads.py)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        import torch

        torch.set_num_threads(max(1, usable_cores() // int(workers)))


def pytest_unconfigure(config: pytest.Config) -> None:
    """Let the app's background threads still at work finish (10 s at most in all) before the interpreter ends:
    one still inside torch then (the last window test's plan) aborts the process, status 134 after every test
    passed (app.cli.exit_with is the app's own answer; pytest exits the usual way)."""
    join_background_threads(10)


@pytest.fixture(autouse=True)
def joined_after_window_tests(request):
    """After a test that made Qt objects (it asked for qtbot; pytest-qt has closed its widgets by now): wait for
    the threads its window started and delete what Qt was told to delete later, so none of it runs beside the next
    test. Once in five full runs the whole run aborted ("pure virtual method called") with the collector running
    inside a later test's event processing, beside an earlier window's plan still being made; the cycles it was
    freeing were not found. (Collecting each window test's garbage here as well cost 3 minutes of the suite: a
    window's run thaws what the app froze, so each collection after one walked every object.)"""
    yield
    if "qtbot" not in request.fixturenames:
        return
    from PySide6.QtCore import QCoreApplication, QEvent

    running = join_background_threads(30)
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    if running:  # a thread that outlives its window's test would run beside every later one
        pytest.fail(f"the app's background threads {', '.join(running)} were still running 30 s after the test")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`packaging` tests build the whole app (minutes): they run only when asked for with `-m packaging`.
    `sweep` tests (300 drawn runs beyond those of every run) are left out unless asked for with `-m sweep`."""
    asked = config.option.markexpr or ""
    if "sweep" not in asked:
        left_out = [item for item in items if "sweep" in item.keywords]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if "sweep" not in item.keywords]
    if "packaging" in asked:
        return
    skip = pytest.mark.skip(reason="builds the app with PyInstaller; run it with: pytest -m packaging")
    for item in items:
        if "packaging" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny():
    return load_model(ModelSpec("synthetic:tiny-llama"))


@pytest.fixture(scope="session")
def tiny_qwen2():
    return load_model(ModelSpec("synthetic:tiny-qwen2"))


@pytest.fixture(scope="session")
def tiny_opt():
    return load_model(ModelSpec("synthetic:tiny-opt"))


@pytest.fixture
def forwards(tiny):
    """The tiny model's forward calls in this test, counted as they end."""
    count = [0]
    handle = tiny.model.register_forward_hook(lambda *_: count.__setitem__(0, count[0] + 1))
    yield count
    handle.remove()


@pytest.fixture(scope="session")
def bundled():
    """The real SmolLM2-135M-Instruct (converted once into the user cache, ~10 s the first time)."""
    return load_model(ModelSpec("bundled"))


@pytest.fixture
def scratch_models(monkeypatch, tmp_path):
    """An empty models folder."""
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))


@pytest.fixture
def tinyllama_folder(tmp_path, tiny):
    """synthetic:tiny-llama saved as a model folder a user would add (config, weights, tokenizer)."""
    folder = tmp_path / "tinyllama"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def keep_window(qtbot):
    """`keep(window)`: qtbot owns the window and its search thread is shut down when the test ends."""
    made = []

    def keep(window):
        qtbot.addWidget(window)
        made.append(window)
        return window

    yield keep
    for window in made:
        window.bridge.shutdown()


@pytest.fixture
def refusals(monkeypatch) -> list:
    """Every KV budget refusal a run's KV cache raises (engine/kv/cache.py `KVCache._refused`), with its figures."""
    from engine.kv.cache import KVCache

    seen = []
    refused = KVCache._refused

    def recorded(kv, error):
        seen.append(refused(kv, error))
        return seen[-1]

    monkeypatch.setattr(KVCache, "_refused", recorded)
    return seen


@pytest.fixture
def watch_kernels():
    """Checks every torch call of the test against the fakes of CUDA's streams it makes (tests/fake_cuda.py)."""
    from tests.fake_cuda import KernelWatch

    with KernelWatch():
        yield


@pytest.fixture
def qsettings(tmp_path):
    """Never the user's settings: an ini file in the test's folder."""
    from PySide6.QtCore import QSettings

    return QSettings(str(tmp_path / "beamwise.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def warnings(monkeypatch) -> list[tuple[str, str]]:
    """The (title, text) of every warning dialog the window would have shown."""
    from PySide6.QtWidgets import QMessageBox

    shown: list[tuple[str, str]] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda _parent, title, text, *a: shown.append((title, text)))
    return shown


@pytest.fixture
def make_window(keep_window, qsettings):
    """`make(run=..., loader=...)`: a main window over a bridge with a stand-in loader and search (a fake run)."""
    from app.gui.bridge import SearchBridge
    from app.gui.main_window import MainWindow
    from tests.test_gui_bridge import CountingLoader, run_fake

    def make(run=run_fake, loader=None, store=None, settings=None, store_factory=None) -> MainWindow:
        bridge = SearchBridge(loader=loader or CountingLoader(), run=run, store_factory=store_factory)
        return keep_window(MainWindow(bridge, settings=settings or qsettings, store=store))

    return make


@pytest.fixture
def device_nodes(tmp_path):
    """`(null, full)`: character devices like /dev/null and /dev/full made under the test's folder, for writes into
    devices that must never touch /dev itself (as root, an export once replaced /dev/null with a plain file)."""
    null, full = tmp_path / "null", tmp_path / "full"
    try:
        os.mknod(null, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        os.mknod(full, 0o600 | stat.S_IFCHR, os.makedev(1, 7))
    except (OSError, AttributeError):
        pytest.skip("making device nodes needs root (CAP_MKNOD) on Linux")
    return null, full


@pytest.fixture
def tokyo(monkeypatch):
    """This machine's time zone set to Asia/Tokyo (UTC+9, no summer time) for the test, then back (POSIX only)."""
    if not hasattr(time, "tzset"):
        pytest.skip("time.tzset is POSIX only")
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
