"""The verifier's KV share with the PRM on the CPU: its KV is in CPU memory, outside the device budget, so the
window greys the share out and leaves it out of the configs (it ran, and recorded, a share that did nothing), as
`run --verifier-device cpu --verifier-kv-share` is refused."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from app.gui.controls import SearchControls
from engine.config import CacheConfig, ModelSpec, SearchConfig

PRM = SearchConfig(verifier="prm", verifier_model="synthetic:tiny-math-shepherd")


def test_the_share_is_greyed_and_left_out_while_the_prm_runs_on_the_cpu(qtbot):
    controls = SearchControls()
    qtbot.addWidget(controls)
    controls.set_configs(ModelSpec(), PRM, CacheConfig(verifier_kv_share=0.25))
    _, _, cache = controls.configs()
    assert cache.verifier_kv_share == 0.25 and controls.verifier_share.isEnabled()
    controls.verifier_on_cpu.setChecked(True)
    _, search, cache = controls.configs()
    assert search.verifier_device == "cpu" and cache.verifier_kv_share is None
    assert not controls.verifier_share.isEnabled() and controls.is_valid()
    controls.verifier_on_cpu.setChecked(False)  # the slider kept its value for the PRM on the GPU
    _, _, cache = controls.configs()
    assert cache.verifier_kv_share == 0.25 and controls.verifier_share.isEnabled()
