"""The prefix KV cache (RKSC's scored cache): full blocks computed by earlier runs, kept for later ones.

After a run, the KV of its prompt's full blocks and of its chosen path's full blocks is kept in
two tiers: host RAM (this object, which outlives the run's `KVCache`: the window keeps it for its
whole life) and disk (engine/kv/prefix_disk.py, one folder per model), so a new process with the
same prompt prefix finds it too. A block is found by a token-exact *chain key*: a blake2b digest
of the previous block's key and this block's token ids, seeded with the model key and block
size. Unlike Python's `hash`, it is the same in every process. A lookup walks the prompt's
blocks from the first and stops at the first miss, so a block is only ever used after all of
its ancestors, and evicting a parent before its children only makes the children unreachable.

Eviction, past a tier's cap, drops the block of lowest score first:

    score = value / (depth + 1),   value = (1 + uses) / (1 + minutes since last use)

`uses` counts the lookups that hit the block (in this process), `depth` is its index in the
chain (0: the prompt's first block), and the last use is a hit or a write (on disk: the file's
mtime, which every process's hits refresh). Shallow blocks, shared by every longer prompt, are
kept longest; a block used often and lately is worth more. Blocks pinned by a running search
are never evicted.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.errors import PrefixCacheTooSmall
from engine.kv import prefix_disk

KEY_BYTES = 16


def chain_keys(token_ids: Sequence[int], block_size: int, seed: bytes = b"") -> list[bytes]:
    """The chain key of every full block of `token_ids` (a trailing partial block has none)."""
    keys, previous = [], hashlib.blake2b(seed + block_size.to_bytes(4, "little"), digest_size=KEY_BYTES).digest()
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        block = b"".join(int(t).to_bytes(8, "little", signed=True) for t in token_ids[start : start + block_size])
        previous = hashlib.blake2b(previous + block, digest_size=KEY_BYTES).digest()
        keys.append(previous)
    return keys


def score(uses: int, minutes_idle: float, depth: int) -> float:
    """RKSC's eviction score (the lowest goes first); see the module docstring."""
    value = (1 + uses) / (1 + max(minutes_idle, 0.0))
    return value / (depth + 1)


@dataclass
class Entry:
    """A block held in host RAM: its KV `[L, 2, H, block_size, D]` on the CPU."""

    key: bytes
    depth: int
    tokens: tuple[int, ...]
    kv: torch.Tensor
    uses: int = 0
    last_used: float = 0.0


