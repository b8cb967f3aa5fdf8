"""Do rows of 16 and bf16 rows of 100 into 1,024 rows gain from block-local sums with no
plan (one copy, two launches as Inductor's) over what the pass gives them?

One GPU. Where the grid still asks more of commrt, fp32 rows of 16 into 1,024 rows run
the narrow kernels behind their plan (12.4 µs uniform on the H100 against Inductor's
plain scatter's 10.8), bf16 rows of 16 Inductor's partitions (10.8 against its plain
scatter's 7.9), and bf16 rows of 100 the wide kernels adding in bf16 (8.2 against 7.3).
Here the narrow kernels take them with one copy and no plan: each ``_scatter`` block of
``SUB`` rows sums its rows that share an index with ``local - 1`` others (found before
the wait for ``_init``) and adds each sum once, the rest one by one; bf16 adds in bf16
(``half_adds``; the sums in fp32), so its error is held against twice that of
Inductor's columns rather than the probes' bound (``over_twice_inductor_err``: the
columns over it). Blocks: ``ROW_BLOCKS`` of 512 to 4,096
value elements (16 to 64 rows) on 4 or 8 warps. µs a call in a CUDA graph of 20 calls
(median of five rounds taken in turn; spread: the least and most of the rounds),
against the op as the pass calls it (where it takes the call itself) and Inductor's two
compiled scatters (``index_put``); every column's error against float64 first (err)::

    python benchmarks/probes/probe_local_narrow.py [--out probe_local_narrow.json]
"""

from __future__ import annotations

import torch
from probe_narrow_costs import cell_row, compiled_cell, ours, run_cells, with_constants

from commrt.fx import scatter_narrow as sn

ROUNDS = 5
CELLS = [(dt, 16, 1024, d) for dt in (torch.float32, torch.bfloat16)
         for d in ("uniform", "skewed", "hot")] + \
    [(torch.bfloat16, 100, 1024, d) for d in ("uniform", "skewed", "hot")] + \
    [(torch.float32, 16, 4096, d) for d in ("uniform", "skewed")]
# by row width: name -> ROW_BLOCKS (value elements, blocks a program, warps), blocks of
# 64 or 32 rows of 16, 16 or 32 rows of 100
BLOCKS = {16: {"1024x1 w4": (1024, 1, 4), "1024x1 w8": (1024, 1, 8), "512x1 w4": (512, 1, 4)},
          100: {"2048x1 w4": (2048, 1, 4), "2048x1 w8": (2048, 1, 8),
                "4096x1 w8": (4096, 1, 8)}}


def local(half: bool, share: int):
    def op(out, idx, vals, P):
        return sn.narrow_index_add(out, idx, vals, 1, hot=0, local=share, local_early=True,
                                   half_adds=half, pair_sample=0)
    return op


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals, P, ref, plain, parted = compiled_cell(dtype, width, rows, dist)
    calls = {"inductor": lambda: plain(out, idx, vals),
             "inductor partitioned": lambda: parted(out, idx, vals)}
    if dtype == torch.float32 or width > 16:  # the pass's route is commrt's own
        calls["op"] = lambda: torch.ops.commrt.partitioned_index_put(out, idx, vals, P)
    half = dtype != torch.float32
    for name, blocks in BLOCKS[width].items():
        for share in (2, 4):
            run = with_constants(sn, local(half, share), ROW_BLOCKS=blocks)
            calls[f"local{share} {name}"] = lambda run=run: run(out, idx, vals, 1)
    fp32 = dtype == torch.float32
    row = cell_row(dtype, width, rows, dist, calls, ref, lambda name: fp32 and ours(name),
                   ROUNDS, deterministic=False)
    # bf16 adds in bf16 as Inductor's plain scatter does: within twice its error
    worst = 2 * max(row["err"]["inductor"], row["err"]["inductor partitioned"])
    row["over_twice_inductor_err"] = [] if fp32 else \
        [k for k, e in row["err"].items() if ours(k) and e >= worst]
    row["partitions"] = P
    return row


def main() -> None:
    run_cells(__doc__, "probe_local_narrow.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
