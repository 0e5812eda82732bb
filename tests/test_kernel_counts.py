"""Kernels a decode token launches (deterministic counts on the CPU; what a GPU's host pays for in eager mode).

`benchmarks/kernel_counts.py` prints the table; these hold its two facts about Beamwise's own code."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.kernel_counts import WORKLOAD, count
from engine.bench import _load


@pytest.fixture(scope="module")
def counts():
    loaded = _load(replace(WORKLOAD, gen_tokens=8, step_tokens=4), plan_only=False)
    rows = count(loaded, replace(WORKLOAD, gen_tokens=8, step_tokens=4), ("generate", "lbs:inter_token", "in_device"))
    return {row.name: row for row in rows}, loaded.model.config.num_hidden_layers


def test_a_forward_call_through_sdpa_launches_what_plain_generates_does(counts):
    """The decode loop's forward calls (attention through SDPA, the cache an arena) add no kernel to the model's."""
    rows, _ = counts
    assert rows["generate"].tokens > 0 and rows["lbs:inter_token"].tokens > 0
    assert rows["lbs:inter_token"].in_forward == rows["generate"].in_forward


def test_cascade_attention_adds_at_most_15_kernels_a_layer(counts):
    """Reading a shared prefix and each parent's history once costs kernels: 39 more a layer than SDPA when each part
    had its own softmax merged by log-sum-exp and its keys were widened to float32 first; 14.5 with one softmax over
    the parts' scores and products that write float32 (CUDA's `bmm(..., out_dtype=)`). A 7B model has 32 layers."""
    rows, layers = counts
    extra = (rows["in_device"].in_forward - rows["lbs:inter_token"].in_forward) / layers
    assert 0 < extra <= 15, f"{extra:.1f} kernels a layer more than SDPA"
