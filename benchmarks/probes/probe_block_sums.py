"""Can a scatter whose blocks plan for themselves (no plan in a launch of its own, no
copies) take small outputs from the plan-and-copies kernels?

One GPU. On outputs of 1,024 rows with a few tens of values a row (fp32 and bf16 rows of
100, fp32 rows of 1024) and on fp32 rows of 16 into 1,024 rows, commrt's kernels run
uniform indices 1-2 µs slower than Inductor's plain scatter (its two launches against the
plan's and a third). ``scatter_blocks.block_index_add`` has two launches: a copy, then
programs of R value rows that sum their rows sharing an index where at most three
quarters of them are distinct (a contended block), else add every row, in the output's
dtype (left out: ``scatter_blocks`` is only in 3084e8d, where this ran). Variants
"blocks rR wW" (R rows a program on W warps; "plain": never summing), against the op as
the pass calls it and both of Inductor's scatters, in the same rounds. At 3084e8d the
run stopped at fp32 rows of 16, whose blocks of 256 rows on 8 warps need more shared
memory than an H200 has.

µs a call in a CUDA graph of 20 calls (median of five rounds taken in turn; spread: the
least and most); each variant's error against float64 is checked first (a variant over
the bound is left out, its error under "dropped")::

    python benchmarks/probes/probe_block_sums.py [--out probe_block_sums.json]
"""

from __future__ import annotations

import torch
from probe_local_columns import partitioned
from probe_narrow_costs import checked_rounds, run_cells

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx.scatter_blocks import block_index_add

ROUNDS = 5
F32, B16 = torch.float32, torch.bfloat16
DISTS = ("uniform", "skewed", "hot")
CELLS = [(t, w, 1024, d) for t, w in ((B16, 100), (F32, 100), (F32, 1024), (F32, 16),
                                      (B16, 1024)) for d in DISTS]
BLOCKS = {100: ((32, 4), (64, 4), (128, 8)), 1024: ((32, 4), (64, 4), (64, 8)),
          16: ((64, 4), (128, 4), (256, 8))}


def blocks(R: int, warps: int, leaders: int | None = None):
    def run(out, idx, vals, P):
        return block_index_add(out, idx, vals, rows_per_block=R, warps=warps, leaders=leaders)
    return run


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {"op": torch.ops.commrt.partitioned_index_put}
    for R, w in BLOCKS[width]:
        variants[f"blocks r{R} w{w}"] = blocks(R, w)
    R, w = BLOCKS[width][1]
    variants[f"plain r{R} w{w}"] = blocks(R, w, leaders=0)
    variants["inductor partitioned"] = partitioned()
    return checked_rounds(dtype, width, rows, dist, variants, ROUNDS)


def main() -> None:
    run_cells(__doc__, "probe_block_sums.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
