"""Which block should a wide ``_scatter`` program take on the grid's 4M-element scatters?

One GPU. The wide kernels (``scatter_kernels``) give a ``_scatter`` program
``BLOCK_ROWS`` (16) value rows on ``SCATTER_WARPS`` (4) warps, chosen on the seed
benchmark's 100M elements. Variants: the op as the pass calls it with R rows a program
(``scatter_kernels.BLOCK_ROWS``, which ``_prepare``'s plan reads too) on W warps, against
Inductor's plain scatter and its partitions in the same rounds; then each kernel's own
time (median of 20 eager calls in a profiler trace), and Inductor's kernels'.

µs a call in a CUDA graph of 20 calls (median of five rounds taken in turn; spread: the
least and most); each variant's error against float64 is checked first::

    python benchmarks/probes/probe_wide_blocks.py [--small] [--out probe_wide_blocks.json]

``--small``: on uniform indices only, blocks of 16, 8 and 4 rows that never sum rows
first (``leaders=-1``), as Inductor's scatter drew [8, 128] tiles on 4 warps in the
grid (5.3 µs a kernel on bf16 rows of 100 into 1,024 rows).
"""

from __future__ import annotations

import sys

import torch
from probe_local_columns import partitioned
from probe_narrow_costs import checked_rounds, op_kernels, patched_op, run_cells, with_constants

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx import scatter_kernels

ROUNDS = 5
F32, B16 = torch.float32, torch.bfloat16
# --small: blocks of fewer rows, without combining, on uniform indices only
SMALL_CELLS = [(t, 100, 1024, "uniform") for t in (B16, F32)]
SMALL_BLOCKS = ((16, 4, True), (16, 4, False), (8, 4, False), (8, 2, False), (4, 4, False))
CELLS = [(t, 100, 1024, d) for t in (B16, F32) for d in ("uniform", "skewed", "hot")]
# (rows, warps, combining); shipped first (fewer than 16 rows: tl.dot takes K >= 16)
BLOCKS = ((16, 4, True), (32, 4, True), (16, 2, True), (16, 8, True), (32, 8, True))


def blocked(R: int, W: int, combine: bool = True):
    """The op with R rows a program on W warps; ``combine`` False: never summing rows that
    share an index first (``leaders=-1``: no ``tl.dot``, which takes 16 rows or more)."""
    op = patched_op(scatter_kernels, "partitioned_index_add", **({} if combine else
                                                                {"leaders": -1}))
    return with_constants(scatter_kernels, op, BLOCK_ROWS=R, SCATTER_WARPS=W)


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {f"op R{r} w{w}" + ("" if c else " no combining"): blocked(r, w, c)
                for r, w, c in BLOCKS}
    row = checked_rounds(dtype, width, rows, dist,
                         {**variants, "inductor partitioned": partitioned()}, ROUNDS)
    row["kernels"] = op_kernels(variants, dtype, width, rows, dist, row["partitions"])
    return row


def main() -> None:
    global BLOCKS
    small = "--small" in sys.argv
    if small:
        sys.argv.remove("--small")
        BLOCKS = SMALL_BLOCKS
    run_cells(__doc__, "probe_wide_blocks.json", SMALL_CELLS if small else CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)",
              flags=" --small" if small else "")


if __name__ == "__main__":
    main()
