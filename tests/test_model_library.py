"""The models on this machine as a user manages them: an added folder is never deleted, a damaged list of added
folders is named and never rewritten, `models add` takes only a model, and a model whose weights do not match its
config (a PRM among them) is refused instead of answering with random numbers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from app import model_library as lib
from app.cli import main
from app.models_folder import source_of
from engine.models import LoadedModel
from engine.verifiers.synthetic_prm import save_synthetic_prm

pytestmark = pytest.mark.usefixtures("scratch_models")
RUN = ["--beams", "1", "--width", "1", "--max-steps", "1", "--step-tokens", "2", "--no-save"]


@pytest.fixture
def model_folder(tmp_path: Path, tiny: LoadedModel) -> Path:
    folder = tmp_path / "tiny"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    return folder


def test_an_added_copy_of_a_downloaded_model_is_only_ever_taken_off_the_list(model_folder, capsys):
    """Its download marker made it "downloaded", and `models remove` deleted the user's folder."""
    (model_folder / lib.MARKER).write_text(json.dumps({"repo": "tiny/llama"}), encoding="utf-8")
    assert main(["models", "add", str(model_folder)]) == 0
    assert f"added {model_folder.resolve()}" in capsys.readouterr().out
    entry = lib.find("tiny")
    assert entry.where == "added" and not entry.downloaded
    with pytest.raises(ValueError, match="not downloaded by Beamwise into its models folder"):
        lib.remove(entry)
    assert main(["models", "remove", "tiny"]) == 0
    assert "off the list; its files were not touched" in capsys.readouterr().out
    assert (model_folder / "config.json").is_file() and lib.added_folders() == []


@pytest.mark.parametrize("content", ['["/a", "/b",]', '"/a/b"', "[1, 2]", "[null]", '[""]', '["relative"]'])
def test_a_damaged_list_of_added_folders_is_named_and_never_rewritten(model_folder, capsys, content):
    """A trailing comma made the next `models add` write a list of one; a string was walked letter by letter
    (from /, the whole disk); numbers raised out of `models list`."""
    listed = lib.added_list_path()
    listed.parent.mkdir(parents=True, exist_ok=True)
    listed.write_text(content, encoding="utf-8")
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert f"problem: the list of added model folders {listed}" in out and "SmolLM2-135M-Instruct" in out
    assert main(["models", "add", str(model_folder)]) == 2
    assert f"the list of added model folders {listed}" in capsys.readouterr().err
    assert listed.read_text(encoding="utf-8") == content


def test_models_add_takes_only_a_model_it_can_read(tmp_path, model_folder, capsys):
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{", encoding="utf-8")
    (tmp_path / "config-only").mkdir()  # both were listed as models and failed only at `run`
    (tmp_path / "config-only" / "config.json").write_bytes((model_folder / "config.json").read_bytes())
    (tmp_path / "no-weights").mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / "no-weights" / name).write_bytes((model_folder / name).read_bytes())
    for path, said in ((tmp_path / "notes.txt", "is neither a .gguf file nor a model folder"),
                       (tmp_path / "empty", "has no config.json"), (tmp_path / "missing", "does not exist"),
                       (tmp_path / "broken", "could not load the model config"),
                       (tmp_path / "config-only", "has no tokenizer"),
                       (tmp_path / "no-weights", "has no weight files (*.safetensors, *.bin)")):
        assert main(["models", "add", str(path)]) == 2
        assert said in capsys.readouterr().err
    assert lib.added_folders() == []
    assert main(["models", "add", str(model_folder)]) == 0 and lib.added_folders() == [model_folder.resolve()]


@pytest.mark.parametrize("config", [[1, 2, 3], {"model_type": "llama", "architectures": 5}])
def test_a_config_of_another_shape_in_the_models_folder_is_a_problem_row_not_a_traceback(capsys, config):
    folder = lib.models_dir() / "odd"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert main(["models", "list"]) == 0 and "odd" in capsys.readouterr().out
    assert main(["models", "info", "odd"]) == 2  # no model: its problem row is shown, and the exit says so
    assert "problem " in capsys.readouterr().out
    assert main(["models", "info", str(lib.models_dir() / "gone")]) == 2
    assert "does not exist; give a name from `beamwise models list`" in capsys.readouterr().err


