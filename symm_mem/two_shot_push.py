"""two_shot_push: reduce-scatter and all-gather both by remote writes, no copy into the workspace.

Each rank owns one shard of the message. Program ``b`` handles tiles ``b, b + programs,
...`` of every shard on every rank, so the block-wise barrier orders exactly its data:

    for every peer p: write my input's shard p tiles into p's contribution slot [rank]
    barrier
    r = sum in rank order (my own shard read straight from my input); r -> out, and
        r -> every peer's result area, shard [rank]
    barrier
    for every peer p: out[shard p] = my result area, shard p        (local copy)

Remote traffic is writes only (no read round trips), the input is read where it lies
(ordinary tensors need no copy in), and every shard is summed once by its owner, so
all ranks hold bitwise the same result. The contribution and result areas are a
scratch region no other algorithm uses. No end barrier: a peer writes into this
rank's areas only before the first barrier of a call whose previous call it finished,
and this rank's reads of a call end before it meets the peer at the next first barrier.
"""

import torch
import triton
import triton.language as tl

from .launch import Launcher, int_spec
from .signals import MAX_BLOCKS, block_barrier


@triton.jit(do_not_specialize=["rank", "timeout"])
def _two_shot_push_kernel(inp, out, contrib, result, contribs, results, pad_tab, err_ptr, rank,
                          n, shard, timeout, WS: tl.constexpr, BLOCK: tl.constexpr,
                          TIMER: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    for p in tl.static_range(WS):
        if p != rank:
            for t in range(pid * BLOCK, shard, step):
                o = t + tl.arange(0, BLOCK)
                m = (o < shard) & (p * shard + o < n)
                x = tl.load(inp + p * shard + o, mask=m)
                tl.store(contribs[p] + rank * shard + o, x, mask=m)
    block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)
    for t in range(pid * BLOCK, shard, step):
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
    block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)
    for p in tl.static_range(WS):
        if p != rank:
            for t in range(pid * BLOCK, shard, step):
                o = t + tl.arange(0, BLOCK)
                m = (o < shard) & (p * shard + o < n)
                v = tl.load(result + p * shard + o, mask=m, cache_modifier=".cv")
                tl.store(out + p * shard + o, v, mask=m)


_launch = Launcher(_two_shot_push_kernel)


def piece_elems(capacity: int, world: int) -> int:
    """Largest message (elements) whose shards fit a scratch area of ``capacity`` elements."""
    return capacity // (16 * world) * 16 * world


def two_shot_push(*, inp: torch.Tensor, out: torch.Tensor, contribs: tuple[torch.Tensor, ...],
                  results: tuple[torch.Tensor, ...], pad_tab: int, err: torch.Tensor, rank: int,
                  timeout: int, timer: bool, block: int = 4096, warps: int = 16,
                  blocks: int = 264) -> None:
    """Sum the flat ``inp`` over all ranks into ``out`` (``out`` may be ``inp``).

    ``contribs[p]`` / ``results[p]`` are rank ``p``'s scratch areas, each holding at least
    ``world * shard`` elements (see ``piece_elems``).
    """
    from .two_shot import shard_elems

    n = inp.numel()
    world = len(contribs)
    shard = shard_elems(n, world)
    grid = max(1, min(triton.cdiv(shard, block), blocks, MAX_BLOCKS))
    consts = (("WS", world), ("BLOCK", block), ("TIMER", timer))
    key = (inp.dtype, consts, warps, inp.data_ptr() % 16, out.data_ptr() % 16, int_spec(n),
           int_spec(shard), rank, pad_tab, int_spec(timeout))
    _launch(key, grid, (inp, out, contribs[rank], results[rank], contribs, results, pad_tab, err,
                        rank, n, shard, timeout), consts, warps)
