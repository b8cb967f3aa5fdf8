"""Runs commrt's all-gather and reduce-scatter kernels on flat tensors.

Semantics are those of ``torch.distributed.all_gather_into_tensor(out, inp)`` (``out`` is
every rank's ``inp`` in rank order) and ``reduce_scatter_tensor(out, inp)`` (``inp`` holds
``world`` chunks of ``out.numel()`` elements; rank ``r`` gets the sum over ranks of chunk
``r``, summed in rank order in fp32). Messages larger than a workspace region go in
pieces, in the same order on every rank. Algorithms:

    all-gather       ag_push   Lamport receive slots, no barrier (smallest messages)
                     ag_bw     remote writes into the peers' data regions, two barriers
    reduce-scatter   rs_pull   copy into the data region, read the peers', two barriers
                     rs_push   remote writes into the peers' contribution areas (scratch)
"""

from __future__ import annotations

import torch

from commrt.custom import _timeout
from commrt.symm_mem.all_gather import all_gather, piece_elems
from commrt.symm_mem.all_gather_push import all_gather_push
from commrt.symm_mem.reduce_scatter import reduce_scatter
from commrt.symm_mem.reduce_scatter_push import reduce_scatter_push
from commrt.symm_mem.workspace import Workspace

ALL_GATHER_ALGORITHMS = ("ag_push", "ag_bw")
REDUCE_SCATTER_ALGORITHMS = ("rs_pull", "rs_push")
# Lamport slots carry 16- or 32-bit float words; the reduce-scatters sum in fp32.
PUSH_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
REDUCE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check(kind: str, small: torch.Tensor, big: torch.Tensor, world: int) -> None:
    if big.numel() != world * small.numel() or big.dtype != small.dtype:
        raise ValueError(f"{kind}: the large tensor must hold world ({world}) times the small "
                         f"one's elements of the same dtype; got {big.numel()} {big.dtype} "
                         f"and {small.numel()} {small.dtype}")


def _common(ws: Workspace, t: torch.Tensor, timeout: float) -> dict:
    timer = t.device.type == "cuda"
    return dict(err=ws.err, rank=ws.rank, timeout=_timeout(timeout, timer), timer=timer)


def _chunk_of(big: torch.Tensor, small: torch.Tensor, rank: int) -> bool:
    """True when ``small`` is exactly chunk ``rank`` of ``big``."""
    return small.data_ptr() == big.data_ptr() + rank * small.numel() * small.element_size()


def run_all_gather(algorithm: str, ws: Workspace, inp: torch.Tensor, out: torch.Tensor,
                   config: dict, timeout: float) -> None:
    """Gather the flat, contiguous ``inp`` of every rank into the flat ``out`` (world * n).

    ``inp`` may be this rank's chunk of ``out``; ``config`` holds the launch config
    (``block``, ``warps``, ``blocks``). ``ag_push`` takes fp32, bf16 and fp16 (a 16-bit
    -0.0 arrives as +0.0); ``ag_bw`` copies any dtype bit for bit.
    """
    _check("all_gather", inp, out, ws.world)
    n = inp.numel()
    if n == 0:
        return
    if algorithm == "ag_push":
        if inp.dtype not in PUSH_DTYPES:
            raise ValueError(f"ag_push gathers {PUSH_DTYPES}, not {inp.dtype}; use ag_bw")
        piece = ws.slot_bytes // inp.element_size()
        for off in range(0, n, piece):
            all_gather_push(inp=inp[off:off + piece], out=out[off:], ostride=n,
                            push_tab=ws.push_addr, mine=ws.push_mine, slot_bytes=ws.slot_bytes,
                            meta=ws.meta, world=ws.world, **_common(ws, inp, timeout), **config)
    elif algorithm == "ag_bw":
        _gather_bw(ws, inp, out, config, timeout)
    else:
        raise ValueError(f"{algorithm!r} is not an all-gather algorithm; expected one of "
                         f"{', '.join(ALL_GATHER_ALGORITHMS)}")


def _gather_bw(ws: Workspace, inp: torch.Tensor, out: torch.Tensor, config: dict,
               timeout: float) -> None:
    """The peers write into this rank's data region: an output there is done in place only
    when it is the region's start (one piece), an input there only as its chunk ``rank``."""
    bufs = ws.views(inp.dtype)
    n = inp.numel()
    piece = piece_elems(ws.capacity(inp.dtype), ws.world)
    in_place = n <= piece and ws.is_data_start(out)
    if ws.holds(out) and not in_place:
        tmp = torch.empty_like(out)
        _gather_bw(ws, inp, tmp, config, timeout)
        out.copy_(tmp)
        return
    if ws.holds(inp) and not (in_place and _chunk_of(out, inp, ws.rank)):
        inp = inp.clone()  # the peers' chunks would land on it
    for off in range(0, n, piece):
        all_gather(inp=inp[off:off + piece], out=out[off:], ostride=n, mine=bufs[ws.rank],
                   bufs=bufs, pad_tab=ws.pad_addr, **_common(ws, inp, timeout), **config)


def run_reduce_scatter(algorithm: str, ws: Workspace, inp: torch.Tensor, out: torch.Tensor,
                       config: dict, timeout: float) -> None:
    """Sum chunk ``rank`` of every rank's flat, contiguous ``inp`` (world * n) into ``out``.

    ``out`` may be this rank's chunk of ``inp``; ``config`` holds the launch config
    (``block``, ``warps``, ``blocks``; ``rs_push`` also ``round_tiles``).
    """
    _check("reduce_scatter", out, inp, ws.world)
    if inp.dtype not in REDUCE_DTYPES:
        raise ValueError(f"{algorithm} reduces {REDUCE_DTYPES}, not {inp.dtype}")
    n = out.numel()
    if n == 0:
        return
    if algorithm == "rs_pull":
        _scatter_pull(ws, inp, out, config, timeout)
    elif algorithm == "rs_push":
        contribs, _ = ws.scratch(inp.dtype)
        piece = piece_elems(ws.capacity(inp.dtype), ws.world)
        for off in range(0, n, piece):
            reduce_scatter_push(inp=inp[off:], out=out[off:off + piece], istride=n,
                                contribs=contribs, pad_tab=ws.pad_addr,
                                **_common(ws, inp, timeout), **config)
    else:
        raise ValueError(f"{algorithm!r} is not a reduce-scatter algorithm; expected one of "
                         f"{', '.join(REDUCE_SCATTER_ALGORITHMS)}")


def _scatter_pull(ws: Workspace, inp: torch.Tensor, out: torch.Tensor, config: dict,
                  timeout: float) -> None:
    """The peers read this rank's data region until the kernel's last barrier: an input
    there is used in place when it is the region's start (one piece), and the output may
    be there only as this rank's chunk of such an input (the chunk no peer reads)."""
    bufs = ws.views(inp.dtype)
    n = out.numel()
    piece = piece_elems(ws.capacity(inp.dtype), ws.world)
    direct = n <= piece and ws.is_data_start(inp)
    if ws.holds(out) and not (direct and _chunk_of(inp, out, ws.rank)):
        tmp = torch.empty_like(out)
        _scatter_pull(ws, inp, tmp, config, timeout)
        out.copy_(tmp)
        return
    if ws.holds(inp) and not direct:
        inp = inp.clone()  # the pieces' copies into the region would trample it
    for off in range(0, n, piece):
        reduce_scatter(inp=inp[off:], out=out[off:off + piece], istride=n,
                       mine=bufs[ws.rank], bufs=bufs, pad_tab=ws.pad_addr,
                       **_common(ws, inp, timeout), **config)
