"""Per-rank body of the Triton-interpreter kernel tests (imported by plain name so that
spawned ranks can unpickle it)."""

from __future__ import annotations

import torch
from interpret_ranks import serve_rank
from kernel_cases import EPS, fused_inputs, make_input

SMALL = {"block": 64, "warps": 1, "blocks": 4}  # several programs and grid-stride loops
FUSED_CFG = {"warps": 1, "blocks": 3}


def _rank_main(rank, world, names, cases, barrier, queue, skip):
    serve_rank(rank, names, barrier, queue,
               lambda ws: _calls(ws, rank, world, cases, skip))


def _calls(ws, rank: int, world: int, cases, skip) -> list:
    """This rank's outputs of every case, in order (None for a skipped call)."""
    from commrt import custom

    outs = []
    for call, (algo, dtype, n, inplace) in enumerate(cases):
        if (rank, call) in skip:
            outs.append(None)
            continue
        if isinstance(n, tuple):  # fused: n = (rows, hidden), inplace: the split
            x, res, w = fused_inputs(rank, call, n, dtype)
            normed, new_res = torch.empty_like(x), torch.empty_like(x)
            # the interpreter runs a rank's programs one after another, and a split row
            # waits for parts that other programs push: one program does them all here
            split = int(inplace) or 1
            cfg = dict(FUSED_CFG, split=split, **({"blocks": 1} if split > 1 else {}))
            custom.run_fused(algo, ws, x, res, w, normed, new_res, EPS, cfg, 1.0)
            outs.append(torch.cat([normed, new_res]))
            continue
        x = make_input(0, rank, call, n, dtype)
        if inplace == "ws-mixed":  # rank 0 in place on comm.empty, the others not
            inplace = "ws" if rank == 0 else True
        if inplace in ("ws", "ws-from"):  # x lives in the data region (comm.empty)
            x = ws.empty((n,), dtype).copy_(x)
        out = x if inplace in (True, "ws") else torch.full_like(x, float("nan"))
        before = x.clone()
        name, extra = algo if isinstance(algo, tuple) else (algo, {})
        custom.run(name, ws, x, out, dict(SMALL, **extra), timeout=1.0)
        # an ordinary input reduced out of place stays as it was (a comm.empty one is
        # the workspace: its contents afterwards are unspecified)
        if out is not x and inplace != "ws-from" and not torch.equal(x, before):
            raise AssertionError(f"call {call} ({algo}, {inplace}): the input changed")
        outs.append(out.clone())
    return outs


