"""reduce_scatter_push: a reduce-scatter by remote writes into the peers' contribution areas.

The input holds ``world`` chunks of ``n`` elements, chunk ``p`` at element ``p * istride``;
rank ``r``'s output is the sum over ranks of their chunk ``r``. This is stage 1 and 2 of
``two_shot_push`` without its gather. Program ``b`` handles tiles ``b, b + programs, ...``
of every chunk, in rounds of ``ROUND`` tiles (0: one round), two stages in flight:

    stage 1 (round j):   for every peer p: my input's chunk p tiles -> p's contribution
                         slot [rank] (element rank * n + tile)
    stage 2 (round j-1): out tiles = sum over ranks s, in rank order, in fp32, of
                         contribution slot [s] (my own term read from my input)
    barrier

Stage 2 of round j-1 needs the peers' stage 1 of round j-1, done before the barrier that
ended the previous step; the last barrier (after the last stage 2) keeps the peers' next
call from writing a slot this rank still reads. The contribution areas (the first half
of the scratch region) are used by ``two_shot_push`` too, under the same rule.

Every chunk is summed by one rank in rank order 0..world-1, in fp32 and rounded once to the
input dtype (as ``rs_pull`` and the all-reduce kernels do). The input is read where it
lies (it may be in the data region) and remote traffic is writes only.

Limits: ``world * n`` elements fit one contribution area (larger messages go in pieces);
``out`` may be anywhere outside the contribution areas, this rank's chunk of ``inp``
included.
"""

import torch
import triton
import triton.language as tl

from .all_gather import at_chunk
from .launch import Launcher, cdiv, int_spec
from .signals import MAX_BLOCKS, block_barrier


@triton.jit
def _contribute(inp, contribs, rank, n, istride, first, last, step, WS: tl.constexpr,
                BLOCK: tl.constexpr):
    """Stage 1 for the tiles starting at first, first + step, ... (< last)."""
    for p in tl.static_range(WS):
        if p != rank:
            src = at_chunk(inp, p, istride)
            for t in range(first, last, step):
                o = t + tl.arange(0, BLOCK)
                m = o < n
                tl.store(contribs[p] + rank * n + o, tl.load(src + o, mask=m), mask=m)


@triton.jit
def _reduce(inp, out, contrib, rank, n, istride, first, last, step, WS: tl.constexpr,
            BLOCK: tl.constexpr):
    """Stage 2: sum my chunk's tiles in rank order into out."""
    own = at_chunk(inp, rank, istride)
    for t in range(first, last, step):
        o = t + tl.arange(0, BLOCK)
        m = o < n
        acc = tl.zeros([BLOCK], tl.float32)
        for s in tl.static_range(WS):
            if s == rank:
                v = tl.load(own + o, mask=m)
            else:
                v = tl.load(contrib + s * n + o, mask=m, cache_modifier=".cv")
            acc += v.to(tl.float32)
        tl.store(out + o, acc.to(out.dtype.element_ty), mask=m)


@triton.jit(do_not_specialize=["rank", "timeout"])
def _reduce_scatter_push_kernel(inp, out, contrib, contribs, pad_tab, err_ptr, rank, n,
                                istride, timeout, WS: tl.constexpr, BLOCK: tl.constexpr,
                                ROUND: tl.constexpr, TIMER: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    step = nprog * BLOCK
    tiles = tl.cdiv(tl.cdiv(n, BLOCK) - pid, nprog)  # this program's; the same on every rank
    per = tiles if ROUND == 0 else ROUND
    rounds = tl.cdiv(tiles, per)
    span = per * step  # one round of this program's tiles
    base = pid * BLOCK
    end = base + tiles * step
    for j in range(0, rounds + 1):
        if j < rounds:
            _contribute(inp, contribs, rank, n, istride, base + j * span,
                        tl.minimum(base + (j + 1) * span, end), step, WS, BLOCK)
        if j > 0:
            _reduce(inp, out, contrib, rank, n, istride, base + (j - 1) * span,
                    tl.minimum(base + j * span, end), step, WS, BLOCK)
        block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)


_launch = Launcher(_reduce_scatter_push_kernel)


def reduce_scatter_push(*, inp: torch.Tensor, out: torch.Tensor,
                        contribs: tuple[torch.Tensor, ...], pad_tab: int, err: torch.Tensor,
                        rank: int, timeout: int, timer: bool, istride: int | None = None,
                        block: int = 4096, warps: int = 16, blocks: int = 132,
                        round_tiles: int = 0) -> None:
    """Sum chunk ``rank`` of every rank's ``inp`` into the flat ``out`` (n elements).

    Chunk ``p`` of ``inp`` starts at element ``p * istride`` (default ``n``).
    ``contribs[p]`` is rank ``p``'s contribution area, holding at least ``world * n``
    elements. Each program takes its tiles in rounds of ``round_tiles`` (0: one round).
    """
    n = out.numel()
    istride = n if istride is None else istride
    grid = max(1, min(cdiv(n, block), blocks, MAX_BLOCKS))
    consts = (("WS", len(contribs)), ("BLOCK", block), ("ROUND", round_tiles),
              ("TIMER", timer))
    key = (inp.dtype, consts, warps, inp.data_ptr() % 16, out.data_ptr() % 16, int_spec(n),
           int_spec(istride), rank, pad_tab, int_spec(timeout))
    _launch(key, grid, (inp, out, contribs[rank], contribs, pad_tab, err, rank, n, istride,
                        timeout), consts, warps)
