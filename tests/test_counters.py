"""The KV store's byte counters on their own: totals, the step, and each candidate's exact share."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engine.kv.store import DIRECTIONS, Counters


def test_a_copy_counts_in_the_total_and_the_step():
    c = Counters()
    c.add("h2d", 1000, owners=(1,))
    c.add("h2d", 24)
    c.add("d2h", 7, owners=(2,))
    assert c.total == {"h2d": 1024, "d2h": 7, "d2d": 0, "h2h": 0}
    assert c.step == c.total
    assert set(c.total) == set(DIRECTIONS)
    assert c.calls == c.step_calls == {"h2d": 2, "d2h": 1, "d2d": 0, "h2h": 0}  # one call per copy


def test_a_new_step_keeps_the_totals_and_clears_the_step():
    c = Counters()
    c.add("h2d", 10, owners=(1,))
    c.step_copy_seconds = 0.5
    c.start_step()
    c.add("h2d", 5, owners=(2,))
    assert c.total["h2d"] == 15 and c.step["h2d"] == 5
    assert c.calls["h2d"] == 2 and c.step_calls["h2d"] == 1
    assert c.step_copy_seconds == 0.0
    assert dict(c.per_candidate()) == {2: {"h2d": 5, "d2h": 0, "d2d": 0, "h2h": 0}}  # candidate 1 was last step


def test_a_shared_copy_is_split_evenly_and_the_first_owners_take_the_remainder():
    c = Counters()
    c.add("h2d", 10, owners=(7, 8, 9))  # 3 + 1, 3, 3
    c.add("h2d", 4, owners=(9,))
    shares = c.per_candidate()
    assert [shares[i]["h2d"] for i in (7, 8, 9)] == [4, 3, 7]


def test_bytes_without_owners_count_for_the_step_but_nobody_in_particular():
    c = Counters()
    c.add("d2d", 64)
    assert c.step["d2d"] == 64 and dict(c.per_candidate()) == {}


@given(st.lists(st.tuples(st.sampled_from(DIRECTIONS), st.integers(0, 10**9),
                          st.lists(st.integers(0, 20), min_size=1, max_size=6, unique=True)), max_size=30))
def test_per_candidate_shares_sum_exactly_to_the_step(copies):
    c = Counters()
    for direction, nbytes, owners in copies:
        c.add(direction, nbytes, owners=owners)
    shares = c.per_candidate()
    for direction in DIRECTIONS:
        assert sum(s[direction] for s in shares.values()) == c.step[direction]