def test_an_unfinished_download_says_so(model_folder, capsys):
    folder = lib.models_dir() / "tiny--llama"
    folder.parent.mkdir(parents=True)
    model_folder.rename(folder)
    (folder / lib.MARKER).write_text(json.dumps({"repo": "tiny/llama", "complete": False}), encoding="utf-8")
    assert lib.find("tiny--llama").problem.startswith("the download did not finish")
    assert main(["models", "list"]) == 0 and "problem: the download did not finish" in capsys.readouterr().out


def test_weights_that_miss_tensors_of_the_config_are_refused(model_folder, capsys):
    """transformers filled them with random numbers, logged a table, and the run answered."""
    weights = model_folder / "model.safetensors"
    tensors = load_file(weights)
    save_file({k: v for k, v in tensors.items() if ".layers.1." not in k}, weights, metadata={"format": "pt"})
    assert main(["run", "2+2?", "--model", str(model_folder), *RUN]) == 2
    assert "lacks weights its config.json names (model.layers.1." in capsys.readouterr().err


def test_a_prm_as_the_generator_is_refused_with_where_it_goes(tmp_path, capsys):
    folder = save_synthetic_prm("tiny-qwen-prm", tmp_path / "prm")
    assert main(["run", "2+2?", "--model", str(folder), *RUN]) == 2
    err = capsys.readouterr().err
    assert "is a process reward model" in err and "--verifier prm --verifier-model PATH" in err
    assert main(["run", "2+2?", "--model", "synthetic:tiny-llama", "--verifier-model", str(folder), *RUN]) == 2
    assert "add --verifier prm to score the steps with it" in capsys.readouterr().err  # it was ignored


def test_a_synthetic_prm_as_the_generator_is_refused_with_where_it_goes(capsys):
    assert main(["run", "2+2?", "--model", "synthetic:tiny-qwen-prm", *RUN]) == 2
    err = capsys.readouterr().err
    assert "synthetic:tiny-qwen-prm is a process reward model" in err
    assert "--verifier prm --verifier-model synthetic:tiny-qwen-prm" in err and "unknown synthetic model" not in err


def test_models_info_describes_a_synthetic_model_as_run_builds_it(capsys):
    """`--model synthetic:llama2-7b` runs, so `models info` names its facts too (it said "no model named ...")."""
    from app.model_facts import facts_of

    assert main(["models", "info", "synthetic:llama2-7b"]) == 0
    rows = {line[:24].strip(): line[24:] for line in capsys.readouterr().out.splitlines()}  # label, value
    facts = facts_of("synthetic:llama2-7b")
    assert rows["role"] == "generator" and rows["parameters"] == f"{facts.parameters / 1e6:,.1f} M" == "6,738.4 M"
    assert rows["KV per token"].startswith("1.0 MB") and rows["where"].startswith("built in code")
    assert main(["models", "info", "synthetic:tiny-qwen-prm"]) == 0
    assert "PRM (qwen-prm)" in capsys.readouterr().out
    assert main(["models", "info", "synthetic:nope"]) == 2
    assert "unknown synthetic model 'nope'" in capsys.readouterr().err


def test_a_path_too_long_for_the_file_system_is_one_line(capsys):
    long = "/tmp/" + "x" * 300
    assert main(["run", "2+2?", "--model", long, *RUN]) == 2
    assert "cannot read the model path" in capsys.readouterr().err
    assert main(["models", "info", long]) == 2 and "Traceback" not in capsys.readouterr().err


def test_the_models_page_adds_only_models_and_takes_added_ones_off_the_list(qtbot, tmp_path, model_folder):
    from app.gui.models_page import ModelsPage

    page = ModelsPage()
    qtbot.addWidget(page)
    (tmp_path / "empty").mkdir()
    assert page.add_folder(tmp_path / "empty") is False
    assert "Could not add" in page.folder_status.text() and "has no config.json" in page.folder_status.text()
    assert page.add_folder(model_folder) is True
    qtbot.waitUntil(lambda: not page.listing, timeout=30000)  # the list is read off the GUI thread
    assert page.selected().name == "tiny"
    assert page.remove_button.isEnabled() and page.remove_button.text() == "Remove from list"
    page.remove_selected()
    qtbot.waitUntil(lambda: not page.listing, timeout=30000)
    assert "tiny" not in [e.name for e in page.table_model.entries] and (model_folder / "config.json").is_file()
    page.shutdown()


