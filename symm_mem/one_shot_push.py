"""one_shot_push (Lamport style): no barrier at all, for the smallest messages.

Each rank writes its input straight into slot ``rank`` of the current receive buffer on
every peer; a receive slot holds a sentinel that data never takes, so a reader polls
the peers' slots until no sentinel is left, then sums them with its own input in rank
order. Three receive buffers rotate: during call ``k`` (buffer ``k % 3``) peers may
already write buffer ``(k + 1) % 3``, so this rank clears buffer ``(k + 2) % 3``, last
used at call ``k - 1``.

Sentinel: every 16-bit half of a cleared slot is ``0x8000``. For bf16/fp16 that is -0.0,
and inputs of -0.0 are sent as +0.0 (same value). For fp32 the sentinel word is
``0x80008000`` (a negative denormal near -4.6e-41), sent as its neighbour ``0x80008001``.

``meta`` (this rank's, int32): ``[buffer, arrivals, used0, used1, used2]``; ``usedB`` is
how many 16-bit halves per slot buffer B holds, so the clear covers exactly that.
The last program to finish pushing (and clearing) moves to the next buffer, so graph
replays keep rotating.

With ``PDL`` the grid is launched as a programmatic dependent of the kernel before it
(typically the GEMM that produced the input): its programs get resident while that kernel
drains and wait (``griddepcontrol.wait``) for its memory before reading anything.
"""

import torch
import triton
import triton.language as tl

from .launch import Launcher, cdiv, int_spec
from .signals import MAX_BLOCKS, now

SENTINEL16 = -32768  # 0x8000 as int16
SENTINEL32 = -2147450880  # 0x80008000 as int32
META_INTS = 5


@triton.jit
def to_bits(x, BITS: tl.constexpr):
    """Value -> integer bits with the sentinel pattern made impossible."""
    if BITS == 16:
        b = (x.to(tl.float32) + 0.0).to(x.dtype).to(tl.int16, bitcast=True)
    else:
        b = x.to(tl.int32, bitcast=True)
        b = tl.where(b == -2147450880, b + 1, b)
    return b


@triton.jit
def poll_slot(src, m, err_ptr, peer, timeout, BITS: tl.constexpr, TIMER: tl.constexpr):
    """Load a receive-slot tile, re-reading until no element holds the sentinel.

    Contract: returns the tile once every masked-in element was written by ``peer``
    (each element is its own flag: no ordering between elements is needed). After
    ``timeout`` it stores ``peer + 1`` to ``err_ptr`` and returns what it has.
    """
    sentinel = -32768 if BITS == 16 else -2147450880
    v = tl.load(src, mask=m, other=0, volatile=True)
    t0 = now(TIMER)
    waited = tl.zeros([], tl.int64)
    while (tl.max((v == sentinel).to(tl.int32)) > 0) & (waited < timeout):
        v = tl.load(src, mask=m, other=0, volatile=True)
        if TIMER:
            waited = now(TIMER) - t0
        else:
            waited += 1
    if tl.max((v == sentinel).to(tl.int32)) > 0:
        tl.store(err_ptr, peer + 1)
    return v


