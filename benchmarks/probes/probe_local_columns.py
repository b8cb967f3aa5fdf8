"""Do block-local sums win rows of 1024 into 1,024 rows once a row's columns spread over
programs?

One GPU. The rule left fp32 rows of 1024 into 1,024 rows (4 values a row) to Inductor's
plain scatter, which a hot row slows 3x; block-local sums (``narrow_index_add(local=...)``,
one copy, no plan) took 9.5-9.7 µs there against its 8.7-8.8 uniform
(docs/decisions/2026-11-25-scatter-fp32-rows-65-256-few.md), on 256 programs of 16 whole
rows. Here a ``_scatter`` block holds 128 columns of 32 rows (``columns``, a row's blocks
launched one after another) on 1, 2 or 4 warps, or 128 columns of 64 rows, against whole
rows of 16 on 8 warps ("rows w8"); and the op as the pass calls it ("op": with the copies
the pass gives the cell). On grid cells (4M value elements a cell) of rows of 1024 into
1,024 and 8 rows, bf16 (added in its own dtype) too, and rows of 100 and 256 into 1,024
rows: µs a call in a CUDA graph of 20 calls (median of five rounds taken in turn; spread:
the least and most of the rounds), with Inductor's plain scatter (``index_put``, compiled)
and its partitioned scatter in the same rounds; each variant's error against float64 is
checked first (a variant over the bound is left out of the cell, its error under
"dropped")::

    python benchmarks/probes/probe_local_columns.py [--out probe_local_columns.json]
"""

from __future__ import annotations

from unittest import mock

import torch
import torch._inductor.config as ic
from probe_narrow_costs import checked_rounds, run_cells

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx import scatter_narrow as sn
from commrt.fx.scatter_rule import LOCAL_MIN

ROUNDS = 5
# (dtype, row width, output rows, indices)
CELLS = [(dt, w, rows, d) for dt, w, rows in ((torch.float32, 1024, 1024),
                                              (torch.float32, 1024, 8),
                                              (torch.bfloat16, 1024, 1024),
                                              (torch.float32, 100, 1024),
                                              (torch.float32, 256, 1024))
         for d in ("uniform", "skewed", "hot")]
# name: (columns a block, value elements a block, warps)
VARIANTS = {"rows w8": (0, 4096, 8), "c128 w4": (128, 4096, 4), "c128 w2": (128, 4096, 2),
            "c128 w1": (128, 4096, 1), "c128 8192 w4": (128, 8192, 4),
            "c128 8192 w8": (128, 8192, 8)}


def call(out, idx, vals, P: int, columns: int, block: int, warps: int):
    # read at each call (the graph keeps the kernels it captured)
    sub = max(16, block // min(columns or 1 << 30, sn.next_pow2(out.shape[1])))
    local = 3 if sub <= 16 else LOCAL_MIN  # as the rule had it for blocks of 16 rows
    with mock.patch.object(sn, "ROW_BLOCKS", (block, 1, warps)):
        return sn.narrow_index_add(out, idx, vals, 1, hot=0, local=local, columns=columns,
                                   half_adds=out.dtype != torch.float32)


def partitioned():
    """Inductor's partitioned scatter (``index_put``), compiled at its first call."""
    torch._dynamo.reset()
    f = torch.compile(lambda o, i, v: torch.index_put(o, (i,), v, accumulate=True),
                      dynamic=False)

    def run(out, idx, vals, P):
        with ic.patch({"partitioned_scatter_enabled": True, "fx_graph_cache": False}):
            return f(out, idx, vals)
    return run


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    """``variant_rounds`` of the cell; a variant over its error bound is left out, its
    error under "dropped"."""
    variants = {name: lambda *a, c=c, b=b, w=w: call(*a[:4], c, b, w)
                for name, (c, b, w) in VARIANTS.items()}
    variants["op"] = torch.ops.commrt.partitioned_index_put  # the op as the pass calls it
    variants["inductor partitioned"] = partitioned()
    return checked_rounds(dtype, width, rows, dist, variants, ROUNDS)


def main() -> None:
    run_cells(__doc__, "probe_local_columns.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
