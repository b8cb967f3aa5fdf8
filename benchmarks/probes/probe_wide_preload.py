"""Do the wide scatter kernels gain from loading their values before they wait for the plan?

One GPU. The wide ``_scatter`` (``scatter_kernels``) is a programmatic dependent of
``_prepare``, whose program 0 plans while the others copy the output; it loaded its indices
before waiting for ``_prepare`` and its values after. With ``preload`` it loads
its first block of values (all of a row of up to 128 elements) before waiting too, as the
narrow ``_scatter`` does (left out: ``preload`` is only in 3d8743a, where this ran).
Variants: the op as the pass called it there ("preload") and the same call with the values
loaded after the wait ("after wait"), against Inductor's plain
scatter ("inductor"). µs a call in a CUDA graph of 20 calls (median of five rounds taken
in turn; spread: the least and most)::

    python benchmarks/probes/probe_wide_preload.py [--out probe_wide_preload.json]
"""

from __future__ import annotations

import torch
from probe_narrow_costs import checked_rounds, patched_op, run_cells

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx import scatter_kernels

ROUNDS = 5
F32, B16 = torch.float32, torch.bfloat16
DISTS = ("uniform", "skewed", "hot")
# the wide kernels' cells of the grid: rows of 100 into 1,024 rows (fp32; bf16 added in
# bf16 where the plan finds few adds an address), bf16 rows of 1024 into 8 rows (an
# index_add's: eight blocks of 128 columns a row)
CELLS = [(F32, 100, 1024, d) for d in DISTS] + [(B16, 100, 1024, d) for d in DISTS] + \
    [(B16, 1024, 8, d) for d in DISTS]


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {"preload": torch.ops.commrt.partitioned_index_put,
                "after wait": patched_op(scatter_kernels, "partitioned_index_add", preload=False)}
    return checked_rounds(dtype, width, rows, dist, variants, ROUNDS)


def main() -> None:
    run_cells(__doc__, "probe_wide_preload.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