def test_a_name_from_the_list_is_a_model_source(model_folder, capsys):
    """`models list` printed names that --model refused ("model path tiny--llama does not exist")."""
    downloaded = lib.models_dir() / "tiny--llama"
    downloaded.parent.mkdir(parents=True)
    model_folder.rename(downloaded)
    assert main(["run", "2+2?", "--model", "tiny--llama", *RUN]) == 0
    assert main(["models", "add", str(downloaded)]) == 2  # it would be listed twice
    assert "is in Beamwise's models folder, so it is listed already" in capsys.readouterr().err
    prm = ["--verifier", "prm", "--verifier-model", "nothing-here"]
    assert main(["plan", "2+2?", "--model", "tiny--llama", *prm]) == 2
    assert "the PRM folder nothing-here does not exist" in capsys.readouterr().err
    assert source_of("synthetic:tiny-llama") == "synthetic:tiny-llama" and source_of("bundled") == "bundled"


def test_an_added_folder_that_was_moved_is_listed_with_the_problem_and_can_be_taken_off(tmp_path, model_folder,
                                                                                         capsys):
    """Before, it vanished from `models list` while staying in the list of added folders, and `models remove`
    said there was no model of its name: nothing could take it off."""
    assert main(["models", "add", str(model_folder)]) == 0
    moved = model_folder.rename(tmp_path / "elsewhere")
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and "is not there any more (moved or deleted)" in out
    assert lib.source_of_name("tiny") is None  # "Run again" does not pick a model that is gone
    assert main(["models", "remove", "tiny"]) == 0
    assert "off the list" in capsys.readouterr().out and lib.added_folders() == []
    assert (moved / "config.json").is_file()


def test_a_recorded_model_name_maps_back_to_the_source_that_runs_it(tmp_path, model_folder):
    """A session records its model's name, not its path: "Run again" in the window mapped
    'synthetic:tiny-llama (random weights)' and every added folder's name to the model set before, unsaid."""
    assert lib.source_of_name("SmolLM2-135M-Instruct") == "bundled"
    assert lib.source_of_name("SmolLM2-135M-Instruct (bundled)") == "bundled"  # what a run records
    assert lib.source_of_name("synthetic:tiny-llama (random weights)") == "synthetic:tiny-llama"
    assert lib.source_of_name("synthetic:llama2-7b (random weights)") == "synthetic:llama2-7b"
    assert lib.source_of_name("tiny-qwen2") == "synthetic:tiny-qwen2"  # as sessions of old versions recorded it
    assert lib.source_of_name("tiny") is None
    assert main(["models", "add", str(model_folder)]) == 0
    assert lib.source_of_name("tiny") == str(model_folder.resolve())
    assert lib.source_of_name("no-such-model") is None


def test_a_recorded_name_two_models_share_maps_to_neither(tmp_path, model_folder):
    """"Run again" took the first model of the session's name, which could be another model than the one that ran
    (two folders named `tiny`): it keeps the model set, and says why."""
    other = tmp_path / "elsewhere" / "tiny"
    shutil.copytree(model_folder, other)
    assert main(["models", "add", str(model_folder)]) == 0
    assert lib.source_of_name("tiny") == str(model_folder.resolve())
    assert main(["models", "add", str(other)]) == 0
    assert lib.source_of_name("tiny") is None


def test_a_list_that_cannot_be_written_is_one_error_and_the_old_list_stays(tmp_path, model_folder, capsys,
                                                                          monkeypatch):
    """A data folder that took no file made `models add` and `models remove` a traceback, and the temporary file
    had one fixed name (the window and a command writing at once wrote into one file) left behind on failure."""
    assert main(["models", "add", str(model_folder)]) == 0
    listed = lib.added_list_path()
    before = listed.read_bytes()
    other = tmp_path / "other"
    other.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"):
        (other / name).write_bytes((model_folder / name).read_bytes())

    def refuse(source, target):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("app.file_replace.os.replace", refuse)
    for argv in (["models", "add", str(other)], ["models", "remove", "tiny"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"cannot save the list of added model folders {listed} (Permission denied); it was not changed" in err
        assert "set BEAMWISE_DATA_DIR to a folder you can write to" in err and "Traceback" not in err
        assert listed.read_bytes() == before and sorted(p.name for p in listed.parent.iterdir()) == [listed.name]


def test_a_data_folder_that_takes_no_new_file_is_one_error_for_models_add(model_folder, capsys, monkeypatch):
    """What a read-only data folder does, also when the tests run as root."""

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("app.file_replace.tempfile.mkstemp", refuse)
    assert main(["models", "add", str(model_folder)]) == 2
    err = capsys.readouterr().err
    assert f"cannot save the list of added model folders {lib.added_list_path()} (Permission denied)" in err
    assert "Traceback" not in err and lib.added_folders() == []
