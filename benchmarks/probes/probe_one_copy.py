"""From how many adds an address should the narrow plan leave one copy for copies?

One GPU. The narrow plan adds with plain atomics on one copy where it estimates at most
``NARROW_PER_ADDRESS`` (128) adds an address, else on copies that ``_sum`` adds up. With
uniform indices the estimate is at least the values a row, so fp32 rows of 16 into 1,024
rows (256 a row) always take copies, while Inductor's plain scatter adds those on one copy.
For fp32 uniform indices at 64-1024 values a row (4M value elements), and a skewed and a
hot control, µs a call in a CUDA graph of 20 calls (median of five rounds taken in turn) of
``narrow_index_add`` as the pass calls it (its copies and second sample) with the one-copy
threshold at 128 (shipped), 256, 512 and 1024 adds an address, and Inductor's plain
scatter (``index_put``); the copies each plan chose are recorded.

    python benchmarks/probes/probe_one_copy.py [--out probe_one_copy.json]
"""

from __future__ import annotations

import torch
from probe_narrow_costs import cell_data, checked_rounds, plan, run_cells

from commrt.fx import scatter as pass_scatter
from commrt.fx.scatter_narrow import narrow_index_add
from commrt.fx.scatter_rule import pair_sample

DEV = torch.device("cuda")
ROUNDS = 5
THRESHOLDS = (128, 256, 512, 1024)
F32, BF16 = torch.float32, torch.bfloat16
# (dtype, row width (0: 1-D values), output rows, indices); 4M value elements a cell
CELLS = ((F32, 16, 2048, "uniform"), (F32, 16, 1024, "uniform"), (F32, 16, 512, "uniform"),
         (F32, 16, 256, "uniform"), (F32, 8, 2048, "uniform"), (F32, 8, 1024, "uniform"),
         (F32, 4, 4096, "uniform"), (F32, 4, 2048, "uniform"), (F32, 0, 32768, "uniform"),
         (F32, 0, 65536, "uniform"), (F32, 16, 1024, "skewed"), (F32, 16, 1024, "hot"),
         (F32, 0, 65536, "skewed"), (BF16, 16, 1024, "uniform"))


def variant(per_address: int):
    def fn(out, idx, vals, P):
        return narrow_index_add(out, idx, vals, P, per_address=per_address,
                                pair_sample=pair_sample(out.shape[0]))
    return fn


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {f"pa{t}": variant(t) for t in THRESHOLDS}
    row = checked_rounds(dtype, width, rows, dist, variants, ROUNDS)
    out, idx, vals = cell_data(dtype, width, rows, dist)
    P = pass_scatter.copies(rows, max(1, width), idx.numel(), dtype,
                            torch.cuda.get_device_properties(DEV).total_memory)
    row["copies"] = {f"pa{t}": plan(out, idx, vals, P, per_address=t,
                                    pair_sample=pair_sample(rows))[0] for t in THRESHOLDS}
    return row


def main() -> None:
    run_cells(__doc__, "probe_one_copy.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; copies: the plan's")


if __name__ == "__main__":
    main()
