"""Would fp32 rows of 16 into 1,024 rows (256 values a row) run faster on ``scatter_spread``
with a few copies than on the narrow kernels, whose plan and third launch cost them 1-2
µs against Inductor's plain scatter on uniform indices?

One GPU. ``scatter_spread`` adds value ``j`` to fp32 copy ``j % P`` (a block's hot rows
summed first) and sums the copies in a second launch: no plan, no copy of the output
first. The narrow kernels (the rule's choice: ``_init`` plans and copies the output,
``_scatter``, ``_sum``) took 12.0-12.7 µs uniform in the grid against Inductor's plain
scatter's 10.7-11.0. For 4M value elements, µs a call in a CUDA graph of 20 calls
(median of five rounds taken in turn): the op as the pass calls it, ``scatter_spread``
with 8 to 128 copies, and Inductor's plain and partitioned scatters (``index_put``).

    python benchmarks/probes/probe_spread_copies.py [--out probe_spread_copies.json]
"""

from __future__ import annotations

import torch
from probe_narrow_costs import cell_data, checked_errors, inductor_columns, rounds, run_cells

from commrt.fx import scatter as pass_scatter
from commrt.fx.scatter_rule import SPREAD_HOT, SPREAD_HOT_MIN
from commrt.fx.scatter_spread import spread_index_add

DEV = torch.device("cuda")
ROUNDS = 5
F32 = torch.float32
CELLS = ((F32, 16, 1024, "uniform"), (F32, 16, 1024, "skewed"), (F32, 16, 1024, "hot"),
         (F32, 4, 1024, "uniform"), (F32, 16, 4096, "uniform"), (F32, 16, 4096, "skewed"))
COPIES = (8, 16, 32, 64, 128)


def ours(name: str) -> bool:  # a column checked against its bound: not Inductor's
    return not name.startswith("inductor")


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    P = pass_scatter.copies(rows, max(1, width), idx.numel(), dtype,
                            torch.cuda.get_device_properties(DEV).total_memory)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    plain, parted = inductor_columns(out, idx, vals)
    calls = {"op": lambda: torch.ops.commrt.partitioned_index_put(out, idx, vals, P)}
    for p in COPIES:
        calls[f"spread {p}"] = lambda p=p: spread_index_add(out, idx, vals, p, hot=SPREAD_HOT,
                                                            hot_min=SPREAD_HOT_MIN)
    calls["inductor"] = lambda: plain(out, idx, vals)
    calls["inductor partitioned"] = lambda: parted(out, idx, vals)
    row = {"dtype": str(dtype).removeprefix("torch."), "width": width, "rows": rows,
           "dist": dist, "partitions": P, "err": checked_errors(calls, ref, 1e-5, ours)}
    row.update(rounds(calls, ROUNDS))
    return row


def main() -> None:
    run_cells(__doc__, "probe_spread_copies.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; err: relative error against "
              "float64")


if __name__ == "__main__":
    main()
