"""Where the grid asks 1.3x and commrt misses it, is 1.3x within any scatter's reach?

One GPU. The cells come from a recorded scatter grid (``--grid``): those where the target
asks commrt to be 1.3x faster than Inductor's faster column and it is not. A cell's
distribution, row width, rows and dtype set its floors (``index_add`` and ``index_put``
share them, so each is measured once). For each, in one process, µs a call in a CUDA
graph of 20 calls (median of ``ROUNDS`` rounds taken in turn):

- ``peer``: the column that was faster in the grid (Inductor's plain or partitioned
  ``index_put``), compiled again here; ``asks`` is its time over 1.3;
- ``copy``: ``self.clone()``, the fresh output every out-of-place scatter writes;
- ``stream``: one kernel whose programs copy ``self`` to a fresh output, read the values
  and read the indices: the bytes any out-of-place scatter moves, and nothing else;
- ``atomics``: ``copy``, then one fp32 atomic add of 1 a value element at the cell's
  addresses (the indices loaded, the values not): the floor of a scatter that adds every
  value with its own atomic;
- ``combined``: the same with each block of 4,096 value elements' repeated rows left out
  (as if the block summed them first for free), in the order they come; ``sorted``: the
  same, sorted within each block (as if sorted for free).

``block_distinct`` and ``distinct``: the share of values left after combining the rows
of a block, and of all the indices. The verdict: ``bytes`` where ``stream > asks`` (no
out-of-place scatter reaches 1.3x), else ``atomics`` where the least of the three
atomics' floors is over ``asks`` (no scatter that adds a block's rows with fp32 atomics
does), else ``open``. Each floor kernel's adds are checked once (their count on a zero
fp32 output), and the stream's copy::

    python benchmarks/probes/probe_target_floors.py \\
        [--grid benchmarks/results/scatter_grid_NVIDIA_H200.json] [--out r.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton
import triton.language as tl
from probe_narrow_costs import _parted, _plain, cell_data, meta, rounds

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench_scatter import DTYPES  # noqa: E402

ROUNDS = 3
BLOCK = 4096  # value elements a block (the narrow kernels' block)


@triton.jit
def _stream(self_ptr, out_ptr, n_out, idx_ptr, n_idx, val_ptr, n_val, part_ptr,
            BLOCK: tl.constexpr):
    """Programs in turn: copy ``self`` to ``out``, read the values, read the indices."""
    pid = tl.program_id(0)
    out_blocks = tl.cdiv(n_out, BLOCK)
    val_blocks = tl.cdiv(n_val, BLOCK)
    if pid < out_blocks:
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n_out
        tl.store(out_ptr + offs, tl.load(self_ptr + offs, mask=m), mask=m)
    elif pid < out_blocks + val_blocks:
        offs = (pid - out_blocks).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(val_ptr + offs, mask=offs < n_val, other=0.0).to(tl.float32)
        tl.store(part_ptr + pid, tl.sum(v, 0))
    else:
        offs = (pid - out_blocks - val_blocks).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        i = tl.load(idx_ptr + offs, mask=offs < n_idx, other=0)
        tl.store(part_ptr + pid, tl.sum(i, 0).to(tl.float32))


@triton.jit
def _ones(out_ptr, idx_ptr, n_elems, W: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n_elems
    row = tl.load(idx_ptr + offs // W, mask=m, other=0)
    one = tl.full([BLOCK], 1.0, out_ptr.dtype.element_ty)
    tl.atomic_add(out_ptr + row * W + offs % W, one, mask=m, sem="relaxed")


def missed_cells(grid: dict) -> list[tuple]:
    """(dtype, width, rows, dist, ops, peer column, commrt ms) of each cell that asks 1.3x
    and misses it, one a distribution, width, rows and dtype."""
    cells = {}
    for c in grid["cells"]:
        if not c.get("needs_1.3x") or not c["commrt_over_best_compiled"] > 1 / 1.3:
            continue
        key = (c["dtype"], c["width"], c["rows"], c["dist"])
        ms = c["ms"]
        peer = min(("compiled", "inductor partitioned"), key=lambda k: ms[k])
        ops, _, commrt = cells.get(key, ((), peer, ms["commrt"]))
        cells[key] = ((*ops, c["op"]), peer, commrt)
    return [(*k, *v) for k, v in sorted(cells.items())]


def block_distinct(idx: torch.Tensor, rows: int, width: int) -> tuple:
    """The indices with each block's repeated rows left out: in the order they come (a
    row where it first comes in its block), and sorted within each block."""
    n = idx.numel()
    per = max(1, BLOCK // max(1, width))
    pos = torch.arange(n, device=idx.device)
    keys, where = torch.unique((pos // per) * rows + idx, return_inverse=True)
    first = torch.full_like(keys, n).scatter_reduce_(0, where, pos, "amin")
    keep = torch.zeros(n, dtype=torch.bool, device=idx.device)
    keep[first] = True
    return idx[keep], keys % rows  # unique's keys are sorted: block-major


def padded(idx: torch.Tensor) -> torch.Tensor:
    """``idx`` with its last index repeated up to a multiple of 16 indices, as the cells'
    own counts are: Triton specializes a kernel on a count divisible by 16 (at d989c7a,
    unpadded, rows of 4 on 99.95% of a cell's indices took 23.4 µs against 19.4 on all)."""
    return torch.cat([idx, idx[-1:].expand(-idx.numel() % 16)])


def stream_fn(out, idx, vals):
    res = torch.empty_like(out)
    n = sum(triton.cdiv(t.numel(), BLOCK) for t in (out, idx, vals))
    parts = torch.empty(n, device=out.device)
    grid = (parts.numel(),)

    def call():
        _stream[grid](out, res, out.numel(), idx, idx.numel(), vals, vals.numel(), parts,
                      BLOCK=BLOCK, num_warps=8)
    call()
    assert torch.equal(res, out), "floor stream's copy wrong"
    return call


def ones_fn(out, idx, width: int):
    """``out.clone()``, then an fp32 atomic add of 1 a value element at the rows ``idx``
    (into an fp32 buffer of the output's shape where the output is fp16/bf16: at 327b274
    Triton's scalar bf16 atomics ran up to 250x slower than here on sorted rows)."""
    w = max(1, width)
    n = idx.numel() * w
    grid = (triton.cdiv(n, 1024),)
    acc = None if out.dtype == torch.float32 else torch.zeros(out.shape, device=out.device)

    def call():
        res = out.clone()
        _ones[grid](res if acc is None else acc, idx, n, W=w, BLOCK=1024, num_warps=4)
        return res if acc is None else acc
    return call


def check_ones(idx, rows: int, width: int) -> None:
    """The floor kernel adds one a value element, where the indices point."""
    w = max(1, width)
    zero = torch.zeros(rows * w, device=idx.device)
    got = ones_fn(zero, idx, width)().view(rows, w)
    want = torch.zeros(rows, w, device=idx.device).index_add_(
        0, idx, torch.ones(idx.numel(), w, device=idx.device))
    assert torch.equal(got, want), "floor atomics misplaced"


def peer_fn(column: str, out, idx, vals):
    import torch._inductor.config as ic

    torch._dynamo.reset()
    fn = torch.compile(_plain if column == "compiled" else _parted, dynamic=False)
    with ic.patch({"partitioned_scatter_enabled": column != "compiled"}):
        fn(out, idx, vals)
    return lambda: fn(out, idx, vals)


def cell(dtype: str, width: int, rows: int, dist: str, ops: tuple, peer: str,
         commrt_ms: float) -> dict:
    out, idx, vals = cell_data(DTYPES[dtype], width, rows, dist)
    kept, ordered = block_distinct(idx, rows, width)
    check_ones(kept, rows, width)
    check_ones(ordered, rows, width)
    share = kept.numel() / idx.numel()
    kept, ordered = padded(kept), padded(ordered)
    calls = {"peer": peer_fn(peer, out, idx, vals), "copy": out.clone,
             "stream": stream_fn(out, idx, vals), "atomics": ones_fn(out, idx, width),
             "combined": ones_fn(out, kept, width), "sorted": ones_fn(out, ordered, width)}
    row = rounds(calls, ROUNDS)
    asks = row["peer"] / 1.3
    verdict = "bytes" if row["stream"] > asks else \
        "atomics" if min(row[k] for k in ("atomics", "combined", "sorted")) > asks else "open"
    return {"dtype": dtype, "width": width, "rows": rows, "dist": dist, "ops": list(ops),
            "peer_column": peer, "grid_commrt_us": round(commrt_ms * 1e3, 2), **row,
            "asks": round(asks, 2), "block_distinct": round(share, 4),
            "distinct": round(torch.unique(idx).numel() / idx.numel(), 4),
            "verdict": verdict}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--grid", default=os.path.join(
        here, "results", f"scatter_grid_{torch.cuda.get_device_name().replace(' ', '_')}.json"))
    ap.add_argument("--out", default="probe_target_floors.json")
    args = ap.parse_args()
    with open(args.grid) as f:
        grid = json.load(f)
    result = {"meta": {**meta("python benchmarks/probes/probe_target_floors.py", "us"),
                       "grid": {k: grid["meta"].get(k) for k in ("commit", "date", "file")}},
              "cells": []}
    for c in missed_cells(grid):
        result["cells"].append(cell(*c))
        print(json.dumps(result["cells"][-1]), flush=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    verdicts = [c["verdict"] for c in result["cells"]]
    print({v: verdicts.count(v) for v in ("bytes", "atomics", "open")})


if __name__ == "__main__":
    main()
