"""Runs a chosen symmetric-memory algorithm on flat tensors: the launchers' one caller.

Maps algorithm names to the kernel launchers in ``commrt.symm_mem`` and feeds them the
workspace pieces (peer views, pointer tables, signal pads). Messages larger than the
data region are reduced in workspace-sized pieces, in the same order on every rank.
PyTorch's ops and ``nccl_symm`` (NCCL's symmetric kernel, through the process group on the
NCCL-registered workspace) take the input at the start of the data region: copied there
unless it is a ``comm.empty`` tensor already, never larger than the region.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from commrt import pg
from commrt.dispatch.dispatcher import NOT_IN_PLACE
from commrt.symm_mem import fused_rmsnorm as fused
from commrt.symm_mem import torch_ops
from commrt.symm_mem.one_shot import one_shot
from commrt.symm_mem.one_shot_push import one_shot_push
from commrt.symm_mem.two_shot import two_shot
from commrt.symm_mem.two_shot_push import piece_elems, two_shot_push
from commrt.symm_mem.workspace import Workspace

# How many poll iterations stand for the timeout under the Triton interpreter (CPU).
_INTERPRETER_SPINS = 30_000  # ~10 s of interpreted polling: a busy 2-core CI must not trip it


def _timeout(seconds: float, timer: bool) -> int:
    return int(seconds * 1e9) if timer else _INTERPRETER_SPINS


def _pull(kernel, ws: Workspace, inp: torch.Tensor, out: torch.Tensor, config, timeout: float,
          out_may_alias: bool) -> None:
    timer = inp.device.type == "cuda"
    bufs = ws.views(inp.dtype)
    mine = bufs[ws.rank]
    cap = ws.data_bytes // inp.element_size()
    n = inp.numel()
    if n <= cap and (out_may_alias or not ws.holds(out)):  # the common case: one piece
        kernel(inp=inp, out=out, mine=mine, bufs=bufs, pad_tab=ws.pad_addr, err=ws.err,
               rank=ws.rank, timeout=_timeout(timeout, timer), timer=timer, **config)
        return
    for off in range(0, n, cap):
        m = min(cap, n - off)
        piece_in, piece_out = inp[off:off + m], out[off:off + m]
        # one_shot reads every workspace until its last barrier: it must not write there.
        tmp = None
        if not out_may_alias and ws.holds(piece_out):
            tmp = piece_out
            piece_out = torch.empty_like(piece_in)
        kernel(inp=piece_in, out=piece_out, mine=mine, bufs=bufs, pad_tab=ws.pad_addr,
               err=ws.err, rank=ws.rank, timeout=_timeout(timeout, timer), timer=timer,
               **config)
        if tmp is not None:
            tmp.copy_(piece_out)


def _scatter_gather(ws: Workspace, inp: torch.Tensor, out: torch.Tensor, config,
                    timeout: float) -> None:
    """two_shot_push: contributions land in the scratch region, reduced shards in every
    rank's data region. A ``comm.empty`` tensor reduced in place is therefore done after
    the second stage: its final copy is skipped. (An input in the data region is still read
    correctly: peers write a tile there only after this rank has sent it.)"""
    timer = inp.device.type == "cuda"
    contribs, _ = ws.scratch(inp.dtype)
    results = ws.views(inp.dtype)
    piece = piece_elems(ws.data_bytes // inp.element_size(), ws.world)
    n = inp.numel()
    if ws.holds(out) and (n > piece or not ws.is_data_start(out)):
        tmp = torch.empty_like(inp)  # the pieces' results would trample ``out``
        _scatter_gather(ws, inp, tmp, config, timeout)
        out.copy_(tmp)
        return
    for off in range(0, n, piece):
        m = min(piece, n - off)
        o = out[off:off + m]
        two_shot_push(inp=inp[off:off + m], out=o, contribs=contribs, results=results,
                      pad_tab=ws.pad_addr, err=ws.err, rank=ws.rank,
                      timeout=_timeout(timeout, timer), timer=timer,
                      gather=o.data_ptr() != results[ws.rank].data_ptr(), **config)


def run(algorithm: str, ws: Workspace, inp: torch.Tensor, out: torch.Tensor,
        config: dict, timeout: float, group: dist.ProcessGroup | None = None) -> None:
    """Sum the flat, contiguous ``inp`` over the group into the flat ``out``.

    ``group`` (the workspace's process group) serves ``nccl_symm``, which reduces through it.
    """
    if algorithm in ("one_shot", "two_shot"):
        kernel = one_shot if algorithm == "one_shot" else two_shot
        _pull(kernel, ws, inp, out, config, timeout,
              out_may_alias=algorithm not in NOT_IN_PLACE)
    elif algorithm == "two_shot_push":
        _scatter_gather(ws, inp, out, config, timeout)
    elif algorithm == "one_shot_push":
        timer = inp.device.type == "cuda"
        one_shot_push(inp=inp, out=out, push_tab=ws.push_addr, mine=ws.push_mine,
                      slot_bytes=ws.slot_bytes, meta=ws.meta, err=ws.err, rank=ws.rank,
                      world=ws.world, timeout=_timeout(timeout, timer), timer=timer, **config)
    else:
        symm_inp = inp if ws.is_data_start(inp) else ws.views(inp.dtype)[ws.rank][:inp.numel()]
        if symm_inp.data_ptr() != inp.data_ptr():
            symm_inp.copy_(inp)
        if algorithm == "nccl_symm":
            _nccl_symm(symm_inp, out, group)
        else:
            torch_ops.run(algorithm, symm_inp=symm_inp, out=out, group_name=ws.group_name)


def _nccl_symm(symm_inp: torch.Tensor, out: torch.Tensor, group: dist.ProcessGroup | None) -> None:
    """NCCL's symmetric kernel: the process group's own all-reduce (never a patched
    ``dist.all_reduce``) in place on the NCCL-registered workspace, then into ``out``."""
    pg.all_reduce(symm_inp, group=group)
    if symm_inp.data_ptr() != out.data_ptr():
        out.copy_(symm_inp.view(out.shape))


def run_fused(algorithm: str, ws: Workspace, x: torch.Tensor, residual: torch.Tensor,
              weight: torch.Tensor, normed: torch.Tensor, new_res: torch.Tensor, eps: float,
              config, timeout: float) -> None:
    """All-reduce ``x`` ([rows, hidden], contiguous) fused with residual add and RMSNorm."""
    timer = x.device.type == "cuda"
    common = dict(weight=weight, eps=eps, pad_tab=ws.pad_addr, err=ws.err, rank=ws.rank,
                  timeout=_timeout(timeout, timer), timer=timer, **config)
    rows, hidden = x.shape
    elems = ws.data_bytes // x.element_size()
    if algorithm == "one_shot_push":
        common.pop("pad_tab")
        fused.one_shot_push_rmsnorm(x=x, residual=residual, normed=normed, new_res=new_res,
                                    push_tab=ws.push_addr, mine=ws.push_mine,
                                    slot_bytes=ws.slot_bytes, meta=ws.meta, world=ws.world,
                                    resident=ws.sm_count, **common)
        return
    if algorithm == "one_shot":
        bufs = ws.views(x.dtype)
        step = max(1, elems // hidden)
        launch = lambda sl: fused.one_shot_rmsnorm(  # noqa: E731
            x=x[sl], residual=residual[sl], normed=normed[sl], new_res=new_res[sl],
            mine=bufs[ws.rank], bufs=bufs, **common)
    elif algorithm == "two_shot_push":
        contribs, results = ws.scratch(x.dtype)
        step = max(1, elems // (2 * ws.world * hidden)) * ws.world
        launch = lambda sl: fused.two_shot_rmsnorm(  # noqa: E731
            x=x[sl], residual=residual[sl], normed=normed[sl], new_res=new_res[sl],
            contribs=contribs, results=results, **common)
    else:
        raise ValueError(f"no fused kernel for {algorithm}")
    for start in range(0, rows, step):
        launch(slice(start, min(rows, start + step)))
