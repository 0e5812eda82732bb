"""Host synchronisations of the decode loop that only a GPU would pay, counted on the CPU.

On CUDA the host stands still until the device has finished everything queued whenever it copies host memory to
the device with `non_blocking=False` (`torch.tensor(values, device=cuda)`, `host_tensor.to(cuda)`,
`device_tensor[i] = host_tensor`: aten's copy then calls cudaStreamSynchronize) or reads a device value. On the
CPU none of these waits, so the CPU tests cannot see them; they can count them. `HostTraffic` counts each such
call by phase: "forward" (inside the model's forward calls), "record" (the sync every `sync_every` forwards, which
must read the tokens) and "step" (the rest of `decode_step`, once per step and group or per speculative run).
A tensor counts as host memory when Beamwise built it from host data (`torch.tensor`/`zeros`/`ones`/`empty`
without a device, or the draws `engine.rng.uniforms` returns). A non-blocking copy
(`engine.kv.streams.device_tensor`, `.to(device, non_blocking=True)`) is not counted.

`allocate_buffers` moved a step's pending tokens, positions and draws with three blocking copies, and `_begin_run`
each child's run's positions and draws with two more; none is left. `step_mask` read whether the mask had padding
once a step (the policies that pass a mask know that on the host; only the layer-wise baseline reads it, in
`engine/kv/layerwise.py`), and `record` read the results at each sync in three copies (one now).
"""

from __future__ import annotations

import collections
import dataclasses
import traceback

import pytest
import torch
from torch.overrides import TorchFunctionMode

import engine.runner as runner
import engine.speculative_runs as speculative_runs
from engine.runner import decode_step
from tests.test_decode_loop import group, rules_for

READS = {torch.Tensor.__bool__, torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.cpu, torch.Tensor.numpy,
         torch.Tensor.__int__, torch.Tensor.__float__, torch.Tensor.__index__}
HOST_FACTORIES = {torch.tensor, torch.zeros, torch.ones, torch.empty, torch.full}


def _site() -> str:
    """The innermost frame in Beamwise or transformers that made the call."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        name = frame.filename.replace("\\", "/")
        if "/tests/" in name or "torch/" in name:
            continue
        if "/engine/" in name or "transformers/" in name:
            return f"{name.split('site-packages/')[-1].split('/engine/', 1)[-1]}:{frame.lineno} ({frame.name})"
    return "?"


def _names_a_device(args, kwargs) -> bool:
    """Whether a `Tensor.to` call names a device (not only a dtype)."""
    given = [*args, kwargs.get("device")]
    return any(isinstance(a, (str, torch.device, torch.Tensor)) for a in given)


class HostTraffic(TorchFunctionMode):
    """Counts the calls that synchronize the host with the device on CUDA, by phase and call site."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "step"
        self.host: dict[int, torch.Tensor] = {}  # host-made tensors, kept alive so their ids stay theirs
        self.calls: collections.Counter = collections.Counter()

    def mark_host(self, tensor: torch.Tensor) -> torch.Tensor:
        self.host[id(tensor)] = tensor
        return tensor

    def _is_host(self, value) -> bool:
        return isinstance(value, torch.Tensor) and id(value) in self.host

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        what = None
        if func in READS:
            what = f"reads a device value ({func.__name__})"
        elif func in HOST_FACTORIES:
            if kwargs.get("device") is None:
                self.mark_host(out)
            elif func is torch.tensor:
                what = "torch.tensor(..., device=...) (a blocking copy)"
        elif func is torch.Tensor.to and self._is_host(args[0]) and _names_a_device(args[1:], kwargs):
            self.host.pop(id(out), None)  # it is on the device now (on the CPU `.to(cpu)` returns the same tensor)
            blocking = not kwargs.get("non_blocking", False) and not any(a is True for a in args[2:])
            if blocking:
                what = "host_tensor.to(device) (a blocking copy)"
        elif func is torch.Tensor.copy_ and self._is_host(args[1]) and not kwargs.get("non_blocking", False):
            what = "device.copy_(host_tensor) (a blocking copy)"
        elif func is torch.Tensor.__setitem__ and self._is_host(args[2]):
            what = "device[...] = host_tensor (a blocking copy)"
        elif func is torch.Tensor.__getitem__ and self._is_host(args[0]) and isinstance(out, torch.Tensor):
            self.mark_host(out)
        if what is not None:
            self.calls[(self.phase, what, _site())] += 1
        return out

    def count(self, phase: str) -> int:
        return sum(n for (p, _, _), n in self.calls.items() if p == phase)

    def listed(self, phase: str) -> list[str]:
        return [f"{site}: {what} x{n}" for (p, what, site), n in sorted(self.calls.items()) if p == phase]


