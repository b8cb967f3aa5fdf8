"""all_gather_push (Lamport style): an all-gather with no barrier, for the smallest messages.

Each rank writes its input's bits into slot ``rank`` of the current receive buffer on every
peer (the same buffers, sentinel and ``meta`` rotation as ``one_shot_push``, so the two
may follow each other in any order), and its own chunk straight into its output. A reader
polls slot ``p`` until no sentinel is left and writes it to chunk ``p`` of its output:

    out[p * ostride + i] = input of rank p, element i        (i < n, every p)

Every element goes through ``to_bits`` on its way, own chunk included, so all ranks hold
bitwise the same output: -0.0 arrives as +0.0 (bf16/fp16) and the fp32 word ``0x80008000``
(a negative denormal) as ``0x80008001``; every other value is copied bit for bit.

Limit: ``n * element_size <= slot_bytes`` (one rank's input fills one receive slot; the
three buffers hold ``3 * world * slot_bytes``). Larger messages go in pieces.
"""

import torch
import triton
import triton.language as tl

from .all_gather import at_chunk
from .launch import Launcher, cdiv, int_spec
from .one_shot_push import clear_old, move_on, poll_slot, to_bits
from .signals import MAX_BLOCKS


@triton.jit(do_not_specialize=["rank", "timeout"])
def _all_gather_push_kernel(inp, out, push_tab, mine, meta, err_ptr, rank, n, ostride, slot,
                            timeout, WS: tl.constexpr, BLOCK: tl.constexpr,
                            BITS: tl.constexpr, TIMER: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    ity = tl.int16 if BITS == 16 else tl.int32
    ety = out.dtype.element_ty
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(inp + offs, mask=offs < n)  # in flight while the buffer index is read
    buf = tl.load(meta, volatile=True)
    tab = push_tab.to(tl.pointer_type(tl.uint64))
    own_out = at_chunk(out, rank, ostride)
    # 1. push: my bits into slot `rank` of buffer `buf` on every peer, and into my output.
    #    (``inp`` may be chunk ``rank`` of ``out``: each tile is read before it is written.)
    for start in range(pid * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        m = offs < n
        bits = to_bits(x, BITS)
        x = tl.load(inp + offs + step, mask=offs + step < n)  # the next tile, if any
        for p in tl.static_range(WS):
            if p != rank:
                dst = tl.load(tab + p).to(tl.pointer_type(ity)) + (buf * WS + rank) * slot
                tl.store(dst + offs, bits, mask=m)
        tl.store(own_out + offs, bits.to(ety, bitcast=True), mask=m)
    # 2. clear the buffer of two calls ago while the peers' pushes are in flight.
    clear_old(meta, mine, buf, WS, BLOCK, slot * (BITS // 16))
    # 3. every program has read `buf`: the last one here moves on a buffer.
    move_on(meta, buf, n * (BITS // 16))
    # 4. poll each peer's slot of buffer `buf` until no sentinel is left; out in rank order.
    own = mine.to(tl.pointer_type(ity))
    for start in range(pid * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        m = offs < n
        for p in tl.static_range(WS):
            if p != rank:
                v = poll_slot(own + (buf * WS + p) * slot + offs, m, err_ptr, p, timeout, BITS,
                              TIMER)
                tl.store(at_chunk(out, p, ostride) + offs, v.to(ety, bitcast=True), mask=m)


_launch = Launcher(_all_gather_push_kernel)


def all_gather_push(*, inp: torch.Tensor, out: torch.Tensor, push_tab: int, mine: int,
                    slot_bytes: int, meta: torch.Tensor, err: torch.Tensor, rank: int,
                    world: int, timeout: int, timer: bool, ostride: int | None = None,
                    block: int = 1024, warps: int = 4, blocks: int = 32) -> None:
    """Gather the flat ``inp`` (n elements, 2- or 4-byte floats) of every rank into ``out``.

    Chunk ``p`` of ``out`` starts at element ``p * ostride`` (default ``n``: the flat
    ``all_gather_into_tensor`` layout); ``inp`` may be this rank's chunk of ``out``.
    ``inp.nbytes <= slot_bytes``. ``push_tab`` is a device table of every rank's
    receive-region address, ``mine`` this rank's receive-region address.
    """
    n = inp.numel()
    ostride = n if ostride is None else ostride
    grid = max(1, min(cdiv(n, block), blocks, MAX_BLOCKS))
    slot = slot_bytes // inp.element_size()
    consts = (("WS", world), ("BLOCK", block), ("BITS", inp.element_size() * 8),
              ("TIMER", timer))
    key = (inp.dtype, consts, warps, inp.data_ptr() % 16, out.data_ptr() % 16, int_spec(n),
           int_spec(ostride), push_tab, mine, rank, int_spec(slot), int_spec(timeout))
    _launch(key, grid, (inp, out, push_tab, mine, meta, err, rank, n, ostride, slot, timeout),
            consts, warps)
