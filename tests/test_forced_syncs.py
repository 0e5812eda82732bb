"""Teacher forcing's buffers reach the device like the step's others: no blocking copy (tests/test_decode_syncs.py)."""

from __future__ import annotations

from engine.runner import decode_step
from tests.test_decode_loop import decode, group, rules_for
from tests.test_decode_syncs import traffic  # noqa: F401 (a fixture)


def test_a_teacher_forced_steps_tokens_reach_the_device_without_a_blocking_copy(tiny, traffic):  # noqa: F811
    """`forced_tokens` built its tokens and where they apply on the host and copied them with `.to(device)`:
    two blocking copies per step and group on CUDA (engine/step_buffers.py)."""
    sampling = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 16}
    reference = decode(tiny, [3, 8], rules_for(tiny, **sampling), seed=1)
    rules = rules_for(tiny, forced={3: tuple(reference[3].sampled[:5])}, **sampling)
    cache, mask, rows = group(tiny, [3, 8], seed=2)
    with traffic:
        results, _ = decode_step(tiny.model, cache, mask, rows, rules)
    assert results[0].sampled[:5] == reference[3].sampled[:5]  # forced: another seed's tokens
    assert traffic.listed("step") == [], traffic.listed("step")
