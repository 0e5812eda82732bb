"""What a pull checks before it keeps a file, and how it says what went wrong: each file's sha256 where the listing
gives one (as it arrives, with a resumed part hashed first, and again on a re-pull of a finished folder), the file a
hub lists but does not serve, a file longer than listed, and a hub whose listing fails."""

from __future__ import annotations

import hashlib
import json

import pytest

from app import model_library, model_pull
from app.model_pull import PullError, pull
from tests.hub_server import REPO, WEIGHTS, Hub

pytestmark = pytest.mark.usefixtures("scratch_models")


class LfsHub(Hub):
    """A hub whose listing gives each weight file's sha256 (the hub's `lfs` block) from `listed`, while `repos` is
    what it serves: a test changes `repos` to send other bytes, or none, than the listing describes.
    `api_status` answers the listing with that error instead."""

    def __init__(self, repos: dict[str, dict[str, bytes]]) -> None:
        super().__init__({repo: dict(files) for repo, files in repos.items()})
        self.listed = {repo: dict(files) for repo, files in repos.items()}
        self.api_status: int | None = None

    def serve(self, request, body: bool) -> None:
        path = request.path.split("?")[0]
        if not path.startswith("/api/models/"):
            return super().serve(request, body)
        if self.api_status is not None:
            return self._send(request, self.api_status, b"internal error", body)
        repo = path.removeprefix("/api/models/").split("/revision/")[0]
        if repo not in self.listed:
            return super().serve(request, body)  # its "Repository not found"
        siblings = [{"rfilename": name, "size": len(data), "blobId": hashlib.sha1(data).hexdigest(),
                     **({"lfs": {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}}
                        if name.endswith(".safetensors") else {})}
                    for name, data in self.listed[repo].items()]
        data = json.dumps({"id": repo, "modelId": repo, "sha": self.commit, "siblings": siblings}).encode()
        return self._send(request, 200, data, body, {"Content-Type": "application/json"})


def folder_of() -> tuple:
    target = model_pull.destination("tiny/llama")
    return target / "model.safetensors", target / model_pull.PARTIAL / "model.safetensors.part"


def test_a_file_of_the_right_size_with_other_bytes_is_refused_deleted_and_fetched_by_the_next_pull():
    """It was kept, marked complete and never fetched again (a hub sending zeros of the right length)."""
    final, part = folder_of()
    with LfsHub(REPO) as hub:
        hub.repos["tiny/llama"]["model.safetensors"] = bytes(len(WEIGHTS))
        with pytest.raises(PullError, match=r"^model\.safetensors from .* is not the file the listing describes: "
                                            r"its sha256 is [0-9a-f]{64}, where the listing gives "
                                            + hashlib.sha256(WEIGHTS).hexdigest()):
            pull("tiny/llama", endpoint=hub.endpoint)
        assert not final.exists() and not part.exists()
        assert "did not finish" in model_library.find("tiny--llama").problem
        hub.repos["tiny/llama"]["model.safetensors"] = WEIGHTS
        pull("tiny/llama", endpoint=hub.endpoint)
    assert final.read_bytes() == WEIGHTS
    assert model_library.find("tiny--llama").problem == ""


