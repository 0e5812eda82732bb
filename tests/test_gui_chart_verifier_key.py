"""The "KV vs budget" chart's key put the verifier's share of the budget beside its device KV curve as if it were
the curve's value ("verifier device KV 335.9 kB" over a curve at 65-115 kB). The key now says it is the share."""

from __future__ import annotations

from app.gui.charts import ChartsPanel
from engine import events as ev

SHARE = 335_900


def test_the_verifier_share_in_the_key_is_said_to_be_the_share(qtbot):
    charts = ChartsPanel()
    qtbot.addWidget(charts)
    for step, used in enumerate((65_000, 115_000, 90_000), start=1):
        charts.apply(ev.MemorySnapshot(step, True, 3_600_000, 200_000, 0, 250_000, (), SHARE, used, 0, used))
    charts.flush()
    title = charts.title("device")
    assert "━ verifier KV (share 335.9 kB) ┅ verifier host KV" in title, title
    assert "verifier device KV 335.9 kB" not in title and "┅ budget 3.6 MB" in title
    _, drawn = charts.curves["verifier_device"].getData()
    assert max(drawn) < SHARE  # the curve is what the verifier's KV uses, under the share the key names


def test_a_run_whose_verifier_keeps_no_kv_names_no_share(qtbot):
    charts = ChartsPanel()
    qtbot.addWidget(charts)
    charts.apply(ev.MemorySnapshot(1, True, 3_600_000, 200_000, 0, 250_000, ()))
    charts.flush()
    assert "verifier" not in charts.title("device")
