"""all_gather (bandwidth): every rank writes its input straight into every peer's data region.

The data region holds the gathered message, chunk ``p`` at element ``p * n``. Program ``b``
owns tiles ``b, b + programs, ...`` of every chunk, so the block-wise barrier orders
exactly the data each program touches:

    barrier                                 (every peer is done with its previous call, so
                                             its data region is free to write)
    for every peer p: region_p[rank * n + tiles] = input tiles        (remote writes)
    out[rank * ostride + tiles] = input tiles                         (own chunk, local)
    barrier                                 (every peer's chunk has landed here)
    for every peer p: out[p * ostride + tiles] = region[p * n + tiles] (skipped when out is
                                             the data region itself: a comm.empty output)

Remote traffic is writes only, and the input is read where it lies. No end barrier: the
copy out of the data region is local and ends before this rank meets its peers at the
first barrier of its next call, before which no peer writes here. Every element is a
copy, so all ranks hold bitwise the same output, for any dtype.

Limits: ``world * n`` elements fit the data region (larger messages go in pieces); the
input may live in the data region only at ``rank * n`` with ``out`` the region itself
(in place: ``inp`` is chunk ``rank`` of a comm.empty output); ``out`` may be anywhere
else, ``inp`` may be chunk ``rank`` of it.
"""

import torch
import triton
import triton.language as tl

from .launch import Launcher, cdiv, int_spec
from .signals import MAX_BLOCKS, block_barrier


@triton.jit
def at_chunk(ptr, chunk, stride):
    """``ptr + chunk * stride`` in 64-bit arithmetic (chunk offsets of messages beyond 2**31
    elements); ``chunk`` and ``stride`` may be constexpr or runtime scalars."""
    return ptr + (tl.zeros([], tl.int64) + chunk) * stride


@triton.jit(do_not_specialize=["rank", "timeout"])
def _all_gather_kernel(inp, out, mine, bufs, pad_tab, err_ptr, rank, n, ostride, timeout,
                       WS: tl.constexpr, BLOCK: tl.constexpr, COPY_OUT: tl.constexpr,
                       TIMER: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)
    own_out = at_chunk(out, rank, ostride)
    for start in range(pid * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(inp + offs, mask=m)
        for p in tl.static_range(WS):
            if p != rank:
                tl.store(bufs[p] + rank * n + offs, x, mask=m)
        tl.store(own_out + offs, x, mask=m)
    block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)
    if COPY_OUT:
        for p in tl.static_range(WS):
            if p != rank:
                dst = at_chunk(out, p, ostride)
                for start in range(pid * BLOCK, n, step):
                    offs = start + tl.arange(0, BLOCK)
                    m = offs < n
                    v = tl.load(mine + p * n + offs, mask=m, cache_modifier=".cv")
                    tl.store(dst + offs, v, mask=m)


_launch = Launcher(_all_gather_kernel)


def piece_elems(capacity: int, world: int) -> int:
    """Elements per rank of one piece: ``world`` chunks fit ``capacity`` elements (a
    multiple of 16 when the region allows it, so every chunk stays 16-element aligned)."""
    per = capacity // world
    return per // 16 * 16 if per >= 16 else per


def all_gather(*, inp: torch.Tensor, out: torch.Tensor, mine: torch.Tensor,
               bufs: tuple[torch.Tensor, ...], pad_tab: int, err: torch.Tensor, rank: int,
               timeout: int, timer: bool, ostride: int | None = None, block: int = 4096,
               warps: int = 16, blocks: int = 132) -> None:
    """Gather the flat ``inp`` (n elements) of every rank into ``out``.

    Chunk ``p`` of ``out`` starts at element ``p * ostride`` (default ``n``). ``mine`` is
    this rank's data region (``bufs[rank]``), holding at least ``world * n`` elements;
    ``out`` may be ``mine`` itself (then ``ostride == n`` and nothing is copied out).
    """
    n = inp.numel()
    ostride = n if ostride is None else ostride
    grid = max(1, min(cdiv(n, block), blocks, MAX_BLOCKS))
    consts = (("WS", len(bufs)), ("BLOCK", block),
              ("COPY_OUT", out.data_ptr() != mine.data_ptr()), ("TIMER", timer))
    key = (inp.dtype, consts, warps, inp.data_ptr() % 16, out.data_ptr() % 16, int_spec(n),
           int_spec(ostride), rank, pad_tab, int_spec(timeout))
    _launch(key, grid, (inp, out, mine, bufs, pad_tab, err, rank, n, ostride, timeout), consts,
            warps)
