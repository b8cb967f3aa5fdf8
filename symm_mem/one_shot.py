"""one_shot (pull): every rank reads every peer's workspace and reduces locally.

Each program copies its tiles of the input into this rank's workspace (unless the input
already lives there), meets its peers, sums the same tiles from all ranks in rank order
(fp32, so every rank gets bitwise the same result), and meets them again so that no
rank overwrites its workspace while a peer still reads it.
"""

import torch
import triton
import triton.language as tl

from .launch import Launcher, cdiv, int_spec
from .signals import MAX_BLOCKS, block_barrier


@triton.jit(do_not_specialize=["rank", "timeout"])
def _one_shot_kernel(inp, out, mine, bufs, pad_tab, err_ptr, rank, n, timeout,
                     WS: tl.constexpr, BLOCK: tl.constexpr, COPY_IN: tl.constexpr,
                     TIMER: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    if COPY_IN:
        for start in range(pid * BLOCK, n, step):
            offs = start + tl.arange(0, BLOCK)
            m = offs < n
            tl.store(mine + offs, tl.load(inp + offs, mask=m), mask=m)
    block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)
    for start in range(pid * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        m = offs < n
        acc = tl.zeros([BLOCK], tl.float32)
        for p in tl.static_range(WS):
            acc += tl.load(bufs[p] + offs, mask=m, cache_modifier=".cv").to(tl.float32)
        tl.store(out + offs, acc.to(out.dtype.element_ty), mask=m)
    block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)


_launch = Launcher(_one_shot_kernel)


def one_shot(*, inp: torch.Tensor, out: torch.Tensor, mine: torch.Tensor,
             bufs: tuple[torch.Tensor, ...], pad_tab: int, err: torch.Tensor, rank: int,
             timeout: int, timer: bool, block: int = 4096, warps: int = 16,
             blocks: int = 64) -> None:
    """Sum the flat ``inp`` over all ranks into ``out`` (which must not be in ``bufs``).

    ``mine`` is this rank's workspace view (``bufs[rank]``); ``inp`` may be it (no copy).
    """
    n = inp.numel()
    grid = max(1, min(cdiv(n, block), blocks, MAX_BLOCKS))
    copy_in = inp.data_ptr() != mine.data_ptr()
    consts = (("WS", len(bufs)), ("BLOCK", block), ("COPY_IN", copy_in), ("TIMER", timer))
    key = (inp.dtype, consts, warps, inp.data_ptr() % 16, out.data_ptr() % 16, int_spec(n),
           rank, pad_tab, int_spec(timeout))
    _launch(key, grid, (inp, out, mine, bufs, pad_tab, err, rank, n, timeout), consts, warps)
