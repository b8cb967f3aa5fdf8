"""Signal-pad primitives shared by the kernels: bounded spins and a block-wise barrier.

A signal pad is an ``int32`` region of ``MAX_BLOCKS * MAX_WORLD`` slots in each rank's
symmetric workspace; slot ``block * world + peer`` on rank ``r`` is written only by
``peer`` and cleared only by ``r``. The pointer table ``pad_tab`` holds every rank's pad address.
Time limits are in nanoseconds of ``%globaltimer`` when ``TIMER`` is set, else in poll
iterations (the Triton interpreter has no inline asm).
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
def spin_cas(ptr, cmp, val, err_ptr, peer, timeout, SEM: tl.constexpr, TIMER: tl.constexpr):
    """Retry ``atomic_cas(ptr, cmp -> val)`` at system scope until it succeeds.

    Contract: returns once the swap happened, with ``SEM`` ordering (release: this
    thread's earlier writes, and the block's after a ``debug_barrier``, are visible to
    whoever sees ``val``; acquire: later reads see what the peer wrote before it
    released). After ``timeout`` it stops, stores ``peer + 1`` to ``err_ptr`` and
    returns without the swap.
    """
    t0 = now(TIMER)
    old = tl.atomic_cas(ptr, cmp, val, sem=SEM, scope="sys")
    waited = tl.zeros([], tl.int64)
    while (old != cmp) & (waited < timeout):
        old = tl.atomic_cas(ptr, cmp, val, sem=SEM, scope="sys")
        if TIMER:
            waited = now(TIMER) - t0
        else:
            waited += 1
    if old != cmp:
        tl.store(err_ptr, peer + 1)


@triton.jit
def _spin_cas_peers(ptrs, peers, rank, cmp, val, err_ptr, timeout, WS: tl.constexpr,
                    SEM: tl.constexpr, TIMER: tl.constexpr):
    """``spin_cas`` on one slot per peer at once (lane ``p`` of ``ptrs`` is peer ``p``'s;
    this rank's lane and the padding lanes do nothing): each lane retries only its own
    swap, so the peers' round trips overlap instead of following each other. After
    ``timeout`` it stores the lowest peer still missing, plus one, to ``err_ptr``."""
    done = (peers == rank) | (peers >= WS)
    vals = tl.zeros_like(peers) + val
    t0 = now(TIMER)
    # a lane that is done compares with -1, which a slot never holds: its swap fails
    old = tl.atomic_cas(ptrs, tl.where(done, -1, cmp), vals, sem=SEM, scope="sys")
    done = done | (old == cmp)
    waited = tl.zeros([], tl.int64)
    while (tl.min(done.to(tl.int32), axis=0) == 0) & (waited < timeout):
        old = tl.atomic_cas(ptrs, tl.where(done, -1, cmp), vals, sem=SEM, scope="sys")
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

    Contract (pseudocode, per program ``b``; beyond one peer the swaps run in parallel
    lanes, one per peer)::

        sync block; for p != rank: cas(pad[p][b][rank], 0 -> 1, release)   # "I am here"
        for p != rank: cas(pad[rank][b][p], 1 -> 0, acquire); sync block   # "p was here"

    On return every peer's program ``b`` has finished everything it did before the
    barrier, and its writes are visible here. Each slot goes 0 -> 1 -> 0 within one
    barrier, so pads are clean afterwards: safe for back-to-back calls and CUDA-graph
    replays with no host reset. A send waits for the previous signal to be consumed.
    """
    pid = tl.program_id(0)
    tl.debug_barrier()
    tab = pad_tab.to(tl.pointer_type(tl.uint64))
    local = tl.load(tab + rank).to(tl.pointer_type(tl.int32))
    if WS == 2:  # one peer: a plain swap, no idle lanes
        peer = 1 - rank
        remote = tl.load(tab + peer).to(tl.pointer_type(tl.int32))
        spin_cas(remote + pid * WS + rank, 0, 1, err_ptr, peer, timeout, "release", TIMER)
        spin_cas(local + pid * WS + peer, 1, 0, err_ptr, peer, timeout, "acquire", TIMER)
    else:
        peers = tl.arange(0, _LANES)
        bases = tl.load(tab + peers, mask=peers < WS, other=0)
        # lanes that do nothing point at this rank's own slot of this program, never swapped
        idle = (peers == rank) | (peers >= WS)
        remote = tl.where(idle, tl.load(tab + rank), bases).to(tl.pointer_type(tl.int32))
        _spin_cas_peers(remote + pid * WS + rank, peers, rank, 0, 1, err_ptr, timeout, WS,
                        "release", TIMER)
        _spin_cas_peers(local + pid * WS + tl.where(idle, rank, peers), peers, rank, 1, 0,
                        err_ptr, timeout, WS, "acquire", TIMER)
    tl.debug_barrier()
