"""`headwise`: HeadInfer's head-wise offloading; one group of KV heads of one layer is on the device at a time.

Blocks rest on the host. A step runs group by group of candidates (LBS grouping, only when a
step's candidates do not fit together); within a group all candidates advance token by
token, and each layer's attention runs head group by head group through two alternating
device buffers (engine/kv/head_stream.py). A group's past KV is the shared prefix (the
leading blocks every member's table has, in consecutive host slots, read in place) and each
member's own blocks, gathered once per step into a host arena left-padded to `W` columns.
The head-group size `g` adapts to the budget: the largest of 8, 4, 2, 1 heads that divides
the model's KV heads and whose two buffers fit. At the step's end each member's new tokens go
from the arena into its blocks.

Bytes (exact; `KV_token` = K and V of one token over all layers, `H` KV heads). A group of `B`
candidates with a shared prefix of `P` tokens and own parts padded to `W` tokens, decoding `k`
forward calls (a prefix that fills its host run but for under a block, as the prompt's full blocks
do, is copied with that tail where the budget has room for it at the plan's groups and head-group
size: attention does not read it, `P` counts the run's tokens then, and the prefix crosses as one
piece per layer and head group instead of one per head):

    H2D of forward j (j = 0 .. k-1) = (P + B * (W + j)) * KV_token
    D2H of forward j                = B * KV_token                          (each row's new token)
    device buffers                  = 2 * g * (P + B * (W + k)) * KV_token / (L * H)

Without a shared prefix (inter-beam off) and with fixed-length steps, the whole request moves
the paper's Eq. 3 with no layer resident, `DM_req = sum_{i=0}^{N_gen-1} N_beam * (S + i) * KV_token`
(`S` the prompt's KV tokens), the same bytes as layer-wise with every layer streamed, in buffers
`g / H` of one layer's size (layer-wise stages two whole layers): what lets a context far longer
than the device run. Inter-beam
reads the shared prompt once per group and forward instead of once per row.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import torch

from engine.errors import KVBudgetTooSmall
from engine.kv.attention import ATTENTION, padding_mask
from engine.kv.blocks import Tier
from engine.kv.head_stream import BUFFERS, HeadStream
from engine.kv.policy import (
    OUT_OF_MEMORY,
    Group,
    GroupDone,
    Live,
    PolicyContext,
    StepPlan,
    StepTiming,
    Work,
    block_placement,
    common_prefix,
    group_done,
    split_for_retry,
)
from engine.kv.streams import filling_pinned_block
from engine.rows import Row

HEAD_GROUPS = (8, 4, 2, 1)  # head-group sizes tried, largest first


def head_group_sizes(num_kv_heads: int) -> list[int]:
    """The sizes of HEAD_GROUPS that divide the model's KV heads, largest first (1 always does)."""
    return [g for g in HEAD_GROUPS if g <= num_kv_heads and num_kv_heads % g == 0]


def buffer_bytes(heads: int, prefix: int, rows: int, width: int, head_token_bytes: int) -> int:
    """Device bytes of the two buffers: `heads` KV heads of a prefix and of `rows` rows of `width` columns."""
    return BUFFERS * heads * (prefix + rows * width) * head_token_bytes


