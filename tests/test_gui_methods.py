"""The window and search methods: the picker builds the configs, the tree names DVTS subtrees and samples."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("PySide6")

from app.gui.controls import SearchControls
from app.session.tree import SearchTree
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.search import run

SMALL = SearchConfig(beams=2, width=2, step_tokens=3, max_steps=2, step_delimiter=None)


@pytest.mark.parametrize(("method", "lanes"), [("dvts", 2), ("best-of-n", 4), ("beam", 1)])
def test_tree_names_subtrees_and_samples(tiny, method, lanes):
    tree = SearchTree()
    tree.apply_many(run("What is 2+3?", tiny, dataclasses.replace(SMALL, method=method), CacheConfig()))
    nodes = [n for n in tree.candidates() if n.id >= 0]
    assert len({n.lane for n in nodes}) == lanes
    for node in nodes:
        if node.step > 1:
            assert node.lane == tree.node(node.parent).lane  # a subtree never mixes
    if method == "dvts":
        assert {n.lane for n in nodes} == {"subtree 1", "subtree 2"}


def test_controls_round_trip_method_lookahead_select_and_verify_skip(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    controls = SearchControls()
    qtbot.addWidget(controls)
    search = SearchConfig(method="beam", lookahead=2, select="weighted", verify_skip=True)
    controls.set_configs(ModelSpec(), search, CacheConfig())
    _, built, _ = controls.configs()
    assert (built.method, built.lookahead, built.select, built.verify_skip) == ("beam", 2, "weighted", True)
    assert "not calibrated" in controls.thresholds_label.text()
    controls.method.setCurrentIndex(controls.method.findData("dvts"))
    _, built, _ = controls.configs()
    assert built.method == "dvts" and built.lookahead == 0 and not controls.lookahead.isEnabled()
    assert controls.is_valid()


def test_controls_round_trip_the_entropy_exit_and_refuse_it_without_a_model_verifier(qtbot):
    controls = SearchControls()
    qtbot.addWidget(controls)
    controls.set_configs(ModelSpec(), SearchConfig(verifier="self-judge", entropy_exit=True), CacheConfig())
    _, built, _ = controls.configs()
    assert (built.verifier, built.entropy_exit) == ("self-judge", True) and controls.is_valid()
    controls.set_configs(ModelSpec(), SearchConfig(verifier="logprob"), CacheConfig())
    controls.entropy_exit.setChecked(True)
    assert not controls.is_valid() and "needs a verifier that runs a model" in controls.error_text()
    controls.entropy_exit.setChecked(False)
    assert controls.is_valid()


@pytest.mark.parametrize("prm, lens", [("tiny-qwen-prm", False), ("tiny-skywork-prm", False),
                                       ("tiny-math-shepherd", True), ("tiny-rlhflow-prm", True)])
def test_the_entropy_exit_is_refused_up_front_on_a_prm_with_a_reward_head(qtbot, tmp_path, prm, lens):
    from engine.verifiers.synthetic_prm import save_synthetic_prm

    controls = SearchControls()
    qtbot.addWidget(controls)
    folder = save_synthetic_prm(prm, tmp_path / prm)  # a folder's family is read from its config and weight names
    for source in (f"synthetic:{prm}", str(folder)):
        controls.set_configs(ModelSpec(), SearchConfig(verifier="prm", verifier_model=source, entropy_exit=True),
                             CacheConfig())
        assert controls.is_valid() is lens, controls.error_text()
        assert lens or ("reward head" in controls.error_text() and "Entropy exit" in controls.error_text())
        controls.entropy_exit.setChecked(False)
        assert controls.is_valid()


def test_the_window_shows_and_uses_the_calibrated_entropy_exit(qtbot, tmp_path, monkeypatch):
    from app.early_exit import Thresholds, save_thresholds

    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    save_thresholds(Thresholds(0.8, 0.2, 10, 0.3, 0.95, entropy_theta=3.25, entropy_delta=0.5, entropy_layers=30,
                               entropy_steps=12, entropy_mean_layer=20.0, entropy_agreement=0.9))
    controls = SearchControls()
    qtbot.addWidget(controls)
    controls.set_configs(ModelSpec(), SearchConfig(verifier="self-judge", entropy_exit=True), CacheConfig())
    assert "entropy exit θ 3.250, δ 0.500 (calibrated on 12 steps" in controls.thresholds_label.text()
    _, built, _ = controls.configs()
    assert (built.entropy_theta, built.entropy_delta, built.tau_conf) == (3.25, 0.5, 0.8)


def test_greedy_greys_out_and_leaves_out_what_it_ignores(qtbot, tmp_path, monkeypatch):
    """Greedy took the window's temperature, top-p and vote and recorded them, where `run --method greedy` refuses
    them: "Run again" of such a session as a command line was refused. The controls grey out and keep their values
    for the other methods."""
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    controls = SearchControls()
    qtbot.addWidget(controls)
    search = SearchConfig(method="beam", temperature=0.5, top_p=0.9, select="majority")
    controls.set_configs(ModelSpec(), search, CacheConfig())
    controls.method.setCurrentIndex(controls.method.findData("greedy"))
    _, built, _ = controls.configs()
    default = SearchConfig()
    assert (built.temperature, built.top_p, built.select) == (default.temperature, default.top_p, default.select)
    assert not any(c.isEnabled() for c in (controls.temperature, controls.top_p, controls.select))
    controls.method.setCurrentIndex(controls.method.findData("best-of-n"))
    _, built, _ = controls.configs()
    assert (built.temperature, built.top_p, built.select) == (0.5, 0.9, "majority")
    assert all(c.isEnabled() for c in (controls.temperature, controls.top_p, controls.select))