@triton.jit
def clear_old(meta, mine, buf, WS: tl.constexpr, BLOCK: tl.constexpr, slot16):
    """Clear buffer (buf + 2) % 3 as far as its last use filled it. Peers write it again
    only two calls on, so this runs while the peers' data of this call is on its way."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    old = (buf + 2) % 3
    halves = tl.load(meta + 2 + old)
    own16 = mine.to(tl.pointer_type(tl.int16))
    for start in range(pid * BLOCK, halves, nprog * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        m = offs < halves
        for p in tl.static_range(WS):
            tl.store(own16 + (old * WS + p) * slot16 + offs, tl.full([BLOCK], -32768, tl.int16),
                     mask=m)


@triton.jit
def move_on(meta, buf, filled):
    """The last program to get here records this call's fill (``filled`` 16-bit halves per
    slot) and moves on a buffer. Call it once this program has read ``buf`` and is done
    with the old buffer's fill: the programs still polling keep their ``buf``, and the next
    call (stream-ordered) reads the new index."""
    tl.debug_barrier()  # every warp of this program has read what it needs from meta
    arrived = tl.atomic_add(meta + 1, 1, sem="acq_rel", scope="gpu")
    if arrived == tl.num_programs(0) - 1:
        tl.store(meta + 2 + buf, filled)
        tl.store(meta + 1, 0)
        tl.store(meta, (buf + 1) % 3)


@triton.jit(do_not_specialize=["rank", "timeout"])
def _push_kernel(inp, out, push_tab, mine, meta, err_ptr, rank, n, slot, timeout,
                 WS: tl.constexpr, BLOCK: tl.constexpr, BITS: tl.constexpr,
                 TIMER: tl.constexpr, PDL: tl.constexpr):
    if PDL:  # everything below reads what the previous kernels wrote
        tl.extra.cuda.gdc_wait()
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    ity = tl.int16 if BITS == 16 else tl.int32
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(inp + offs, mask=offs < n)  # in flight while the buffer index is read
    buf = tl.load(meta, volatile=True)
    tab = push_tab.to(tl.pointer_type(tl.uint64))
    # 1. push: my data into slot `rank` of buffer `buf` on every peer.
    for start in range(pid * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        m = offs < n
        bits = to_bits(x, BITS)
        x = tl.load(inp + offs + step, mask=offs + step < n)  # the next tile, if any
        for p in tl.static_range(WS):
            if p != rank:
                dst = tl.load(tab + p).to(tl.pointer_type(ity)) + (buf * WS + rank) * slot
                tl.store(dst + offs, bits, mask=m)
    # 2. clear the buffer of two calls ago while the peers' pushes are in flight.
    clear_old(meta, mine, buf, WS, BLOCK, slot * (BITS // 16))
    # 3. every program has read `buf`: the last one here moves on a buffer, its atomic's
    #    latency hidden behind the wait below instead of added after it.
    move_on(meta, buf, n * (BITS // 16))
    # 4. poll the peers' slots of buffer `buf` until no sentinel is left, then sum in rank
    #    order; my own term is my input through the same bit mapping the peers received.
    own = mine.to(tl.pointer_type(ity))
    for start in range(pid * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        m = offs < n
        acc = tl.zeros([BLOCK], tl.float32)
        for p in tl.static_range(WS):
            if p == rank:
                v = to_bits(tl.load(inp + offs, mask=m, other=0), BITS)
            else:
                v = poll_slot(own + (buf * WS + p) * slot + offs, m, err_ptr, p, timeout, BITS,
                              TIMER)
            acc += v.to(out.dtype.element_ty, bitcast=True).to(tl.float32)
        tl.store(out + offs, acc.to(out.dtype.element_ty), mask=m)


_launch = Launcher(_push_kernel)


def one_shot_push(*, inp: torch.Tensor, out: torch.Tensor, push_tab: int, mine: int,
                  slot_bytes: int, meta: torch.Tensor, err: torch.Tensor, rank: int, world: int,
                  timeout: int, timer: bool, block: int = 1024, warps: int = 4,
                  blocks: int = 32, pdl: int = 0) -> None:
    """Sum the flat ``inp`` over all ranks into ``out``; ``inp.nbytes <= slot_bytes``.

    ``push_tab`` is a device table of every rank's receive-region address, ``mine`` this
    rank's receive-region address; ``out`` may be ``inp``. ``pdl=1`` launches it as a
    programmatic dependent launch (CUDA only; ignored under the interpreter).
    """
    n = inp.numel()
    grid = max(1, min(cdiv(n, block), blocks, MAX_BLOCKS))
    slot = slot_bytes // inp.element_size()
    pdl = bool(pdl) and timer  # timer: a CUDA tensor, not the interpreter
    consts = (("WS", world), ("BLOCK", block), ("BITS", inp.element_size() * 8),
              ("TIMER", timer), ("PDL", pdl))
    key = (inp.dtype, consts, warps, inp.data_ptr() % 16, out.data_ptr() % 16, int_spec(n),
           push_tab, mine, rank, int_spec(slot), int_spec(timeout))
    _launch(key, grid, (inp, out, push_tab, mine, meta, err, rank, n, slot, timeout), consts,
            warps, pdl)
