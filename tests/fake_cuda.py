"""A CPU fake of the CUDA streams the KV store uses (engine/kv/streams.py), for tests of the CUDA-only branches.

It runs copies as late as CUDA may run them, so a consumer that does not wait reads stale data, and
it checks the ordering rules that a real GPU would break silently:

- The compute stream's kernels run on the CPU when issued (they are ordinary torch calls); its copies
  to the host are asynchronous, so they are held back (their source read now, in stream order) until
  something orders them: a later copy of that stream touching the same memory, a stream waiting for
  it, or `synchronize`.
- The copy stream runs nothing when issued: its copies wait in a queue and read their source when
  they run, which is when compute waits for an event recorded after them (`wait_event`), or at
  `synchronize`. A `wait_stream` on the copy stream queues a barrier that releases the compute
  stream's held copies first.
- A copy issued on the compute stream, or by the host (`host_copy`), that touches memory a queued
  copy of another stream writes (or writes memory one reads) is a race: `HazardError`.
- Waiting on an event that was never recorded (CUDA would not wait), or reading `elapsed_time` of an
  event not recorded, not timed, or not completed, is an error.
- Host memory that an asynchronous copy reads or writes should be pinned (`empty_host`); other host
  memory makes that copy synchronous on CUDA: such copies are listed in `unpinned`.
- With `staged=True`, a copy across PCIe whose host side is not contiguous goes as PyTorch sends it
  (aten/src/ATen/native/cuda/Copy.cu, `copy_requires_temporaries`): through a contiguous temporary in
  pageable host memory, so its host side is read (host to device) by the host when the copy is issued, or
  written (device to host) once the host has waited for the stream up to it. Such copies are listed in
  `staged`; reading host memory that a queued copy still writes is a race. (A strided *device* side only
  costs a contiguous temporary on the device: the pinned host side still crosses asynchronously.)

Pinned memory is counted as torch's caching host allocator holds it (tests/fake_pinned.py).

Elapsed times are fake milliseconds: each copy adds its megabytes plus one microsecond to its
stream's clock, and a stream that waits takes the clock of what it waited for.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.fake_pinned import PinnedModel

_QUEUED: weakref.WeakSet = weakref.WeakSet()  # the fakes whose copy stream has copies queued: what kernels meet
_inside = [0]  # > 0 while a fake runs its own torch calls (its copies, clones and checks are not the engine's kernels)


def _internal(method):
    """A FakeCuda method whose own torch calls are the fake's, not kernels of the code under test."""

    @functools.wraps(method)
    def wrapped(*args, **kwargs):
        _inside[0] += 1
        try:
            return method(*args, **kwargs)
        finally:
            _inside[0] -= 1

    return wrapped


class HazardError(AssertionError):
    """Two streams (or a stream and the host) touch the same memory with no order between them."""


@dataclass
class Access:
    """The memory one queued copy reads or writes."""

    tensor: torch.Tensor
    write: bool


@dataclass
class Op:
    index: int
    run: Callable[[], None]
    accesses: list[Access] = field(default_factory=list)
    label: str = ""


class FakeStream:
    def __init__(self, fake: FakeCuda, name: str) -> None:
        self.fake, self.name = fake, name
        self.queue: deque[Op] = deque()  # issued, not yet run
        self.issued = 0  # ops issued so far: an event records this position
        self.clock = 0.0  # fake milliseconds of the work issued on this stream

    def __repr__(self) -> str:
        return f"<fake {self.name} stream>"

    def push(self, op: Op) -> None:
        self.queue.append(op)
        if self is self.fake.copy_stream:
            _QUEUED.add(self.fake)

    def next_index(self) -> int:
        index, self.issued = self.issued, self.issued + 1
        return index

    @_internal
    def run_until(self, position: int) -> None:
        """Run every queued op issued before `position` (as CUDA would have, whatever the host's autograd mode)."""
        with torch.inference_mode():
            while self.queue and self.queue[0].index < position:
                self.queue.popleft().run()
        if not self.queue:
            _QUEUED.discard(self.fake)

    def completed(self, position: int) -> bool:
        return not self.queue or self.queue[0].index >= position

    def wait_stream(self, other: FakeStream) -> None:
        self.fake.wait(self, other, other.issued, other.clock)

    def wait_event(self, event: FakeEvent) -> None:
        if event.stream is None:
            raise HazardError("waiting on an event that was never recorded: CUDA would not wait at all")
        self.fake.wait(self, event.stream, event.position, event.time)


class FakeEvent:
    def __init__(self, fake: FakeCuda, timing: bool) -> None:
        self.fake, self.timing = fake, timing
        self.stream: FakeStream | None = None
        self.position = 0
        self.time = 0.0

    def record(self, stream: FakeStream | None = None) -> None:
        self.stream = stream or self.fake.current
        self.position, self.time = self.stream.issued, self.stream.clock
        self.fake.recorded += 1

    def elapsed_time(self, end: FakeEvent) -> float:
        for event in (self, end):
            if not event.timing:
                raise HazardError("elapsed_time of an event made without enable_timing=True")
            if event.stream is None:
                raise HazardError("elapsed_time of an event that was never recorded")
            if not event.stream.completed(event.position):
                raise HazardError("elapsed_time of an event that has not completed (synchronize first)")
        return end.time - self.time


