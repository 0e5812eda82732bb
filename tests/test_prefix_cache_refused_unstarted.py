"""A prefix cache RAM cap too small for the prompt's blocks ends the run before it starts (README: one run_failed
line alone, nothing recorded), where it yielded RunStarted first and `run` recorded a failed session."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from app.store import SessionStore
from engine.config import CacheConfig
from engine.kv import prefix_cache
from engine.search import run
from tests.test_prefix_cache import BLOCK, PROMPT, SEARCH

REFUSED = ["run", "What is 17 * 23?", "--model", "synthetic:tiny-llama", "--prefix-cache-ram", "1kB"]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("BEAMWISE_PREFIX_CACHE_DIR", str(tmp_path / "prefix-kv"))
    prefix_cache.forget_shared()
    yield
    prefix_cache.forget_shared()


def test_the_search_yields_run_failed_alone(tiny, cache_dir):
    cache = CacheConfig(block_size=BLOCK, prefix_cache=True, prefix_cache_ram_bytes=1000)
    events = list(run("", tiny, SEARCH, cache, prompt_ids=PROMPT))
    assert [e.type for e in events] == ["run_failed"]
    assert events[0].error == "PrefixCacheTooSmall"


@pytest.mark.parametrize("json_lines", [False, True], ids=["text", "json"])
def test_run_records_nothing_and_says_one_line(tmp_path, capsys, cache_dir, json_lines):
    db = tmp_path / "s.db"
    assert main([*REFUSED, "--db", str(db), *(["--json"] if json_lines else [])]) == 2
    out, err = capsys.readouterr()
    beamwise = [line for line in err.splitlines() if line.startswith("beamwise:")]
    assert len(beamwise) == 1 and "too small for this prompt's 9 cached blocks" in beamwise[0], err
    if json_lines:
        assert [json.loads(line)["type"] for line in out.splitlines()] == ["run_failed"]
    if db.exists():
        with SessionStore(db) as store:
            assert store.list_sessions() == []
