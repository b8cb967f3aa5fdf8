"""Signal-pad primitives shared by the kernels: bounded spins and a block-wise barrier.

A signal pad is an ``int32`` region of ``MAX_BLOCKS * MAX_WORLD`` slots in each rank's
symmetric workspace; slot ``block * world + peer`` on rank ``r`` is a counter that only
``peer`` increments and only ``r`` decrements. The pointer table ``pad_tab`` holds every
rank's pad address. Time limits are in nanoseconds of ``%globaltimer`` when ``TIMER`` is set,
else in poll iterations (the Triton interpreter has no inline asm).
"""

import triton
import triton.language as tl

MAX_BLOCKS = 2048  # signal slots per peer; launchers never start more programs than this
MAX_WORLD = 8
PAD_BYTES = MAX_BLOCKS * MAX_WORLD * 4
_LANES = tl.constexpr(MAX_WORLD)  # one lane per peer in the barrier


@triton.jit
def now(TIMER: tl.constexpr):
    """Nanoseconds from ``%globaltimer`` (0 under the interpreter)."""
    if TIMER:
        t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                      is_pure=False, pack=1)
    else:
        t = tl.zeros([], tl.int64)
    return t


@triton.jit
def take_signal(ptr, err_ptr, peer, timeout, TIMER: tl.constexpr):
    """Take one unit from the counter at ``ptr`` (in this rank's memory), waiting for one.

    Contract: returns once the counter was positive and one unit signalled by ``peer``
    was taken (a system-scope swap ``c -> c - 1``), with acquire ordering: later reads
    see what ``peer`` wrote before its release. Scalar atomics run on one thread of the
    program, so the poll costs one request at a time. After ``timeout`` it stops, stores
    ``peer + 1`` to ``err_ptr`` and returns without taking anything.
    """
    t0 = now(TIMER)
    cmp = tl.full([], 1, tl.int32)
    old = tl.atomic_cas(ptr, cmp, cmp - 1, sem="acquire", scope="sys")
    waited = tl.zeros([], tl.int64)
    while (old != cmp) & (waited < timeout):
        cmp = tl.maximum(old, 1)  # two units when the peer is a barrier ahead
        old = tl.atomic_cas(ptr, cmp, cmp - 1, sem="acquire", scope="sys")
        if TIMER:
            waited = now(TIMER) - t0
        else:
            waited += 1
    if old != cmp:
        tl.store(err_ptr, peer + 1)


@triton.jit
def _take_signals(ptrs, peers, rank, err_ptr, timeout, WS: tl.constexpr, TIMER: tl.constexpr):
    """``take_signal`` on one counter per peer at once (lane ``p`` of ``ptrs`` is peer
    ``p``'s; this rank's lane and the padding lanes do nothing), so the peers' signals
    are awaited together. After ``timeout`` it stores the lowest peer still missing, plus
    one, to ``err_ptr``."""
    done = (peers == rank) | (peers >= WS)
    cmp = tl.zeros_like(peers) + 1
    t0 = now(TIMER)
    # a lane that is done compares with -1, which a counter never holds: its swap fails
    old = tl.atomic_cas(ptrs, tl.where(done, -1, cmp), cmp - 1, sem="acquire", scope="sys")
    done = done | (old == cmp)
    waited = tl.zeros([], tl.int64)
    while (tl.min(done.to(tl.int32), axis=0) == 0) & (waited < timeout):
        cmp = tl.maximum(old, 1)
        old = tl.atomic_cas(ptrs, tl.where(done, -1, cmp), cmp - 1, sem="acquire", scope="sys")
        done = done | (old == cmp)
        if TIMER:
            waited = now(TIMER) - t0
        else:
            waited += 1
    missing = tl.min(tl.where(done, WS, peers), axis=0)
    if missing < WS:
        tl.store(err_ptr, missing + 1)


@triton.jit
def block_barrier(pad_tab, rank, err_ptr, timeout, WS: tl.constexpr, TIMER: tl.constexpr):
    """Meet the programs with this program id on every rank.

    Contract (pseudocode, per program ``b``; beyond one peer the lanes, one per peer, run
    in parallel)::

        sync block; for p != rank: atomic_add(pad[p][b][rank], +1, release)  # "I am here"
        for p != rank: take one from pad[rank][b][p] (acquire); sync block   # "p was here"

    On return every peer's program ``b`` has finished everything it did before the
    barrier, and its writes are visible here. The signal is sent without waiting for an
    answer (one link crossing, not a round trip). Each slot is a counter that the peer
    adds one to per barrier and this rank takes one from, so it holds at most 2 (the peer
    may reach the next barrier before this rank took the last signal) and is 0 again
    once both ranks left the barrier: clean after every call, safe for back-to-back
    calls and CUDA-graph replays with no host reset.
    """
    pid = tl.program_id(0)
    tl.debug_barrier()
    tab = pad_tab.to(tl.pointer_type(tl.uint64))
    local = tl.load(tab + rank).to(tl.pointer_type(tl.int32))
    if WS == 2:  # one peer: scalar atomics, one thread, no idle lanes
        peer = 1 - rank
        remote = tl.load(tab + peer).to(tl.pointer_type(tl.int32))
        tl.atomic_add(remote + pid * WS + rank, 1, sem="release", scope="sys")
        take_signal(local + pid * WS + peer, err_ptr, peer, timeout, TIMER)
    else:
        peers = tl.arange(0, _LANES)
        active = (peers != rank) & (peers < WS)
        bases = tl.load(tab + peers, mask=active, other=0).to(tl.pointer_type(tl.int32))
        tl.atomic_add(bases + pid * WS + rank, tl.full([_LANES], 1, tl.int32), mask=active,
                      sem="release", scope="sys")
        # idle lanes point at this rank's own slot of this program, which nobody adds to
        _take_signals(local + pid * WS + tl.where(active, peers, rank), peers, rank, err_ptr,
                      timeout, WS, TIMER)
    tl.debug_barrier()
