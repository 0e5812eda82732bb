"""Speculation and lbs's groups: a child that adopts its parent's run starts its next step with that KV in its row,
so the step's group needs more room than without speculation, and under a tight budget lbs plans it in more groups.

The works below are step 3 of `bench --model synthetic:tiny-llama --beams 4 --width 2 --step-tokens 16
--gen-tokens 48 --prompt-tokens 64 --kv-budget 300kB --step-delimiter auto --policies
lbs:+prefix_order,lbs:+speculative` (tiny-llama in float32: 768 bytes of KV a token, blocks of 16): without
speculation one group, with it two.
"""

from __future__ import annotations

from pathlib import Path

from engine.kv.lbs import Switches, group_bytes, plan_lbs
from engine.kv.policy import Work

TOKEN_BYTES, BLOCK, STEP, BUDGET = 768, 16, 16, 294_912  # the 300 kB budget in whole slots
SWITCHES = Switches(inter_beam=True, balanced_prefetch=True, prefix_order=True)
README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _siblings(first: int, table: tuple[int, ...], tokens: int, source: int) -> list[Work]:
    return [Work(first, table, tokens, source), Work(first + 1, table, tokens, source)]


PLAIN = [
    *_siblings(17, (0, 1, 2, 7, 8, 29), 95, 16),
    *_siblings(19, (0, 1, 2, 9, 10, 26), 82, 14),  # an early delimiter: 2 tokens in their shared tail
    *_siblings(21, (0, 1, 2, 11, 12, 23), 95, 12),
    *_siblings(23, (0, 1, 2, 15, 18, 19), 95, 9),
]
# With speculation 19 and 20 adopted their parent's runs (10 and 2 tokens of their step): each its own tail copy
ADOPTED = [*PLAIN[:2], Work(19, (0, 1, 2, 9, 10, 31), 92, 14), Work(20, (0, 1, 2, 9, 10, 32), 84, 14), *PLAIN[4:]]


def test_adopted_runs_widen_every_row_of_the_group_by_the_longest_speculated_tail():
    """Rows are left-padded to the longest row's own tokens, then a whole step: row 19's own 12 tokens (its
    parent's 2 no longer shared with its sibling, 10 speculated) widen all 8 rows by 12 columns."""
    widened = group_bytes(ADOPTED, STEP, TOKEN_BYTES, BLOCK) - group_bytes(PLAIN, STEP, TOKEN_BYTES, BLOCK)
    assert widened == 8 * 12 * TOKEN_BYTES
    assert group_bytes(PLAIN, STEP, TOKEN_BYTES, BLOCK) <= BUDGET < group_bytes(ADOPTED, STEP, TOKEN_BYTES, BLOCK)


def test_a_tight_budget_plans_a_step_with_adopted_runs_in_more_groups():
    assert len(plan_lbs(PLAIN, BUDGET, STEP, TOKEN_BYTES, SWITCHES, 0, BLOCK).groups) == 1
    assert len(plan_lbs(ADOPTED, BUDGET, STEP, TOKEN_BYTES, SWITCHES, 0, BLOCK).groups) == 2
    roomy = 600_000 // (BLOCK * TOKEN_BYTES) * BLOCK * TOKEN_BYTES  # 600 kB: one group either way
    assert len(plan_lbs(ADOPTED, roomy, STEP, TOKEN_BYTES, SWITCHES, 0, BLOCK).groups) == 1


def test_the_readme_says_speculation_may_take_more_groups_not_that_a_step_never_takes_more_forward_calls():
    flat = " ".join(README.split())
    assert "a step never takes more forward calls" not in flat
    assert "`lbs` may then plan it in more groups, with more forward calls" in flat
