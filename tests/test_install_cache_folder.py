"""A first start whose cache folder cannot be written (a root-owned XDG_CACHE_HOME, a read-only disk): one line that
names the folder and BEAMWISE_CACHE_DIR, said before the bundled model's conversion starts.

Before, a cache folder that could not be made ended in a PermissionError traceback and "internal error", and one
that existed read-only was found only after the conversion, in a line that did not name
BEAMWISE_CACHE_DIR. The tests run as root, who writes everywhere: `mkdir` is made to refuse instead."""

from __future__ import annotations

import pathlib
from pathlib import Path

import pytest

import engine.bundled as bundle
from app.cli import main
from engine.errors import BeamwiseError
from engine.models import LoadedModel


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny: LoadedModel) -> dict:
    """BEAMWISE_CACHE_DIR in tmp_path and a stand-in GGUF reader (tiny-llama); `reads` counts conversions."""
    state = {"reads": 0, "root": tmp_path / "cache"}

    def read(gguf: Path, progress):
        state["reads"] += 1
        return tiny.model, tiny.tokenizer

    monkeypatch.setenv(bundle.CACHE_ENV, str(state["root"]))
    monkeypatch.setattr(bundle, "bundled_gguf_path", lambda: tmp_path / "fake.gguf")
    monkeypatch.setattr(bundle, "_read_gguf", read)
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))
    return state


def refuse_mkdir(monkeypatch: pytest.MonkeyPatch, refused) -> None:
    """`Path.mkdir` raises PermissionError for the paths `refused(path)` names, as for a user who may not write."""
    real = pathlib.Path.mkdir

    def mkdir(self: Path, *args, **kwargs) -> None:
        if refused(self):
            raise PermissionError(13, "Permission denied", str(self))
        real(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", mkdir)


def said_as_the_users_error(error: BeamwiseError, root: Path) -> None:
    message = error.user_message()
    assert f"cannot write the cache folder {root} (Permission denied)" in message, message
    assert "BEAMWISE_CACHE_DIR" in message and "\n" not in message


def test_a_cache_folder_that_cannot_be_made_is_said_before_converting(cache: dict,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_mkdir(monkeypatch, lambda path: path == cache["root"])  # its parent is root's
    with pytest.raises(BeamwiseError) as caught:
        bundle.bundled_model_folder()
    said_as_the_users_error(caught.value, cache["root"])
    assert cache["reads"] == 0


def test_a_cache_folder_there_but_read_only_is_said_before_converting(cache: dict,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cache["root"].mkdir()
    refuse_mkdir(monkeypatch, lambda path: path.parent == cache["root"])
    with pytest.raises(BeamwiseError) as caught:
        bundle.bundled_model_folder()
    said_as_the_users_error(caught.value, cache["root"])
    assert cache["reads"] == 0  # not after the conversion
    assert list(cache["root"].iterdir()) == []


def test_a_converted_cache_in_a_read_only_folder_still_loads(cache: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = bundle.bundled_model_folder()
    refuse_mkdir(monkeypatch, lambda path: path.is_relative_to(cache["root"]))
    assert bundle.bundled_model_folder() == folder and cache["reads"] == 1


def test_beamwise_run_says_it_in_one_line(cache: dict, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture) -> None:
    refuse_mkdir(monkeypatch, lambda path: path == cache["root"])
    assert main(["run", "Hi", "--no-save", "--max-steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"beamwise: error: cannot write the cache folder {cache['root']} (Permission denied)")
    assert err.count("\n") == 1 and "BEAMWISE_CACHE_DIR" in err and "internal error" not in err
    assert cache["reads"] == 0
