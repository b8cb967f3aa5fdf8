"""Does ``scatter_spread`` run faster on rows of 4 into a thousand rows with its sum on more
programs, or with fewer copies?

One GPU. bf16 rows of 4 into 1,024 rows stay with Inductor's partitions because
``scatter_spread`` took 16.6 µs against their 15.6-15.8 on uniform indices, while it took
15.2-15.5 against 23.9-33.8 on skewed and hot ones (``probe_spread_match_NVIDIA_H200.json``,
``probe_spread_half_NVIDIA_H200.json``); fp32 rows of 4 there, uniform, ask 1.3x
Inductor's 19.95 and took 17.1. ``_spread_sum`` reads and clears the 128 fp32 copies of
the 4,096-element output on 64 programs (64 elements each, all copies in one
``[128, 64]`` step). Variants, each with the warp sums as the rule runs them: ``shipped``
(``spread_index_add``); ``sumB``: ``_spread_sum`` on blocks of ``B`` elements (more
programs); ``cpC``: ``C`` copies a step; ``PN``: ``N`` copies in all. Columns, in CUDA
graphs, for 4M value elements, each checked against float64 first, with Inductor's plain
and partitioned scatters (``index_put``).

    python benchmarks/probes/probe_spread_sum.py [--out probe_spread_sum.json]
"""

from __future__ import annotations

import torch
from probe_narrow_costs import cell_row, compiled_cell, ours, run_cells

from commrt.dispatch.profile import has_pdl, has_warp_sums
from commrt.fx.scatter_kernels import SUM_PROGRAMS
from commrt.fx.scatter_rule import (
    SPREAD_BUSY,
    SPREAD_BUSY_HOT_MIN,
    SPREAD_HOT,
    SPREAD_HOT_MIN,
)
from commrt.fx.scatter_scratch import zeroed
from commrt.fx.scatter_spread import (
    BLOCK,
    SUM_TILE,
    WARPS,
    _launches,
    run_spread_sum,
    spread_index_add,
)
from commrt.symm_mem.launch import cdiv

ROUNDS = 5
CELLS = tuple((dt, 4, 1024, d) for dt in (torch.bfloat16, torch.float32)
              for d in ("uniform", "skewed", "hot"))
VARIANTS = {"sum32": (None, 32, None), "sum16": (None, 16, None),
            "sum32 cp64": (None, 32, 64), "P64": (64, 64, None), "P64 sum32": (64, 32, None),
            "P32 sum32": (32, 32, None)}


def variant_index_add(self, index, values, partitions: int, block: int, cp: int):
    """``spread_index_add`` with the rule's warp sums, its sum on blocks of ``block``
    elements, ``cp`` copies a step."""
    rows = self.shape[0]
    D = self.numel() // rows
    n = index.numel()
    plane = rows * D
    out = torch.empty_like(self)
    extra = zeroed(self.device, partitions * plane + 2)
    busy = D % 4 == 0 and has_warp_sums(self.device)
    pdl = has_pdl(self.device)
    spread, _ = _launches(rows, n, D, partitions, SPREAD_HOT,
                          SPREAD_BUSY_HOT_MIN if busy else SPREAD_HOT_MIN,
                          SPREAD_BUSY if busy else 0, BLOCK, WARPS, SUM_TILE, pdl)
    total = run_spread_sum.prepare((min(cdiv(plane, block), SUM_PROGRAMS),), 4, pdl,
                                   P=partitions, CP=cp, BLOCK=block, PDL=pdl)
    spread(extra, index, values, n, rows, plane)
    total(self, extra, out, plane)
    return out


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals, P, ref, plain, parted = compiled_cell(dtype, width, rows, dist)

    def variant(p, block, cp):
        p = p or P
        return lambda: variant_index_add(out, idx, vals, p, block, min(p, cp or p))

    calls = {"shipped": lambda: spread_index_add(out, idx, vals, P, hot=SPREAD_HOT,
                                                 hot_min=SPREAD_HOT_MIN, busy=SPREAD_BUSY,
                                                 busy_hot_min=SPREAD_BUSY_HOT_MIN),
             **{name: variant(*v) for name, v in VARIANTS.items()},
             "inductor": lambda: plain(out, idx, vals),
             "inductor partitioned": lambda: parted(out, idx, vals)}
    return {**cell_row(dtype, width, rows, dist, calls, ref, ours, ROUNDS, False),
            "partitions": P}


def main() -> None:
    run_cells(__doc__, "probe_spread_sum.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; err: relative error against "
              "float64")


if __name__ == "__main__":
    main()
