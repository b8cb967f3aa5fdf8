"""Do block-local sums gain from finding a block's shared rows before waiting for ``_init``?

One GPU. With block-local sums (``narrow_index_add(local=...)``: one copy, no plan, no hot
rows) each ``_scatter`` block compares its indices pairwise to find the rows that share
one. That needs the indices only, yet it ran after ``_scatter`` waited for ``_init`` (the
copy of the output), between the values' load and their adds; on bf16 rows of 1024 into
1,024 rows the sums took 6.5 µs uniform where the same blocks without them took 5.8
(``probe_half_wide.py``). With ``local_early`` the comparison runs before the wait (at
3d8743a, where this ran, for every dtype; the pass now asks for it where the blocks run on
one warp). Variants: the op as the pass calls it, comparing before the wait ("early") or
after it ("after wait"), and on bf16 rows of 1024 the blocks without sums ("no sums"), against
Inductor's plain scatter ("inductor"). µs a call in a CUDA graph of 20 calls (median of
five rounds taken in turn; spread: the least and most)::

    python benchmarks/probes/probe_local_early.py [--out probe_local_early.json]
"""

from __future__ import annotations

import torch
from probe_narrow_costs import checked_rounds, patched_op, run_cells

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx import scatter_narrow

ROUNDS = 5
F32, B16 = torch.float32, torch.bfloat16
DISTS = ("uniform", "skewed", "hot")
# the grid's cells that the pass gives block-local sums
CELLS = [(B16, 1024, 1024, d) for d in DISTS] + [(F32, 1024, 1024, d) for d in DISTS] + \
    [(F32, 1024, 8, d) for d in ("uniform", "hot")] + \
    [(F32, 100, 4096, d) for d in ("uniform", "skewed")] + [(F32, 256, 1024, "uniform")]
NARROW = scatter_narrow.narrow_index_add


def no_sums(out, idx, vals, P):
    return NARROW(out, idx, vals, 1, hot=0, columns=128, warps=1, half_adds=True)


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {"early": patched_op(scatter_narrow, "narrow_index_add", local_early=True),
                "after wait": patched_op(scatter_narrow, "narrow_index_add", local_early=False)}
    if dtype == B16:
        variants["no sums"] = no_sums
    return checked_rounds(dtype, width, rows, dist, variants, ROUNDS)


def main() -> None:
    run_cells(__doc__, "probe_local_early.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
