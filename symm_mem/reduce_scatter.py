"""reduce_scatter (pull): every rank copies its input into its data region, then reads from
every peer the chunk it owns and sums it.

The input holds ``world`` chunks of ``n`` elements, chunk ``p`` at element ``p * istride``;
rank ``r``'s output is the sum over ranks of their chunk ``r``. Program ``b`` owns tiles
``b, b + programs, ...`` of every chunk, so the block-wise barrier orders exactly the data
each program touches:

    for every peer p: region[p * n + tiles] = input chunk p tiles  (skipped when the input
                                             is the data region; my own chunk is never
                                             copied: only I read it)
    barrier
    out[tiles] = sum over ranks s, in rank order, in fp32, of region_s[rank * n + tiles]
                 (my own term read from my input)
    barrier                                 (no rank overwrites its region, at its next
                                             call, while a peer still reads it)

Every chunk is summed by one rank in rank order 0..world-1, in fp32 and rounded once to the
input dtype, so its value does not depend on which rank holds it (``rs_push`` and the
all-reduce kernels sum the same way).

Limits: ``world * n`` elements fit the data region (larger messages go in pieces); ``out``
must not lie in any data region, except as this rank's chunk of an input that is the
region itself.
"""

import torch
import triton
import triton.language as tl

from .all_gather import at_chunk
from .launch import Launcher, cdiv, int_spec
from .signals import MAX_BLOCKS, block_barrier


@triton.jit(do_not_specialize=["rank", "timeout"])
def _reduce_scatter_kernel(inp, out, mine, bufs, pad_tab, err_ptr, rank, n, istride, timeout,
                           WS: tl.constexpr, BLOCK: tl.constexpr, COPY_IN: tl.constexpr,
                           TIMER: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    if COPY_IN:
        for p in tl.static_range(WS):
            if p != rank:
                src = at_chunk(inp, p, istride)
                for start in range(pid * BLOCK, n, step):
                    offs = start + tl.arange(0, BLOCK)
                    m = offs < n
                    tl.store(mine + p * n + offs, tl.load(src + offs, mask=m), mask=m)
    block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)
    own = at_chunk(inp, rank, istride)
    for start in range(pid * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        m = offs < n
        acc = tl.zeros([BLOCK], tl.float32)
        for s in tl.static_range(WS):
            if s == rank:
                v = tl.load(own + offs, mask=m)
            else:
                v = tl.load(bufs[s] + rank * n + offs, mask=m, cache_modifier=".cv")
            acc += v.to(tl.float32)
        tl.store(out + offs, acc.to(out.dtype.element_ty), mask=m)
    block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)


_launch = Launcher(_reduce_scatter_kernel)


def reduce_scatter(*, inp: torch.Tensor, out: torch.Tensor, mine: torch.Tensor,
                   bufs: tuple[torch.Tensor, ...], pad_tab: int, err: torch.Tensor, rank: int,
                   timeout: int, timer: bool, istride: int | None = None, block: int = 4096,
                   warps: int = 16, blocks: int = 64) -> None:
    """Sum chunk ``rank`` of every rank's ``inp`` into the flat ``out`` (n elements).

    Chunk ``p`` of ``inp`` starts at element ``p * istride`` (default ``n``: the flat
    ``reduce_scatter_tensor`` layout). ``mine`` is this rank's data region (``bufs[rank]``),
    holding at least ``world * n`` elements; ``inp`` may be ``mine`` (no copy in, then
    ``istride == n``). ``out`` may be this rank's chunk of ``inp``.
    """
    n = out.numel()
    istride = n if istride is None else istride
    grid = max(1, min(cdiv(n, block), blocks, MAX_BLOCKS))
    consts = (("WS", len(bufs)), ("BLOCK", block),
              ("COPY_IN", inp.data_ptr() != mine.data_ptr()), ("TIMER", timer))
    key = (inp.dtype, consts, warps, inp.data_ptr() % 16, out.data_ptr() % 16, int_spec(n),
           int_spec(istride), rank, pad_tab, int_spec(timeout))
    _launch(key, grid, (inp, out, mine, bufs, pad_tab, err, rank, n, istride, timeout), consts,
            warps)
