"""two_shot_push: reduce-scatter and all-gather both by remote writes, no copy into the workspace.

Each rank owns one shard of the message. Program ``b`` handles tiles ``b, b + programs,
...`` of every shard on every rank, so the block-wise barrier orders exactly its data.
Its tiles go in rounds of ``ROUND`` tiles (0: one round), three stages in flight:

    stage 1 (round j):   for every peer p: my input's shard p tiles -> p's contribution
                         slot [rank]
    stage 2 (round j-1): r = sum in rank order (my own shard read straight from my
                         input); r -> out, and r -> every peer's result area, shard [rank]
    stage 3 (round j-2): for every peer p: out[shard p] = my result area, shard p (local;
                         skipped when out is the result area, a comm.empty tensor in place)
    barrier

Stage 2 of round j-1 needs the peers' stage 1 of round j-1, stage 3 of round j-2 their
stage 2 of round j-2: both were done before the barrier that ended the previous step.
With one round this is stage 1, barrier, stage 2, barrier, stage 3; with more, the
local copies of stage 3 overlap the remote writes of the next rounds.

Remote traffic is writes only (no read round trips), the input is read where it lies
(ordinary tensors need no copy in), and every shard is summed once by its owner, so
all ranks hold bitwise the same result. The contribution areas are a scratch region no
other algorithm uses; commrt passes every rank's data region as its result area (other
algorithms finish with it before their call ends). No end barrier: a peer writes into this
rank's areas only before a barrier of a call whose previous call it finished, and this
rank's reads of a call end before it meets the peer at the next call's first barrier.
"""

import torch
import triton
import triton.language as tl

from .launch import Launcher, cdiv, int_spec
from .signals import MAX_BLOCKS, block_barrier


@triton.jit
def _contribute(inp, contribs, rank, n, shard, first, last, step, WS: tl.constexpr,
                BLOCK: tl.constexpr):
    """Stage 1 for the tiles starting at first, first + step, ... (< last)."""
    for p in tl.static_range(WS):
        if p != rank:
            for t in range(first, last, step):
                o = t + tl.arange(0, BLOCK)
                m = (o < shard) & (p * shard + o < n)
                x = tl.load(inp + p * shard + o, mask=m)
                tl.store(contribs[p] + rank * shard + o, x, mask=m)


@triton.jit
def _reduce(inp, out, contrib, results, rank, n, shard, first, last, step, WS: tl.constexpr,
            BLOCK: tl.constexpr):
    """Stage 2: sum my shard's tiles in rank order, store them here and on every peer."""
    for t in range(first, last, step):
        o = t + tl.arange(0, BLOCK)
        m = (o < shard) & (rank * shard + o < n)
        acc = tl.zeros([BLOCK], tl.float32)
        for s in tl.static_range(WS):
            if s == rank:
                v = tl.load(inp + rank * shard + o, mask=m)
            else:
                v = tl.load(contrib + s * shard + o, mask=m, cache_modifier=".cv")
            acc += v.to(tl.float32)
        res = acc.to(out.dtype.element_ty)
        tl.store(out + rank * shard + o, res, mask=m)
        for p in tl.static_range(WS):
            if p != rank:
                tl.store(results[p] + rank * shard + o, res, mask=m)


@triton.jit
def _gather(out, result, rank, n, shard, first, last, step, WS: tl.constexpr,
            BLOCK: tl.constexpr):
    """Stage 3: copy the peers' reduced shards from my result area into out."""
    for p in tl.static_range(WS):
        if p != rank:
            for t in range(first, last, step):
                o = t + tl.arange(0, BLOCK)
                m = (o < shard) & (p * shard + o < n)
                v = tl.load(result + p * shard + o, mask=m, cache_modifier=".cv")
                tl.store(out + p * shard + o, v, mask=m)


