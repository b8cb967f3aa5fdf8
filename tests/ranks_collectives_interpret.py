"""Per-rank body of the interpreter tests of the all-gather and reduce-scatter kernels
(imported by plain name so that spawned ranks can unpickle it).

A case is ``(algorithm, dtype, n, mode)``: ``n`` is one rank's all-gather input (or
reduce-scatter output) in elements; ``algorithm`` may be ``(name, launch-config extras)``.
Modes place the tensors:

    all-gather      "out"      ordinary input and output
                    "inplace"  the input is this rank's chunk of an ordinary output
                    "ws"       the output is a comm.empty tensor, the input its chunk rank
                    "ws-in"    the input is a comm.empty tensor, the output ordinary
    reduce-scatter  "out"      ordinary input and output
                    "inplace"  the output is this rank's chunk of an ordinary input
                    "ws"       the input is a comm.empty tensor, the output ordinary
                    "ws-inplace" the input is a comm.empty tensor, the output its chunk rank
    all-reduce      an all-reduce algorithm's name, mode True/False: in place or not
"""

from __future__ import annotations

import torch
from interpret_ranks import serve_rank
from kernel_cases import collective_input

SMALL = {"block": 64, "warps": 1, "blocks": 4}  # several programs and grid-stride loops


def _gather(ws, name, cfg, x, mode):
    from commrt.collective_kernels import run_all_gather

    n, world, rank = x.numel(), ws.world, ws.rank
    if mode == "ws":
        out = ws.empty((world * n,), x.dtype).fill_(float("nan"))
    else:
        out = torch.full((world * n,), float("nan"), dtype=x.dtype)
    if mode in ("inplace", "ws"):
        inp = out[rank * n:(rank + 1) * n].copy_(x)
    elif mode == "ws-in":
        inp = ws.empty((n,), x.dtype).copy_(x)
    else:
        inp = x.clone()
    run_all_gather(name, ws, inp, out, cfg, timeout=1.0)
    if mode == "out" and not torch.equal(inp, x):
        raise AssertionError(f"{name}: the input changed")
    return out.clone()


def _scatter(ws, name, cfg, x, mode):
    from commrt.collective_kernels import run_reduce_scatter

    world, rank = ws.world, ws.rank
    n = x.numel() // world
    inp = ws.empty((x.numel(),), x.dtype).copy_(x) if mode.startswith("ws") else x.clone()
    if mode in ("inplace", "ws-inplace"):
        out = inp[rank * n:(rank + 1) * n]
    else:
        out = torch.full((n,), float("nan"), dtype=x.dtype)
    run_reduce_scatter(name, ws, inp, out, cfg, timeout=1.0)
    if mode == "out" and not torch.equal(inp, x):
        raise AssertionError(f"{name}: the input changed")
    return out.clone()


def _rank_main(rank, world, names, cases, barrier, queue, skip):
    serve_rank(rank, names, barrier, queue,
               lambda ws: _calls(ws, rank, world, cases, skip))


def _calls(ws, rank: int, world: int, cases, skip) -> list:
    """This rank's outputs of every case, in order (None for a skipped call)."""
    from commrt import custom

    outs = []
    for call, (algo, dtype, n, mode) in enumerate(cases):
        if (rank, call) in skip:
            outs.append(None)
            continue
        name, extra = algo if isinstance(algo, tuple) else (algo, {})
        cfg = dict(SMALL, **extra)
        x = collective_input(name, rank, call, n, dtype, world)
        if name.startswith("ag_"):
            outs.append(_gather(ws, name, cfg, x, mode))
        elif name.startswith("rs_"):
            outs.append(_scatter(ws, name, cfg, x, mode))
        else:
            out = x if mode else torch.empty_like(x)
            custom.run(name, ws, x, out, cfg, timeout=1.0)
            outs.append(out.clone())
    return outs