def test_a_resumed_file_is_hashed_whole_the_kept_part_first():
    final, part = folder_of()
    with LfsHub(REPO) as hub:
        hub.cut = {"model.safetensors"}
        with pytest.raises(PullError, match="broke off"):
            pull("tiny/llama", endpoint=hub.endpoint)
        assert part.read_bytes() == WEIGHTS[: len(WEIGHTS) // 2]
        hub.cut = set()
        pull("tiny/llama", endpoint=hub.endpoint)
        assert hub.ranges == [f"bytes={len(WEIGHTS) // 2}-"]
    assert final.read_bytes() == WEIGHTS


def test_a_kept_part_with_other_bytes_fails_the_check_and_the_next_pull_starts_afresh():
    final, part = folder_of()
    with LfsHub(REPO) as hub:
        hub.cut = {"model.safetensors"}
        with pytest.raises(PullError, match="broke off"):
            pull("tiny/llama", endpoint=hub.endpoint)
        part.write_bytes(b"\0" * 10 + part.read_bytes()[10:])  # damaged while it waited
        hub.cut = set()
        with pytest.raises(PullError, match=r"model\.safetensors .* is not the file the listing describes"):
            pull("tiny/llama", endpoint=hub.endpoint)
        assert not part.exists()
        pull("tiny/llama", endpoint=hub.endpoint)
        assert hub.ranges == [f"bytes={len(WEIGHTS) // 2}-"]  # the second start was a whole GET
    assert final.read_bytes() == WEIGHTS


def test_a_re_pull_of_a_finished_folder_checks_its_files_and_fetches_a_damaged_one_again():
    """A folder marked complete was trusted: a weight file of the right size with other bytes stayed for good."""
    final, _ = folder_of()
    with LfsHub(REPO) as hub:
        pull("tiny/llama", endpoint=hub.endpoint)
        asked = len(hub.revisions)
        pull("tiny/llama", endpoint=hub.endpoint)
        assert len(hub.revisions) == asked  # whole and unchanged: nothing fetched
        final.write_bytes(WEIGHTS[::-1])  # the same size
        pull("tiny/llama", endpoint=hub.endpoint)
        assert hub.revisions[asked:] and len(hub.revisions) == asked + 1  # the weights alone
    assert final.read_bytes() == WEIGHTS


def test_hashing_reads_the_file_in_chunks_up_to_the_length(monkeypatch, tmp_path):
    monkeypatch.setattr(model_pull, "HASH_CHUNK", 999)  # no divisor of the lengths
    path = tmp_path / "weights"
    path.write_bytes(WEIGHTS)
    for length in (5000, len(WEIGHTS)):
        assert model_pull._sha256_of(path, length).hexdigest() == hashlib.sha256(WEIGHTS[:length]).hexdigest()
    assert model_pull._sha256_of(tmp_path / "not-begun", 0).hexdigest() == hashlib.sha256().hexdigest()


def test_a_listed_file_the_hub_does_not_serve_is_named_not_the_repository():
    """It said "tiny/llama was not found ...; check the repository id", for a repository the listing had found."""
    with LfsHub(REPO) as hub:
        del hub.repos["tiny/llama"]["model.safetensors"]
        with pytest.raises(PullError) as raised:
            pull("tiny/llama", endpoint=hub.endpoint)
    said = str(raised.value)
    assert said.startswith("the file model.safetensors of tiny/llama was not found on ")
    assert "the listing and the files disagree" in said and "check the repository id" not in said


def test_an_unknown_repository_still_asks_to_check_its_id():
    with LfsHub(REPO) as hub, pytest.raises(PullError, match=r"^the repository nobody/nothing was not found on .*; "
                                                             r"check the repository id"):
        pull("nobody/nothing", endpoint=hub.endpoint)


def test_a_file_longer_than_listed_gives_exact_bytes_when_the_rounded_sizes_agree():
    """It said "sent 1.0 MB of model.safetensors where it lists 1.0 MB"."""
    with LfsHub(REPO) as hub:
        hub.repos["tiny/llama"]["model.safetensors"] = WEIGHTS + b"x" * 10
        with pytest.raises(PullError, match=r"sent 1,048,586 bytes of model\.safetensors where it lists 1,048,576 "
                                            r"bytes; pull again to download it afresh"):
            pull("tiny/llama", endpoint=hub.endpoint)


def test_a_file_much_shorter_than_listed_keeps_the_rounded_sizes():
    with LfsHub(REPO) as hub:
        hub.repos["tiny/llama"]["model.safetensors"] = WEIGHTS[:1000]
        with pytest.raises(PullError, match=r"sent 1.0 kB of model\.safetensors where it lists 1.0 MB; pull again "
                                            r"to resume"):
            pull("tiny/llama", endpoint=hub.endpoint)


def test_a_failing_listing_says_try_again_not_resume():
    """Nothing was written before the listing: "pull again to resume" promised a resume there is none of."""
    with LfsHub(REPO) as hub:
        hub.api_status = 500
        with pytest.raises(PullError, match=r"500.*; try again later\.$") as raised:
            pull("tiny/llama", endpoint=hub.endpoint)
    assert "resume" not in str(raised.value)


def test_the_window_keeps_the_case_of_an_id_that_opens_a_message(qtbot):
    """The window said "Tiny/gen was not found": fmt.sentence capitalised the repository id."""
    from app.gui import models_page

    page = models_page.ModelsPage(confirm=lambda title, text: False)
    qtbot.addWidget(page)
    page._on_failed("tiny/gen was not found on http://x; check it.")
    assert page.pull_status.text() == "tiny/gen was not found on http://x; check it."
    page._on_failed("http://127.0.0.1:1 answers but went silent.")
    assert page.pull_status.text().startswith("http://127.0.0.1:1 answers")
    page._on_failed("cannot reach http://x (offline?).")
    assert page.pull_status.text() == "Cannot reach http://x (offline?)."


def test_the_window_shows_a_missing_file_as_the_pull_says_it(qtbot):
    from app.gui import models_page

    page = models_page.ModelsPage(confirm=lambda title, text: False)
    qtbot.addWidget(page)
    with LfsHub(REPO) as hub:
        del hub.repos["tiny/llama"]["model.safetensors"]
        page.repo_edit.setText("tiny/llama")
        page.endpoint_edit.setText(hub.endpoint)
        with qtbot.waitSignal(page.pull_ended, timeout=20000) as ended:
            assert page.start_pull()
    assert ended.args == ["failed"]
    assert page.pull_status.text().startswith("The file model.safetensors of tiny/llama was not found")



def test_the_time_left_is_not_made_up_before_any_byte_arrived():
    """A resumed pull printed "0% 262 B of 4.2 MB, 0 B/s, 0 s left" before its first new byte."""
    from app.model_pull import PullProgress

    waiting = PullProgress(total=4_200_000, done=262, started=0.0, resumed=262)
    assert waiting.line(now=1.0).endswith("0 B/s, time left not known yet")
    assert PullProgress(total=2_000, done=1_000, started=0.0).line(now=1.0).endswith(" left")
    assert "not known" not in PullProgress(total=2_000, done=1_000, started=0.0).line(now=1.0)