class PrefixCache:
    """Host-RAM and disk tiers of one model's cached blocks, with RKSC eviction and pins.

    `ram_bytes`/`disk_bytes` cap each tier (None: no cap); `folder=None` keeps no disk tier.
    `clock` gives seconds (tests pass a fake one).
    """

    def __init__(
        self,
        block_shape: tuple[int, ...],
        dtype: torch.dtype,
        *,
        seed: bytes,
        ram_bytes: int | None,
        disk_bytes: int | None,
        folder: Path | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.block_shape, self.dtype, self.seed = tuple(block_shape), dtype, seed
        self.block_size = block_shape[3]
        self.ram_bytes, self.disk_bytes, self.folder, self.clock = ram_bytes, disk_bytes, folder, clock
        self.block_bytes = torch.empty((), dtype=dtype).element_size()
        for n in block_shape:
            self.block_bytes *= n
        self.entries: dict[bytes, Entry] = {}
        self.pins: Counter[bytes] = Counter()
        self.disk_uses: Counter[bytes] = Counter()  # hits on disk blocks in this process
        self.evicted = {"ram": 0, "disk": 0}  # blocks evicted past each cap (for tests and the log)
        self.disk_problem: str | None = None  # why the disk tier cannot write its folder (shared_prefix_cache)

    def keys(self, token_ids: Sequence[int]) -> list[bytes]:
        return chain_keys(token_ids, self.block_size, self.seed)

    @property
    def ram_used(self) -> int:
        return len(self.entries) * self.block_bytes

    # -- a run's use ----------------------------------------------------------------------------
    def require(self, blocks: int) -> None:
        """A search that will pin `blocks` blocks needs a RAM cap that holds them; else one clear error."""
        require_ram(self.ram_bytes, blocks, self.block_bytes)

    def lookup(self, token_ids: Sequence[int]) -> list[Entry]:
        """The cached leading full blocks of `token_ids` (host RAM first, then disk), up to the first miss.
        Each hit counts as a use; a block read from disk joins the RAM tier."""
        found, now = [], self.clock()
        for depth, key in enumerate(self.keys(token_ids)):
            tokens = tuple(token_ids[depth * self.block_size : (depth + 1) * self.block_size])
            entry = self.entries.get(key)
            if entry is None or entry.tokens != tokens:
                entry = self._from_disk(key, depth, tokens)
                if entry is None:
                    break
            entry.uses += 1
            entry.last_used = now
            found.append(entry)
        return found

    def _from_disk(self, key: bytes, depth: int, tokens: tuple[int, ...], hit: bool = True) -> Entry | None:
        """The block from the disk tier into the RAM tier, or None (no folder, no file, a damaged one: removed).
        `hit`: a lookup's use of it, counted; a run's keep (`add`) is none, its uses stay the disk hits'."""
        if self.folder is None:
            return None
        kv = prefix_disk.read_block(self.folder, key, depth, tokens, self.block_shape, self.dtype)
        if kv is None:
            return None
        self.disk_uses[key] += int(hit)
        entry = Entry(key, depth, tokens, kv, uses=self.disk_uses[key] - int(hit))
        self.entries[key] = entry
        return entry

    def pin(self, keys: Sequence[bytes]) -> None:
        self.pins.update(keys)

    def unpin(self, keys: Sequence[bytes]) -> None:
        self.pins.subtract(keys)
        self.pins = +self.pins  # drop zero counts

    def add(self, key: bytes, depth: int, tokens: Sequence[int], kv: Callable[[], torch.Tensor]) -> bool:
        """Keep a block (its KV from `kv()`, a CPU tensor, asked only when the block is new); write it to disk.
        A block the disk tier holds already (an earlier process's) is not new: it joins the RAM tier from its
        file, with no copy from the run's pools and no write. Returns whether it was new. The caller evicts
        after adding a run's blocks (`trim`)."""
        now = self.clock()
        entry = self.entries.get(key)
        if entry is not None:
            entry.last_used = now
            return False
        tokens = tuple(tokens)
        entry = self._from_disk(key, depth, tokens, hit=False)
        if entry is not None:
            entry.last_used = now
            return False
        entry = Entry(key, depth, tokens, kv(), last_used=now)
        self.entries[key] = entry
        if self.folder is not None:
            prefix_disk.write_block(self.folder, key, depth, entry.tokens, entry.kv)
        return True

    def trim(self) -> None:
        """Evict past both caps."""
        self._evict_ram()
        self._evict_disk()

    # -- eviction -------------------------------------------------------------------------------
    def _evict_ram(self) -> None:
        if self.ram_bytes is None or self.ram_used <= self.ram_bytes:
            return
        now = self.clock()
        candidates = sorted(
            (e for e in self.entries.values() if e.key not in self.pins),
            key=lambda e: (score(e.uses, (now - e.last_used) / 60, e.depth), -e.depth),
        )
        for entry in candidates:
            if self.ram_used <= self.ram_bytes:
                break
            del self.entries[entry.key]
            self.evicted["ram"] += 1

    def _evict_disk(self) -> None:
        if self.folder is None or self.disk_bytes is None:
            return
        files = prefix_disk.scan(self.folder)  # every process's blocks: the cap is the folder's
        used = sum(f.size for f in files)
        if used <= self.disk_bytes:
            return
        now = time.time()  # file times are wall-clock
        files = sorted(
            (f for f in files if f.key not in self.pins),
            key=lambda f: (score(self.disk_uses[f.key], (now - f.mtime) / 60, f.depth), -f.depth),
        )
        for block in files:
            if used <= self.disk_bytes:
                break
            prefix_disk.remove(block.path)
            used -= block.size
            self.evicted["disk"] += 1


def require_ram(ram_bytes: int | None, blocks: int, block_bytes: int) -> None:
    """PrefixCacheTooSmall when a RAM cap (None: none) cannot hold the `blocks` a search pins: what a run refuses
    before it starts, and what `beamwise plan` calls to say so in the same words."""
    need = blocks * block_bytes
    if ram_bytes is not None and need > ram_bytes:
        raise PrefixCacheTooSmall(ram_bytes, need, f"this prompt's {blocks} cached blocks")


# -- one cache per model for the process --------------------------------------------------------
GiB = 1 << 30
RAM_SHARE, RAM_MAX = 0.25, 4 * GiB  # default RAM cap: a quarter of the free RAM, at most 4 GiB
DISK_SHARE, DISK_MAX = 0.10, 8 * GiB  # default disk cap: a tenth of the free disk, at most 8 GiB
_SHARED: dict[str, PrefixCache] = {}


def default_caps(folder: Path) -> tuple[int, int]:
    """(RAM cap, disk cap) from free RAM and free disk now (see RAM_SHARE, DISK_SHARE)."""
    from engine.synthetic import free_memory_bytes

    free_ram = free_memory_bytes(torch.device("cpu")) or 4 * RAM_MAX
    existing = next((p for p in (folder, *folder.parents) if p.exists()), Path.cwd())
    try:
        free_disk = shutil.disk_usage(existing).free
    except OSError:
        free_disk = 0
    return min(RAM_MAX, int(free_ram * RAM_SHARE)), min(DISK_MAX, int(free_disk * DISK_SHARE))


def shared_prefix_cache(loaded, block_size: int, ram_bytes: int | None, disk_bytes: int | None) -> PrefixCache:
    """The process's cache for `loaded` (a Generator with real weights) at `block_size`; caps left None take
    `default_caps`. Settings changed since the last run (the window's) apply to the kept cache."""
    key = prefix_disk.model_key(loaded.source, loaded.dtype, loaded.model, block_size)
    folder = prefix_disk.prefix_root() / key
    if ram_bytes is None or disk_bytes is None:
        ram_default, disk_default = default_caps(folder)
        ram_bytes = ram_default if ram_bytes is None else ram_bytes
        disk_bytes = disk_default if disk_bytes is None else disk_bytes
    cache = _SHARED.get(key)
    shape = loaded.kv_shape
    if cache is None:
        block = (shape.num_layers, 2, shape.num_kv_heads, block_size, shape.head_dim)
        cache = _SHARED[key] = PrefixCache(block, loaded.dtype, seed=key.encode(), ram_bytes=ram_bytes,
                                           disk_bytes=disk_bytes, folder=folder)
    cache.ram_bytes, cache.disk_bytes, cache.folder = ram_bytes, disk_bytes, folder
    cache.disk_problem = prefix_disk.unwritable(folder) if disk_bytes else None  # asked again each run
    return cache


def forget_shared() -> None:
    """Drop every model's RAM tier, as a new process starts (the disk tier stays)."""
    _SHARED.clear()
