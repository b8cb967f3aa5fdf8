"""two_shot: reduce-scatter through the peers' workspaces, then an all-gather by writes.

The message is cut into ``world`` shards of ``shard`` elements (a multiple of 16).
Program ``b`` owns tiles ``b, b + programs, ...`` of every shard, so the block-wise
barrier orders exactly the data each program touches:

    copy my tiles of the input into my workspace        (skipped for workspace input)
    barrier
    r = sum over ranks, in rank order, of their shard[rank] tiles; write r into
        shard[rank] of every rank's workspace            (remote writes: no round trip)
    barrier
    copy my workspace (now the full sum) to out          (skipped when out is it)

Every shard is summed once, by its owner, so all ranks hold bitwise the same result.
No end barrier is needed: a peer writes into this workspace only after meeting this
rank at the first barrier of the same call, and this rank's previous call has then
finished (stream order).
"""

import torch
import triton
import triton.language as tl

from .launch import Launcher, cdiv, int_spec
from .signals import MAX_BLOCKS, block_barrier


@triton.jit
def _copy_tiles(src, dst, n, shard, pid, step, WS: tl.constexpr, BLOCK: tl.constexpr):
    for s in tl.static_range(WS):
        for t in range(pid * BLOCK, shard, step):
            offs = s * shard + t + tl.arange(0, BLOCK)
            m = (t + tl.arange(0, BLOCK) < shard) & (offs < n)
            tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


@triton.jit(do_not_specialize=["rank", "timeout"])
def _two_shot_kernel(inp, out, mine, bufs, pad_tab, err_ptr, rank, n, shard, timeout,
                     WS: tl.constexpr, BLOCK: tl.constexpr, COPY_IN: tl.constexpr,
                     COPY_OUT: tl.constexpr, TIMER: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    if COPY_IN:
        _copy_tiles(inp, mine, n, shard, pid, step, WS, BLOCK)
    block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)
    base = rank * shard
    for t in range(pid * BLOCK, shard, step):
        offs = base + t + tl.arange(0, BLOCK)
        m = (t + tl.arange(0, BLOCK) < shard) & (offs < n)
        acc = tl.zeros([BLOCK], tl.float32)
        for p in tl.static_range(WS):
            acc += tl.load(bufs[p] + offs, mask=m, cache_modifier=".cv").to(tl.float32)
        res = acc.to(mine.dtype.element_ty)
        for p in tl.static_range(WS):
            tl.store(bufs[p] + offs, res, mask=m)
    block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)
    if COPY_OUT:
        _copy_tiles(mine, out, n, shard, pid, step, WS, BLOCK)


def shard_elems(n: int, world: int) -> int:
    """Elements per shard: ceil(n / world) rounded up to 16 (aligned, vectorisable)."""
    per_rank = -(-n // world)
    return max(16, -(-per_rank // 16) * 16)


_launch = Launcher(_two_shot_kernel)


def two_shot(*, inp: torch.Tensor, out: torch.Tensor, mine: torch.Tensor,
             bufs: tuple[torch.Tensor, ...], pad_tab: int, err: torch.Tensor, rank: int,
             timeout: int, timer: bool, block: int = 4096, warps: int = 16,
             blocks: int = 132) -> None:
    """Sum the flat ``inp`` over all ranks into ``out``; either may be ``mine``."""
    n = inp.numel()
    shard = shard_elems(n, len(bufs))
    grid = max(1, min(cdiv(shard, block), blocks, MAX_BLOCKS))
    consts = (("WS", len(bufs)), ("BLOCK", block),
              ("COPY_IN", inp.data_ptr() != mine.data_ptr()),
              ("COPY_OUT", out.data_ptr() != mine.data_ptr()), ("TIMER", timer))
    key = (inp.dtype, consts, warps, inp.data_ptr() % 16, out.data_ptr() % 16, int_spec(n),
           int_spec(shard), rank, pad_tab, int_spec(timeout))
    _launch(key, grid, (inp, out, mine, bufs, pad_tab, err, rank, n, shard, timeout), consts,
            warps)