def least_budget(body_tokens: int, longest: int, block_size: int, head_token_bytes: int, block_bytes: int) -> int:
    """The budget under which no part of a search is refused: one KV head of the prompt's host run (its
    `body_tokens` in whole blocks, the prefill's need) and of one candidate at its longest (`longest` columns:
    its KV and the last step's tokens, what `need` counts at the last step), with a slot's rounding. The step's
    need grows past the prompt's, so a refusal of the prompt that named only its own need sent the user back
    twice. In bytes, not whole slots."""
    prompt_run = -(-body_tokens // block_size) * block_size
    return buffer_bytes(1, 0, 1, max(prompt_run, longest), head_token_bytes) + block_bytes


class HeadwisePolicy:
    """Blocks rest on the host; a step's groups decode token by token, each layer head group by head group."""

    name = "headwise"
    home = Tier.HOST

    def __init__(self, context: PolicyContext, share: bool = True) -> None:
        if getattr(context.config, "_attn_implementation", None) != ATTENTION:
            raise ValueError(
                "headwise needs Beamwise's attention function; this model runs "
                f"{getattr(context.config, '_attn_implementation', None)!r}. Pick another policy (lbs or layerwise)."
            )
        self.context, self.store, self.blocks, self.share = context, context.store, context.blocks, share
        L, _, H, _, _ = self.store.slot_shape
        self.num_kv_heads = H
        self.head_token_bytes = self.store.token_bytes // (L * H)  # K and V of one token, one head, one layer
        self._arena: torch.Tensor | None = None  # host memory of the group's own tokens, reused step to step
        self.heads: dict[tuple[int, ...], int] = {}  # the plan's head-group size of each group
        self.whole: dict[tuple[int, ...], bool] = {}  # whether a group's prefix is read with its run's tail

    # -- planning -----------------------------------------------------------------------------
    def prefix_blocks(self, tables: Sequence[Sequence[int]]) -> list[int]:
        """The leading blocks all `tables` share that sit in consecutive host slots (read in place)."""
        shared = common_prefix(tables) if self.share else []
        low, high = 0, len(shared)  # the longest contiguous leading part, by bisection (contiguity is monotone)
        while low < high:
            middle = (low + high + 1) // 2
            if self.store.contiguous(shared[:middle], Tier.HOST) is not None:
                low = middle
            else:
                high = middle - 1
        return shared[:low]

    def prefix_read(self, tables: Sequence[Sequence[int]], whole: bool = False
                    ) -> tuple[list[int], torch.Tensor | None, int]:  # fmt: skip
        """The shared prefix of `tables`: its blocks, the host view its loads copy, and the tokens attention reads.
        With `whole`, a prefix that fills its run but for less than a block (the prompt's full blocks: its
        partial last block is each child's own) is copied with that tail, which attention does not read: one
        contiguous piece per layer and head group instead of one per head, for under a block more bytes."""
        ids = self.prefix_blocks(tables)
        tokens = self.blocks.num_tokens(ids)
        run = self.store.contiguous(ids, Tier.HOST, whole_run=True) if whole else None
        if run is not None and run.shape[3] - tokens < self.blocks.block_size:
            return ids, run, tokens
        return ids, self.store.contiguous(ids, Tier.HOST), tokens

    def need(self, members: Sequence[Work], heads: int, whole: bool = False) -> int:
        """Device bytes of a group's two buffers at `heads` heads (`whole`: its prefix read with its run's tail);
        they are one run, rounded up to whole slots."""
        _, view, prefix = self.prefix_read([m.table for m in members], whole)
        width = max(m.tokens for m in members) - prefix + self.context.step_tokens
        copied = 0 if view is None else view.shape[3]
        return buffer_bytes(heads, copied, len(members), width, self.head_token_bytes) + self.store.block_bytes

    def plan(self, work: Sequence[Work], budget: int) -> StepPlan:
        """Groups in the given order (siblings stay together), each as large as one head fits; then
        each group's head-group size, the largest whose buffers fit."""
        groups: list[list[Work]] = []
        for w in work:
            need = self.need([w], 1)
            if need > budget:
                raise KVBudgetTooSmall(budget, need, "one KV head of one candidate (headwise)")
            if groups and self.need([*groups[-1], w], 1) <= budget:
                groups[-1].append(w)
            else:
                groups.append([w])
        self.heads, self.whole = {}, {}
        for members in groups:
            sizes = head_group_sizes(self.num_kv_heads)
            key = tuple(m.id for m in members)
            self.heads[key] = heads = next(g for g in sizes if self.need(members, g) <= budget)
            # one head a group is one piece either way; else never at the cost of groups or heads
            self.whole[key] = heads > 1 and self.need(members, heads, whole=True) <= budget
        return StepPlan("headwise", tuple(Group(tuple(w.id for w in g)) for g in groups))

    # -- the prompt -------------------------------------------------------------------------------
    def prefill(self, prefill, block_ids: Sequence[int], chunk: int, budget: int,
                cached: torch.Tensor | None = None) -> None:
        """Compute the prompt's KV `chunk` tokens at a time straight into its blocks' host run, head-wise:
        the device holds two head groups of the prompt and one chunk's activations, never the whole KV.
        `cached` `[L, 2, H, c, D]` (the prefix cache's) fills the first `c` tokens instead (host to host)."""
        run = self.store.place(block_ids, Tier.HOST)
        rows = self.store.pools[Tier.HOST].segment(run).unsqueeze(2)  # [L, 2, 1, H, T, D]
        done = 0 if cached is None else cached.shape[3]
        if done:
            self.store.copy(rows[:, :, 0, :, :done], cached, "h2h", [0])
        tokens = self.blocks.tokens_of(block_ids)
        if done >= len(tokens):
            return
        need = lambda g: buffer_bytes(g, 0, 1, rows.shape[4], self.head_token_bytes) + self.store.block_bytes  # noqa: E731
        heads = next((g for g in head_group_sizes(self.num_kv_heads) if need(g) <= budget), None)
        if heads is None:
            raise KVBudgetTooSmall(budget, need(1), "one KV head of the prompt (headwise)",
                                   needed_for="the question's KV")
        grouped = rows.unflatten(3, (self.num_kv_heads // heads, heads))  # [L, 2, 1, G, g, T, D]
        stream = HeadStream(self.store, None, grouped, done, heads, [0])
        try:
            cache = stream.cache(self.context.config)
            prefill(tokens[done:], chunk=chunk, cache=cache, kv_heads=stream)
        finally:
            stream.close()

    # -- one step -----------------------------------------------------------------------------
    def run_step(
        self, plan: StepPlan, live: dict[int, Live], timing: StepTiming, should_stop: Callable[[], bool]
    ) -> Iterator[GroupDone]:
        """Yields after each group. A group that runs out of device memory is split in two and retried
        with the same head-group size (a smaller group needs less); only a single candidate is an error."""
        queue, index = list(plan.groups), 0
        while queue:
            group, stream = queue.pop(0), None
            members = [live[c] for c in group.candidates]
            heads, whole = self.heads[group.candidates], self.whole.get(group.candidates, False)
            try:
                stream, width, mask = self._load(members, heads, whole)
                before = self.store.counters.step["h2d"]
                rows = [Row(m.id, m.pending, self.blocks.num_tokens(m.table), m.generator) for m in members]
                cache = stream.cache(self.context.config)
                results, compute = self.context.decode(cache, mask, rows, should_stop, kv_heads=stream)
                self.store.sync()
            except OUT_OF_MEMORY as error:
                self.store.sync()  # the failed attempt's copies to the host arena land before the retry rewrites it
                self._close(stream, timing)
                queue[:0] = halves = split_for_retry(group, error, timing)
                self.heads.update((half.candidates, heads) for half in halves)
                self.whole.update((half.candidates, whole) for half in halves)  # a half needs less
                continue
            except BaseException:
                self._close(stream, timing)
                raise
            try:
                self._write_back(members, results, stream, width)  # never retried: it changes the tables
            finally:
                self._close(stream, timing)
            self._account(self.store.counters.step["h2d"] - before, stream.prefetched_bytes, compute, timing)
            yield group_done(index, group, results, timing)
            index += 1
            if should_stop():
                return

    def _close(self, stream: HeadStream | None, timing: StepTiming) -> None:
        """Give the group's device buffers back, after noting the pool's high-water mark."""
        timing.peak_device_bytes = max(timing.peak_device_bytes, self.store.peak_device_bytes)
        if stream is not None:
            stream.close()

    def _load(self, members: list[Live], heads: int, whole: bool = False):
        """The group's stream: its prefix read in place and its own blocks gathered into a host arena."""
        prefix_ids, prefix, prefix_tokens = self.prefix_read([m.table for m in members], whole)
        own = [m.table[len(prefix_ids) :] for m in members]
        lengths = [self.blocks.num_tokens(t) for t in own]
        width = max(lengths)
        L, _, H, _, D = self.store.slot_shape
        arena = self._host_arena((L, 2, len(members), H // heads, heads, width + self.context.step_tokens, D))
        for row, (member, table, length) in enumerate(zip(members, own, lengths, strict=True)):
            column = width - length
            arena[:, :, row, :, :, :column].zero_()  # padding is masked, but must not hold NaN
            for block_id in table:
                n = self.blocks.blocks[block_id].num_tokens
                src = self.store.view(block_id, Tier.HOST, n).unflatten(2, (H // heads, heads))
                self.store.copy(arena[:, :, row, :, :, column : column + n], src, "h2h", [member.id])
                column += n
        stream = HeadStream(self.store, prefix, arena, width, heads, [m.id for m in members], prefix_tokens)
        return stream, width, padding_mask(lengths, width, self.store.device)

    def _host_arena(self, shape: tuple[int, ...]) -> torch.Tensor:
        """`[L, 2, B, G, g, C, D]` of host memory (pinned on CUDA), `G` groups of `g` heads, group-major in memory
        (`[L, G, C, 2, B, g, D]`: a head group's first columns are one contiguous piece, and so is one column of
        it), grown when a step needs more; nothing is allocated per token. It takes the whole block torch's
        caching host allocator pins (the next power of two of its bytes), so it grows only past that; a block
        it outgrows goes back to the system at once (no later request of the run fits it)."""
        elements = math.prod(shape)
        if self._arena is None or self._arena.numel() < elements:
            outgrown, self._arena = self._arena is not None, None
            if outgrown:
                self.store.release_host_cache()
            element = torch.empty((), dtype=self.store.dtype).element_size()
            self._arena = self.store.host_empty((filling_pinned_block(elements, element),), self.store.dtype)
        return group_major(self._arena, shape)

    def _write_back(self, members: list[Live], results, stream: HeadStream, width: int) -> None:
        for row, (member, result) in enumerate(zip(members, results, strict=True)):
            n = len(result.fed)
            if n == 0:
                continue
            plan = self.blocks.append(member.table, result.fed, Tier.HOST)
            new_kv = stream.rows[:, :, row, :, :, width : width + n].flatten(2, 3)  # [L, 2, H, n, D], a host copy
            self.store.write(plan, new_kv, Tier.HOST, member.id, source=Tier.HOST)
            member.table = plan.table
            member.pending = result.sampled[-1]

    def _account(self, h2d: int, prefetched: int, compute: float, timing: StepTiming) -> None:
        """Emulated device: loads issued while an earlier head group computed hide behind it; the rest stall."""
        timing.compute_seconds += compute
        if self.store.emulated:
            bandwidth = self.store.bandwidth
            timing.modelled_stall_seconds += h2d / bandwidth - min(prefetched / bandwidth, compute)

    # -- reporting ------------------------------------------------------------------------------
    def placement(self, live: Live) -> tuple[int, int, int, int]:
        return block_placement(self.blocks, self.store, live.table)

    def tier_bytes(self) -> tuple[int, int]:
        return self.store.resident_bytes(Tier.DEVICE), self.store.resident_bytes(Tier.HOST)


def group_major(memory: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """`shape` `[L, 2, B, G, g, C, D]` as a view of the first elements of flat `memory`, laid out `[L, G, C, 2, B,
    g, D]`: one layer's head group over its first `n` columns is one contiguous piece, and so is one column of
    one head group."""
    L, two, B, G, g, C, D = shape
    return memory[: math.prod(shape)].view(L, G, C, two, B, g, D).permute(0, 3, 4, 1, 5, 2, 6)
