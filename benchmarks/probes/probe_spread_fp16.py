"""Do fp16 rows of 4 into a thousand rows of a ``scatter_add`` or an ``index_add`` also run
faster on ``scatter_spread``'s fp32 copies than on what the pass gives them?

One GPU. Where Inductor would not partition the scatter, bf16 rows of 4 with 1,024 values a
row go to the spread (``scatter_rule.SPREAD_HALF``); fp16 rows were not measured and keep
Inductor's partitions (inlined by the pass, for a ``scatter_add``) and the narrow kernels
(for an ``index_add``, which Inductor leaves to aten's kernel). Columns, in CUDA graphs,
for 4M value elements, each checked against float64 first: ``spread busy``: the spread
as the op calls it for bf16 (fp32 copies, a block's hot rows and the warp sums); ``op``:
the op as the pass calls it (the narrow kernels); Inductor's plain and partitioned
scatters (``index_put``; the plain one is also its ``scatter_add``); aten's
``index_add``. bf16 rows there, in the grids at 6d81cfe: 16.7 / 15.1–15.4 / 14.4–14.9 µs
uniform / skewed / hot on the spread.

    python benchmarks/probes/probe_spread_fp16.py [--out probe_spread_fp16.json]
"""

from __future__ import annotations

import torch
from probe_narrow_costs import checked_errors, compiled_cell, ours, rounds, run_cells

from commrt.fx.scatter_rule import (
    SPREAD_BUSY,
    SPREAD_BUSY_HOT_MIN,
    SPREAD_HOT,
    SPREAD_HOT_MIN,
)
from commrt.fx.scatter_spread import spread_index_add

ROUNDS = 5
CELLS = tuple((torch.float16, 4, 1024, d) for d in ("uniform", "skewed", "hot"))
BOUND = 8e-3  # relative error against float64, as probe_narrow_costs' for bf16


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals, P, ref, plain, parted = compiled_cell(dtype, width, rows, dist)
    calls = {
        "spread busy": lambda: spread_index_add(out, idx, vals, P, hot=SPREAD_HOT,
                                                hot_min=SPREAD_HOT_MIN, busy=SPREAD_BUSY,
                                                busy_hot_min=SPREAD_BUSY_HOT_MIN),
        "op": lambda: torch.ops.commrt.partitioned_index_put(out, idx, vals, P),
        "inductor": lambda: plain(out, idx, vals),
        "inductor partitioned": lambda: parted(out, idx, vals),
        "aten index_add": lambda: out.index_add(0, idx, vals),
    }
    err = checked_errors(calls, ref, BOUND, lambda name: ours(name) and name != "aten index_add")
    return {"dtype": str(dtype).removeprefix("torch."), "width": width, "rows": rows,
            "dist": dist, "err": err, **rounds(calls, ROUNDS), "partitions": P}


def main() -> None:
    run_cells(__doc__, "probe_spread_fp16.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; err: relative error against "
              "float64")


if __name__ == "__main__":
    main()
