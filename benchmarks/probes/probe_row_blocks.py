"""Which block of rows should a narrow ``_scatter`` program take for rows of 4 or more?

One GPU. ``ROW_BLOCKS`` (value elements a block, blocks a program, warps) was chosen on fp32
rows (docs/decisions/2026-11-25-scatter-narrow-rows-4-more-take.md), before fp16/bf16 rows
were added in their own dtype. On grid cells of rows of 4 to 100 (4M value elements a cell):
µs a call in a CUDA graph of 20 calls (median of five rounds taken in turn; spread: the
least and most of the rounds) of ``commrt::partitioned_index_put`` with the copies the pass
gives it, under each ``ROW_BLOCKS`` below, and Inductor's plain scatter (``index_put``,
compiled) in the same rounds; each variant's error against float64 is checked first.
``--small``: the shipped block against blocks of 512 to 2,048 elements on 4 and 8 warps
(int32 rows ran fastest on 512 on 8 warps), into ``probe_row_blocks_small.json``::

    python benchmarks/probes/probe_row_blocks.py [--small] [--out probe_row_blocks.json]
"""

from __future__ import annotations

import sys

import torch
from probe_narrow_costs import run_cells, variant_rounds, with_constants

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx import scatter_narrow as sn

ROUNDS = 5
# (dtype, row width, output rows, indices)
CELLS = [(dt, w, rows, d) for dt, w, rows in ((torch.bfloat16, 16, 65536),
                                              (torch.bfloat16, 4, 65536),
                                              (torch.float32, 16, 65536),
                                              (torch.float32, 16, 1024))
         for d in ("uniform", "skewed", "hot")] + \
    [(torch.bfloat16, 4, 1 << 20, "uniform"), (torch.float32, 4, 65536, "uniform"),
     (torch.float32, 4, 1024, "uniform"), (torch.float32, 100, 65536, "uniform"),
     (torch.float32, 100, 65536, "hot")]
# name: ROW_BLOCKS (value elements a block, blocks a program, warps)
VARIANTS = {"4096x1 w8": (4096, 1, 8), "4096x1 w4": (4096, 1, 4), "2048x1 w4": (2048, 1, 4),
            "2048x2 w8": (2048, 2, 8), "1024x1 w4": (1024, 1, 4), "8192x1 w8": (8192, 1, 8)}
_small = False  # --small
SMALL = {"4096x1 w8": (4096, 1, 8), "512x1 w8": (512, 1, 8), "1024x1 w8": (1024, 1, 8),
         "2048x1 w8": (2048, 1, 8), "512x1 w4": (512, 1, 4)}


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    # the module's launches and the op's replays cleared around each call (with_constants)
    variants = SMALL if _small else VARIANTS
    return variant_rounds(dtype, width, rows, dist,
                          {name: with_constants(sn, ROW_BLOCKS=blocks)
                           for name, blocks in variants.items()}, ROUNDS)


def main() -> None:
    global _small
    _small = "--small" in sys.argv
    if _small:
        sys.argv.remove("--small")
    run_cells(__doc__, "probe_row_blocks_small.json" if _small else "probe_row_blocks.json",
              CELLS, cell, f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 "
              "calls)", " --small" if _small else "", "probe_row_blocks")


if __name__ == "__main__":
    main()
