"""copy_engine: an all-reduce, an all-gather and a pull whose data crosses NVLink by
``cudaMemcpy`` (the GPU's copy engines), not by SM loads and stores; only one-program
barriers (and the all-reduce's sum) run on SMs.

For collectives hidden behind compute: the copy engines leave the SMs to the matmuls
that the collective overlaps. ``all_reduce`` cuts the message into ``world`` contiguous
chunks; rank ``r`` owns chunk ``r``::

    barrier                      peers are done with this workspace's previous use
    for p != r: contribs[p][slot r] <- x[chunk p]        (copy engine, remote write)
    barrier                      every contribution to my chunk has landed
    x[chunk r] = sum over ranks, in rank order          (SMs, local memory only)
    for p != r: data[p][chunk r] <- x[chunk r]          (copy engine, remote write)
    barrier                      every reduced chunk has landed
    for p != r: x[chunk p] <- data[r][chunk p]          (copy engine, local)

Every chunk is summed once, by its owner, so every rank holds bitwise the same result.
In place on ``x``; messages larger than the data region go in pieces, in the same order
on every rank. ``ws`` is a ``Workspace`` of its own: the barriers use its signal pads'
program-0 slots, so it must not be shared with kernels running on another stream.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import Launcher, int_spec
from .signals import block_barrier


@triton.jit(do_not_specialize=["rank", "timeout"])
def _barrier_kernel(err_ptr, pad_tab, rank, timeout, WS: tl.constexpr, TIMER: tl.constexpr):
    block_barrier(pad_tab, rank, err_ptr, timeout, WS, TIMER)


_launch = Launcher(_barrier_kernel)


def barrier(ws, timeout: int, timer: bool) -> None:
    """Meet every rank of ``ws`` on the current stream (one program, bounded spin)."""
    consts = (("WS", ws.world), ("TIMER", timer))
    key = (consts, ws.rank, ws.pad_addr, int_spec(timeout))
    _launch(key, 1, (ws.err, ws.pad_addr, ws.rank, timeout), consts, 1)


def chunks(n: int, world: int) -> list[tuple[int, int]]:
    """``world`` contiguous [lo, hi) ranges covering ``n`` elements, multiples of 16
    elements long except the last ones (which may be short or empty)."""
    per_rank = -(-n // world)
    step = max(16, -(-per_rank // 16) * 16)
    return [(min(n, p * step), min(n, (p + 1) * step)) for p in range(world)]


def _reduce(parts: list[torch.Tensor], out: torch.Tensor, average: bool) -> None:
    """``out`` = the sum of ``parts`` in order, accumulated in float32 (``out`` may be one
    of them)."""
    if len(parts) == 2 and not average:
        torch.add(parts[0], parts[1], out=out)  # computes in float32 for 16-bit dtypes
        return
    acc = parts[0].to(torch.float32, copy=True)
    for p in parts[1:]:
        acc += p
    if average:
        acc /= len(parts)
    out.copy_(acc)


def _copy_all(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """``dst.copy_(src)`` for every pair: ``cudaMemcpyAsync`` for contiguous tensors on one
    device (a copy engine), also when ``src`` or ``dst`` is a peer's mapped workspace."""
    for dst, src in pairs:
        dst.copy_(src)


def all_reduce(ws, x: torch.Tensor, *, timeout: int, timer: bool,
               average: bool = False) -> None:
    """Sum (or average) the flat, contiguous ``x`` over the group of ``ws``, in place."""
    world, rank = ws.world, ws.rank
    data = ws.views(x.dtype)
    contribs, _ = ws.scratch(x.dtype)
    cap = ws.capacity(x.dtype) // (16 * world) * (16 * world)
    for off in range(0, x.numel(), cap):
        piece = x[off:off + cap]
        bounds = chunks(piece.numel(), world)
        lo, hi = bounds[rank]
        size = bounds[0][1] - bounds[0][0]  # a contribution slot: the longest chunk
        barrier(ws, timeout, timer)
        _copy_all([(contribs[p][rank * size:rank * size + phi - plo], piece[plo:phi])
                   for p, (plo, phi) in enumerate(bounds) if p != rank and phi > plo])
        barrier(ws, timeout, timer)
        if hi > lo:
            parts = [piece[lo:hi] if q == rank else contribs[rank][q * size:q * size + hi - lo]
                     for q in range(world)]
            _reduce(parts, piece[lo:hi], average)
            _copy_all([(data[p][lo:hi], piece[lo:hi]) for p in range(world) if p != rank])
        barrier(ws, timeout, timer)
        _copy_all([(piece[plo:phi], data[rank][plo:phi])
                   for p, (plo, phi) in enumerate(bounds) if p != rank and phi > plo])


def all_gather(ws, x: torch.Tensor, out: torch.Tensor, *, timeout: int, timer: bool) -> None:
    """``out`` (``world`` times the flat, contiguous ``x``) = every rank's ``x`` in rank
    order, with no SM work but the barriers::

        barrier                      peers are done with this workspace's previous use
        for p != r: scratch[p][slot r] <- x           (copy engine, remote write)
        barrier                      every peer's x has landed
        out[r] <- x; out[q] <- scratch[r][slot q]    (copy engine, local)

    The overlap pass turns an all-reduce into this plus a sum that Inductor fuses into
    the consumers (``commrt.fx``), so that no kernel waits on the compute's SMs."""
    world, rank = ws.world, ws.rank
    # the whole scratch region (two data regions): one piece for a full data region at
    # world size 2
    contribs = [b[ws.scratch_off:ws.push_off].view(x.dtype) for b in ws.buffers]
    n = x.numel()
    slot = 2 * ws.capacity(x.dtype) // (16 * world) * 16
    for off in range(0, n, slot):
        m = min(slot, n - off)
        piece = x[off:off + m]
        barrier(ws, timeout, timer)
        _copy_all([(contribs[p][rank * slot:rank * slot + m], piece)
                   for p in range(world) if p != rank])
        barrier(ws, timeout, timer)
        _copy_all([(out[q * n + off:q * n + off + m],
                    piece if q == rank else contribs[rank][q * slot:q * slot + m])
                   for q in range(world)])


def pull(ws, landing: list[torch.Tensor], offset: int, out: torch.Tensor, *, timeout: int,
         timer: bool) -> None:
    """``out`` = every other rank's ``n = out.numel() // (world - 1)`` elements at byte
    ``offset`` of its landing buffer, in rank order; each rank has packed its own there on
    the stream this one follows::

        barrier                      every rank's data is in its landing buffer
        for p != r: out[slot] <- landing[p][offset:]   (copy engine, remote read)
        barrier                      every rank has read its peers': landing reusable

    No local copy: a same-device ``cudaMemcpy`` stalls the compute it overlaps as an SM
    copy does, while a remote read leaves no gap (``benchmarks/probes/probe_local_copy.py``).
    ``landing[p]``: rank ``p``'s buffer as mapped here (uint8)."""
    world, rank = ws.world, ws.rank
    n = out.numel() // (world - 1)
    nbytes = n * out.element_size()
    barrier(ws, timeout, timer)
    peers = [p for p in range(world) if p != rank]
    _copy_all([(out[i * n:(i + 1) * n], landing[p][offset:offset + nbytes].view(out.dtype))
               for i, p in enumerate(peers)])
    barrier(ws, timeout, timer)
