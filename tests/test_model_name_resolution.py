"""One reading of a model's name or path for --model, `models info`, `remove` and `add`: the bundled model's listed
name was refused by --model, a path gave other facts than the name, a folder of one .gguf was "no config.json" by
its path, a typo got advice about paths only, `list` said 0M where `info` said 0.1 M, and a download could be added
as well (listed twice)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from app import model_library as lib
from app import models_folder
from app.cli import build_parser, main
from app.models_folder import BUNDLED_NAME, kept_as_given, source_of
from app.options import UsageError, configs_from_args
from engine.errors import ModelLoadError
from engine.models import checked_folder
from tests.test_model_names import small_gguf

pytestmark = pytest.mark.usefixtures("scratch_models")


@pytest.fixture
def downloads(tiny) -> tuple[Path, Path]:
    """tiny--gen (a transformers folder) and gg--smol-GGUF (a `pull --file` folder of one .gguf), as pulls leave."""
    folder = lib.models_dir() / "tiny--gen"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    gguf = lib.models_dir() / "gg--smol-GGUF" / "smol.Q4_1.gguf"
    gguf.parent.mkdir()
    small_gguf(gguf)
    for made in (folder, gguf.parent):
        (made / lib.MARKER).write_text(json.dumps({"repo": made.name, "complete": True}), encoding="utf-8")
    return folder, gguf


def info(capsys, what: str) -> tuple[int, list[str]]:
    code = main(["models", "info", what])
    return code, capsys.readouterr().out.splitlines()


def test_the_bundled_models_listed_name_is_a_model_source():
    from engine.bundled import BUNDLED_NAME as ENGINES

    assert BUNDLED_NAME == ENGINES  # models_folder keeps its own copy: engine.bundled imports torch
    assert source_of(BUNDLED_NAME) == "bundled"  # it said "model path SmolLM2-135M-Instruct does not exist"
    assert lib.find(BUNDLED_NAME).source == "bundled"


def test_a_folder_named_as_the_bundled_model_makes_the_name_ambiguous_everywhere(tiny):
    mine = Path(lib.models_dir().parent / "mine" / BUNDLED_NAME)
    tiny.model.save_pretrained(mine)
    tiny.tokenizer.save_pretrained(mine)
    lib.add_folder(mine)
    with pytest.raises(argparse.ArgumentTypeError, match="more than one model here is named"):
        source_of(BUNDLED_NAME)
    with pytest.raises(UsageError, match="more than one model here is named"):
        lib.find(BUNDLED_NAME)


def test_info_by_path_says_what_info_by_name_says(downloads, capsys):
    folder, gguf = downloads
    for name, paths in (("tiny--gen", [folder]), ("gg--smol-GGUF", [gguf.parent, gguf])):
        by_name = info(capsys, name)
        assert by_name[0] == 0 and any(line.split() == ["downloaded", "by", "Beamwise", "yes"] for line in by_name[1])
        for path in paths:  # the folder said "where path", "downloaded no"; the GGUF's folder "no config.json"
            assert info(capsys, str(path)) == by_name


def test_a_folder_of_one_gguf_given_by_path_is_its_gguf(downloads, tmp_path):
    _, gguf = downloads
    assert source_of(str(gguf.parent)) == str(gguf)  # what --model and --verifier-model make of it
    several = tmp_path / "repo"
    several.mkdir()
    for name in ("a.Q4.gguf", "a.Q8.gguf"):
        small_gguf(several / name)
    assert source_of(str(several)) == str(several)  # which one is the user's to say: the hint names them
    with pytest.raises(ModelLoadError) as refused:
        checked_folder(str(several))
    assert f"give the path of one .gguf file, such as {several / 'a.Q4.gguf'}" in refused.value.user_message()


def test_info_of_what_is_no_model_exits_2_and_claims_no_role(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, out = info(capsys, str(tmp_path / "empty"))
    assert code == 2 and ["role", "-"] in [line.split() for line in out] and any("no config.json" in x for x in out)


def test_a_mistyped_name_is_answered_with_the_close_name(downloads, capsys):
    assert main(["run", "hi", "--model", "tiny_gen"]) == 2  # said once the options are read, before any load
    err = capsys.readouterr().err
    assert "--model: no model here is named 'tiny_gen'" in err and "did you mean tiny--gen?" in err
    assert "`beamwise models list`" in err
    assert main(["models", "info", "tiny_gen"]) == 2 and "did you mean tiny--gen?" in capsys.readouterr().err
    assert source_of("zzzz") == "zzzz"  # nothing close: the loader's own words, which name the list too
    with pytest.raises(ModelLoadError) as missing:
        checked_folder("zzzz")
    assert "a name `beamwise models list`" in missing.value.user_message()


def test_list_info_and_the_window_say_the_parameters_alike(downloads, capsys):
    entry = lib.find("tiny--gen")
    shown = lib.parameters_text(entry.facts)
    assert shown.endswith(" M") and shown != "0 M" and ("parameters", shown) in lib.describe(entry)
    assert main(["models", "list"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny--gen"))
    assert shown in row and " 0M " not in row


def test_a_download_cannot_be_added_as_well(downloads, capsys):
    _, gguf = downloads
    for path in (gguf, gguf.parent):  # the file was added (listed twice), the folder "had no config.json"
        assert main(["models", "add", str(path)]) == 2
        err = capsys.readouterr().err
        assert "is in Beamwise's models folder, so it is listed already (as gg--smol-GGUF)" in err
    assert lib.added_folders() == []


SERVED = ["--backend", "openai", "--endpoint", "http://h:8000", "--served-model", "gen"]


def test_a_served_name_close_to_a_local_one_is_no_typo(downloads):
    """A PRM server's model named like a local one (Qwen2.5-Math-PRM-7B beside a local -72B) exited 2 "did you
    mean"; the names are refused as typos only where they are to load here."""
    parser = build_parser()
    served = parser.parse_args(["run", "q", *SERVED, "--verifier", "prm", "--verifier-endpoint", "http://h:8001",
                                "--verifier-model", "tiny_gen"])
    assert served.verifier_model == "tiny_gen"
    assert configs_from_args(served)[1].verifier_model == "tiny_gen"
    here = parser.parse_args(["run", "q", *SERVED, "--verifier", "prm", "--verifier-model", "tiny_gen"])
    with pytest.raises(UsageError, match=r"^--verifier-model: no model here is named 'tiny_gen' .*did you mean "
                                         r"tiny--gen\?"):
        configs_from_args(here)
    with pytest.raises(UsageError, match=r"^--model: .*did you mean tiny--gen\?"):
        configs_from_args(parser.parse_args(["run", "q", "--model", "tiny_gen"]))


