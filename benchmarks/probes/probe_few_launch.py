"""Do the few-rows kernels gain from ``_total`` as a programmatic dependent of
``_partial``, from more programs an SM or from larger blocks, and how do they compare with
``scatter_spread`` (the rule's choice before for fp32 rows of 16 into 8 rows) where one row
is hot?

One GPU. For 4M value elements, µs a call in a CUDA graph of 20 calls (median of five
rounds taken in turn): ``few_rows_index_add`` as shipped (``_total`` a programmatic
dependent, 4 programs an SM), without the dependent launch, on 8 programs an SM, with
4,096 and with 8,192 accumulator elements a program (shipped: 8,192 for fp32 rows of 4 or
more, else 4,096); Inductor's partitions (``index_put``), and for fp32 rows of 16
``scatter_spread`` with its hot rows.

    python benchmarks/probes/probe_few_launch.py [--out probe_few_launch.json]
"""

from __future__ import annotations

import torch
from probe_narrow_costs import cell_data, cell_row, inductor_columns, run_cells, with_constants

import commrt.fx.scatter_few as few
from commrt.fx import scatter as pass_scatter
from commrt.fx.scatter_rule import SPREAD_HOT, SPREAD_HOT_MIN
from commrt.fx.scatter_spread import spread_index_add

DEV = torch.device("cuda")
ROUNDS = 5
F32, BF16 = torch.float32, torch.bfloat16
CELLS = ((F32, 16, 8, "uniform"), (F32, 16, 8, "hot"), (F32, 16, 8, "skewed"),
         (BF16, 16, 8, "uniform"), (F32, 4, 8, "uniform"), (F32, 0, 8, "uniform"),
         (F32, 8, 16, "uniform"), (F32, 4, 16, "uniform"), (F32, 100, 8, "uniform"),
         (BF16, 100, 8, "uniform"))


def _few(out, idx, vals, P, **kw):
    return few.few_rows_index_add(out, idx, vals, **kw)


VARIANTS = {"shipped": _few,
            "no pdl": lambda *a: _few(*a, pdl=False),
            "8/SM": with_constants(few, _few, PROGRAMS_PER_SM=8),
            "tile 4096": with_constants(few, _few, TILE=4096, FP32_TILE=4096),
            "tile 8192": with_constants(few, _few, TILE=8192, FP32_TILE=8192)}


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    P = pass_scatter.copies(rows, max(1, width), idx.numel(), dtype,
                            torch.cuda.get_device_properties(DEV).total_memory)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    _, parted = inductor_columns(out, idx, vals)
    calls = {name: (lambda fn=fn: fn(out, idx, vals, P)) for name, fn in VARIANTS.items()}
    if dtype == F32 and width == 16:
        calls["scatter_spread"] = lambda: spread_index_add(out, idx, vals, 128, hot=SPREAD_HOT,
                                                   hot_min=SPREAD_HOT_MIN)
    calls["inductor partitioned"] = lambda: parted(out, idx, vals)
    return cell_row(dtype, width, rows, dist, calls, ref, lambda name: name in VARIANTS,
                    ROUNDS)


def main() -> None:
    run_cells(__doc__, "probe_few_launch.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; err: relative error against "
              "float64")


if __name__ == "__main__":
    main()