@pytest.fixture
def traffic(tiny, monkeypatch):
    """A `HostTraffic` that knows the forward calls, the records and the draws of `tiny`'s decodes."""
    watch = HostTraffic()
    counts = {"forwards": 0, "records": 0}

    def before(_module, _args, _kwargs):
        watch.phase = "forward"
        counts["forwards"] += 1

    def after(_module, _args, _kwargs, _out):
        watch.phase = "step"

    handles = [tiny.model.register_forward_pre_hook(before, with_kwargs=True),
               tiny.model.register_forward_hook(after, with_kwargs=True)]
    record, uniforms = runner.record, runner.uniforms

    def watched_record(*args, **kwargs):
        counts["records"] += 1
        watch.phase = "record"
        try:
            return record(*args, **kwargs)
        finally:
            watch.phase = "step"

    monkeypatch.setattr(runner, "record", watched_record)
    monkeypatch.setattr(runner, "uniforms", lambda *a, **k: watch.mark_host(uniforms(*a, **k)))
    monkeypatch.setattr(speculative_runs, "uniforms", lambda *a, **k: watch.mark_host(uniforms(*a, **k)))  # child runs
    watch.counts = counts
    yield watch
    for handle in handles:
        handle.remove()


def padded_decode(tiny, traffic: HostTraffic, **rules) -> None:
    """Candidates 3 and 8 (prompts of 5 and 2 KV tokens: a padded group, so a mask), 16 forward calls."""
    cache, mask, rows = group(tiny, [3, 8])
    traffic.counts.update(forwards=0, records=0)
    with traffic:
        decode_step(tiny.model, cache, mask, rows, rules_for(tiny, max_tokens=16, **rules), sync_every=8)
    assert traffic.counts["forwards"] == 16


def test_a_padded_groups_forward_calls_read_nothing_back_from_the_device(tiny, traffic):
    """Given a 2D mask, transformers asked on every forward call whether any row was padded (`padding_mask.all()`
    read on the host): a host sync per token for the rest of any step whose rows differ in length (a step
    delimiter, speculation's runs). The 4D boolean mask `[B, 1, 1, T + j + 1]` is taken as it is."""
    padded_decode(tiny, traffic)
    assert traffic.count("forward") == 0, traffic.listed("forward")


def test_a_steps_buffers_reach_the_device_without_blocking_copies_or_reads(tiny, traffic):
    """Per step and group, outside its forward calls and syncs, the pending tokens, positions and draws cross
    without a blocking copy, and nothing is read back (the mask was read once a step to see if it had padding)."""
    padded_decode(tiny, traffic, temperature=1.0, top_p=1.0)
    assert traffic.listed("step") == []


def test_each_sync_reads_the_results_in_one_copy(tiny, traffic):
    """The tokens, log-probs and top-1 probabilities of the forwards since the last sync cross in one copy (three
    before), the only wait for the device in 8 forward calls."""
    padded_decode(tiny, traffic)
    assert traffic.counts["records"] == 2
    (read,) = traffic.listed("record")
    assert read.endswith("(_host_results): reads a device value (tolist) x2"), read


def test_starting_a_childs_run_makes_no_blocking_copy(tiny, traffic):
    """A row that starts another child's run (FlashTTS's M_i > 1) writes that run's positions and draws into the
    step's buffers without waiting for the device (two blocking copies per run begun, before)."""
    candidates = [3, 8, 11, 13, 14, 15, 16]
    rules = rules_for(tiny, delimiter="c", max_tokens=10, speculate=3, temperature=1.0, top_p=1.0)
    cache, mask, rows = group(tiny, candidates, seed=2)
    rows = [dataclasses.replace(row, continuations=3) for row in rows]
    traffic.counts.update(forwards=0, records=0)
    with traffic:
        results, _ = decode_step(tiny.model, cache, mask, rows, rules)
    assert sum(len(r.aheads) > 1 for r in results) >= 2, "pick a seed where rows go on to a second child"
    runs = [site for site in traffic.listed("step") if "(_begin_run)" in site or "(start_runs)" in site]
    assert runs == [], runs