@pytest.mark.parametrize(("text", "kept"), [
    ("C:\\models\\owner--x-GGUF", False), ("C:/models/owner--x-GGUF", False), ("d:\\x", False),
    ("synthetic:tiny-llama", True), ("qwen-prm:C:\\PRMs\\q", True), ("", True), ("bundled", True),
    ("tiny--gen", False), ("models/x", False),
])
def test_a_windows_path_is_a_path_not_a_prefix(text, kept):
    """Every absolute Windows path has a drive colon: `--model C:\\models\\owner--x-GGUF` (a `pull --file` folder)
    was kept as given, not made its .gguf."""
    assert kept_as_given(text) is kept


def test_a_windows_folder_of_one_gguf_is_its_gguf(monkeypatch):
    folder = "C:\\models\\owner--x-GGUF"
    looked = []
    monkeypatch.setattr(models_folder, "runnable",
                        lambda path: (looked.append(str(path)), Path(folder, "x.Q4.gguf"))[1])
    assert source_of(folder) == str(Path(folder, "x.Q4.gguf")) and looked == [folder]


def test_one_gguf_of_a_pulled_folder_of_several_is_told_to_go_by_its_path(capsys):
    """The advice named the folder's name, which names no model that loads (two .gguf files)."""
    folder = lib.models_dir() / "owner--smol-GGUF"
    folder.mkdir(parents=True)
    for quant in ("Q4_1", "Q8_0"):
        small_gguf(folder / f"smol.{quant}.gguf")
    (folder / lib.MARKER).write_text(json.dumps({"repo": "owner/smol-GGUF", "complete": True}), encoding="utf-8")
    gguf = folder / "smol.Q4_1.gguf"
    assert main(["models", "add", str(gguf)]) == 2
    err = capsys.readouterr().err
    assert f"use it by its path: --model {gguf.resolve()}" in err and "--model owner--smol-GGUF" not in err
    assert main(["models", "add", str(folder)]) == 2
    err = capsys.readouterr().err
    assert f"use one of its .gguf files by its path, e.g. --model {gguf.resolve()}" in err
    assert "--model owner--smol-GGUF" not in err and lib.added_folders() == []


def test_bench_answers_a_mistyped_name_with_the_close_name_too(downloads, capsys):
    """`bench --model tiny_gen` went to the loader, whose words named no close name (run, plan and eval did)."""
    assert main(["bench", "--model", "tiny_gen"]) == 2
    err = capsys.readouterr().err
    assert "--model: no model here is named 'tiny_gen'" in err and "did you mean tiny--gen?" in err
    assert main(["bench", "--model", "synthetic:tiny-llama", "--prm", "tiny_gen"]) == 2
    assert "--prm: no model here is named 'tiny_gen'" in capsys.readouterr().err