class FakeCuda:
    """Has the methods of engine.kv.streams.CudaStreams; see the module's docstring."""

    def __init__(self, staged: bool = False) -> None:
        self.staged_model = staged  # model PyTorch's temporaries for non-contiguous PCIe copies
        self.staged: list[str] = []  # PCIe copies that went through a pageable temporary
        self.compute = FakeStream(self, "compute")
        self.copy_stream = FakeStream(self, "copy")
        self.current = self.compute
        self.pinned: set[int] = set()  # storages made by empty_host
        self.allocator = PinnedModel()  # what torch's caching host allocator would hold for them
        self.unpinned: list[str] = []  # asynchronous copies whose host side was not pinned
        self.copies = {"compute": 0, "copy": 0, "host": 0}  # copies issued by each
        self.recorded = 0  # events recorded
        self.waits = 0  # waits that had to run queued copies of another stream
        self.syncs = 0

    # -- the methods of CudaStreams ---------------------------------------------------------------
    def current_stream(self) -> FakeStream:
        return self.current

    @contextlib.contextmanager
    def stream(self, stream: FakeStream):
        before, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = before

    def event(self, timing: bool = False) -> FakeEvent:
        return FakeEvent(self, timing)

    @_internal
    def empty_host(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        tensor = torch.empty(shape, dtype=dtype)
        self.pinned.add(_storage(tensor))
        return self.allocator.take(tensor)

    @_internal
    def release_host_cache(self) -> None:
        self.allocator.release()

    @_internal
    def copy(self, dst: torch.Tensor, src: torch.Tensor, direction: str) -> None:
        host = {"h2d": src, "d2h": dst}.get(direction)
        if host is not None and _storage(host) not in self.pinned:
            self.unpinned.append(f"{direction} of {tuple(host.shape)} on the {self.current.name} stream")
        stream = self.current
        self.copies[stream.name] += 1
        stream.clock += src.numel() * src.element_size() / 1e6 + 1e-3
        index = stream.next_index()
        label = f"{direction} {tuple(src.shape)} (op {index} of the {stream.name} stream)"
        if host is not None and self.staged_model and not host.is_contiguous():
            self.staged.append(label)
            if direction == "d2h":  # the host waits for the stream up to this copy, then writes `dst` itself
                stream.run_until(index)
                for other in (self.compute, self.copy_stream):
                    self._check(other, src, dst, f"{label}, its host side written by the host")
                dst.copy_(src)
                return
            for other in (self.compute, self.copy_stream):  # the host reads `src` now, into a temporary
                self._check(other, src, src.new_empty(0), f"{label}, its host side read by the host")
            src = src.clone()
        if stream is self.copy_stream:  # runs when something waits for it, reading its source then
            accesses = [Access(src, False), Access(dst, True)]
            stream.push(Op(index, lambda: dst.copy_(src), accesses, label))
            return
        self._check(self.copy_stream, src, dst, label)
        self.compute.run_until(self._last_touching(self.compute, src, dst) + 1)  # in stream order
        if direction == "d2h":  # the host sees it only once something orders it
            held = src.clone()
            stream.push(Op(index, lambda: dst.copy_(held), [Access(dst, True)], label))
        else:
            dst.copy_(src)

    @_internal
    def host_copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        self.copies["host"] += 1
        label = f"h2h {tuple(src.shape)} by the host"
        for stream in (self.compute, self.copy_stream):
            self._check(stream, src, dst, label)
        dst.copy_(src)

    @_internal
    def synchronize(self) -> None:
        self.syncs += 1
        self.copy_stream.run_until(self.copy_stream.issued)
        self.compute.run_until(self.compute.issued)

    # -- ordering ---------------------------------------------------------------------------------
    @_internal
    def wait(self, waiter: FakeStream, target: FakeStream, position: int, time: float) -> None:
        """`waiter`'s later work runs after `target`'s first `position` ops."""
        waiter.clock = max(waiter.clock, time)
        if waiter is target:
            return
        if waiter is self.compute:  # compute runs now: what it waits for must have run
            if not target.completed(position):
                self.waits += 1
            target.run_until(position)
            return
        index = waiter.next_index()  # the copy stream runs later: a barrier in its queue
        waiter.push(Op(index, lambda: target.run_until(position), [], f"wait for {target.name} op {position}"))

    def check_kernel(self, name: str, reads: list[torch.Tensor], writes: list[torch.Tensor]) -> None:
        """A kernel launched now (a torch call of the code under test), on the stream current for this fake: on
        the compute stream it has no order with the copy stream's queued copies, so it must not read memory one
        of them writes, nor write memory one of them reads or writes."""
        queue = self.copy_stream.queue
        if self.current is self.copy_stream or not queue:
            return  # queued behind those copies, or none is queued
        touched = {_storage(access.tensor) for op in queue for access in op.accesses}
        if not any(_storage(t) in touched for t in (*reads, *writes)):
            return
        for op in queue:
            for access in op.accesses:
                kind = "writes" if access.write else "reads"
                where = f"{name} on the compute stream"
                if any(_overlap(access.tensor, t) for t in writes):
                    raise HazardError(f"{where} writes memory that {op.label}, still queued, {kind}")
                if access.write and any(_overlap(access.tensor, t) for t in reads):
                    raise HazardError(f"{where} reads memory that {op.label}, still queued, writes")

    def _check(self, stream: FakeStream, src: torch.Tensor, dst: torch.Tensor, label: str) -> None:
        """Raise if `src` or `dst` meets memory that a queued op of `stream` writes, or `dst` meets memory it reads."""
        for op in stream.queue:
            for access in op.accesses:
                if _overlap(access.tensor, dst) or (access.write and _overlap(access.tensor, src)):
                    kind = "writes" if access.write else "reads"
                    raise HazardError(f"{label} touches memory that {op.label}, still queued, {kind}")

    @staticmethod
    def _last_touching(stream: FakeStream, *tensors: torch.Tensor) -> int:
        """The index of the last queued op of `stream` that touches any of `tensors` (-1: none)."""
        hits = [op.index for op in stream.queue for a in op.accesses if any(_overlap(a.tensor, t) for t in tensors)]
        return max(hits, default=-1)

    def ready(self, tensor: torch.Tensor) -> bool:
        """Whether no queued copy of either stream writes `tensor` (compute may read it now)."""
        return not any(
            access.write and _overlap(access.tensor, tensor)
            for stream in (self.compute, self.copy_stream)
            for op in stream.queue
            for access in op.accesses
        )


def _storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two views share an element (exact for views of one storage of one element size)."""
    if a.is_meta or b.is_meta or _storage(a) != _storage(b) or a.numel() == 0 or b.numel() == 0:
        return False
    size = a.element_size()
    lo_a, hi_a = _span(a)
    lo_b, hi_b = _span(b)
    if hi_a <= lo_b or hi_b <= lo_a:
        return False
    if b.element_size() != size:
        return True  # different views of the same bytes: assume they meet
    marks = torch.zeros(a.untyped_storage().nbytes() // size, dtype=torch.bool)
    marks.as_strided(a.shape, a.stride(), a.storage_offset()).fill_(True)
    return bool(marks.as_strided(b.shape, b.stride(), b.storage_offset()).any())


def _span(t: torch.Tensor) -> tuple[int, int]:
    """First and one past the last element of the storage that `t` reaches (in elements)."""
    start = t.storage_offset()
    return start, start + 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True) if n > 0)


class Fakes:
    """While `on`, every KV store (or verifier pool) made runs its CUDA branches through a new FakeCuda (kept in
    `made`), which also copies PyTorch's pageable temporaries for PCIe copies whose sides are not both
    contiguous. Tests put `streams_for` where the module under test looks it up."""

    def __init__(self) -> None:
        self.on, self.made = False, []

    def streams_for(self, device: torch.device):
        if not self.on or device.type == "meta":
            return None
        self.made.append(FakeCuda(staged=True))
        return self.made[-1]


class KernelWatch(TorchDispatchMode):
    """While active, every torch call of the code under test is a kernel on the stream current for each
    FakeCuda with copies queued, checked against that fake's queued copy-stream copies (`FakeCuda.check_kernel`).
    The fakes check copies themselves; this finds compute kernels (`zero_`, `index_select(out=)`, a decode's writes
    into an arena) that touch memory a queued copy still reads or writes. Views and metadata read nothing."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _QUEUED and not _inside[0] and not _is_view(func):
            waiting = [f for f in _QUEUED if f.current is not f.copy_stream]
            if waiting:
                reads, writes = _kernel_accesses(func, args, kwargs)
                for fake in waiting:
                    fake.check_kernel(str(func.overloadpacket), reads, writes)
        return func(*args, **kwargs)


@functools.cache
def _is_view(func) -> bool:
    returns = func._schema.returns
    return bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write


def _kernel_accesses(func, args, kwargs) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The tensors a call reads and those it writes (its schema's mutable arguments, `out=` included)."""
    reads, writes = [], []
    for index, argument in enumerate(func._schema.arguments):
        value = args[index] if index < len(args) else kwargs.get(argument.name)
        tensors = [t for t in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(t, torch.Tensor)]
        written = argument.alias_info is not None and argument.alias_info.is_write
        (writes if written else reads).extend(t for t in tensors if not t.is_meta)
    return reads, writes