@triton.jit(do_not_specialize=["rank", "timeout"])
def _two_shot_push_kernel(inp, out, contrib, result, contribs, results, pad_tab, err_ptr, rank,
                          n, shard, timeout, WS: tl.constexpr, BLOCK: tl.constexpr,
                          ROUND: tl.constexpr, GATHER: tl.constexpr, TIMER: tl.constexpr,
                          PDL: tl.constexpr):
    if PDL:  # everything below reads what the previous kernels wrote
        tl.extra.cuda.gdc_wait()
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    step = nprog * BLOCK
    tiles = tl.cdiv(tl.cdiv(shard, BLOCK) - pid, nprog)  # this program's; the same on every rank
    per = tiles if ROUND == 0 else ROUND
    rounds = tl.cdiv(tiles, per)
    span = per * step  # one round of this program's tiles
    base = pid * BLOCK
    end = base + tiles * step
    for j in range(0, rounds + 2):
        if j < rounds:
            _contribute(inp, contribs, rank, n, shard, base + j * span,
                        tl.minimum(base + (j + 1) * span, end), step, WS, BLOCK)
        if (j > 0) & (j <= rounds):
            _reduce(inp, out, contrib, results, rank, n, shard, base + (j - 1) * span,
                    tl.minimum(base + j * span, end), step, WS, BLOCK)
        if GATHER and j > 1:
            _gather(out, result, rank, n, shard, base + (j - 2) * span,
                    tl.minimum(base + (j - 1) * span, end), step, WS, BLOCK)
        if j <= rounds:
            block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)


_launch = Launcher(_two_shot_push_kernel)


def piece_elems(capacity: int, world: int) -> int:
    """Largest message (elements) whose shards fit a scratch area of ``capacity`` elements."""
    return capacity // (16 * world) * 16 * world


def program_tiles(n: int, world: int, block: int = 4096, blocks: int = 264, **_unused) -> int:
    """The most tiles one program takes for a message of ``n`` elements (rounds of as
    many tiles or more are one round)."""
    from .two_shot import shard_elems

    tiles = cdiv(shard_elems(n, world), block)
    return cdiv(tiles, max(1, min(tiles, blocks, MAX_BLOCKS)))


def two_shot_push(*, inp: torch.Tensor, out: torch.Tensor, contribs: tuple[torch.Tensor, ...],
                  results: tuple[torch.Tensor, ...], pad_tab: int, err: torch.Tensor, rank: int,
                  timeout: int, timer: bool, gather: bool = True, block: int = 4096,
                  warps: int = 16, blocks: int = 264, round_tiles: int = 0,
                  pdl: int = 0) -> None:
    """Sum the flat ``inp`` over all ranks into ``out`` (``out`` may be ``inp``).

    ``contribs[p]`` / ``results[p]`` are rank ``p``'s scratch areas, each holding at least
    ``world * shard`` elements (see ``piece_elems``). Each program takes its tiles in
    rounds of ``round_tiles`` (0: all in one round). ``gather=False`` when ``out`` is this
    rank's result area itself: the peers' shards are already in place, stage 3 is skipped.
    ``pdl=1`` launches it as a programmatic dependent launch (CUDA only; ignored under the
    interpreter): its programs get resident while the kernel before it drains.
    """
    from .two_shot import shard_elems

    n = inp.numel()
    world = len(contribs)
    shard = shard_elems(n, world)
    grid = max(1, min(cdiv(shard, block), blocks, MAX_BLOCKS))
    pdl = bool(pdl) and timer  # timer: a CUDA tensor, not the interpreter
    consts = (("WS", world), ("BLOCK", block), ("ROUND", round_tiles), ("GATHER", gather),
              ("TIMER", timer), ("PDL", pdl))
    key = (inp.dtype, consts, warps, inp.data_ptr() % 16, out.data_ptr() % 16, int_spec(n),
           int_spec(shard), rank, pad_tab, int_spec(timeout))
    _launch(key, grid, (inp, out, contribs[rank], results[rank], contribs, results, pad_tab, err,
                        rank, n, shard, timeout), consts, warps, pdl)
