"""Why do fp32 rows of 16 into a few thousand rows (32-128 values a row, between the grid's
1,024 and 65,536) run slower on the narrow kernels than Inductor's scatters, and which of
the kernels' choices would not?

One GPU. Into 4,096 rows the op took 13.4 µs uniform against Inductor's plain scatter's
8.9, and 36.4 skewed against its partitions' 22.6
(``probe_spread_copies_NVIDIA_H200.json``). For 4M value elements, µs a call in a CUDA
graph of 20 calls (median of five rounds taken in turn): the op as the pass calls it
(``narrow_index_add`` with the rule's copies and second sample), its plan (copies, error,
hot rows), each kernel's µs (profiler, 20 eager calls), and the op with the second
sample, and with it at most 16, 32 or 64 copies; ``scatter_spread`` on 32 copies;
Inductor's plain and partitioned scatters.

    python benchmarks/probes/probe_narrow_mid.py [--out probe_narrow_mid.json]
"""

from __future__ import annotations

import torch
from probe_narrow_costs import (
    cell_data,
    checked_errors,
    inductor_columns,
    kernel_us,
    plan,
    rounds,
    run_cells,
)

from commrt.fx import scatter as pass_scatter
from commrt.fx.scatter_narrow import narrow_index_add
from commrt.fx.scatter_rule import (
    NARROW_PAIR_SAMPLE,
    SPREAD_HOT,
    SPREAD_HOT_MIN,
    pair_sample,
)
from commrt.fx.scatter_spread import spread_index_add

DEV = torch.device("cuda")
ROUNDS = 5
F32 = torch.float32
CELLS = tuple((F32, width, rows, dist) for width, rows in ((16, 2048), (16, 4096), (16, 8192),
                                                          (4, 8192), (4, 16384))
              for dist in ("uniform", "skewed"))


def ours(name: str) -> bool:  # a column checked against its bound: not Inductor's
    return not name.startswith("inductor")


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    P = pass_scatter.copies(rows, max(1, width), idx.numel(), dtype,
                            torch.cuda.get_device_properties(DEV).total_memory)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    plain, parted = inductor_columns(out, idx, vals)
    kws = {"op": {}, "second sample": {"pair_sample": NARROW_PAIR_SAMPLE}}
    for p in (16, 32, 64):
        kws[f"sample, {p} copies"] = {"pair_sample": NARROW_PAIR_SAMPLE, "partitions": p}
    calls = {}
    plans = {}
    for name, kw in kws.items():
        kw = {"partitions": P, "pair_sample": pair_sample(rows), **kw}
        calls[name] = lambda kw=kw: narrow_index_add(out, idx, vals, **kw)
        plans[name] = plan(out, idx, vals, kw["partitions"],
                           **{k: v for k, v in kw.items() if k != "partitions"})
    calls["spread 32"] = lambda: spread_index_add(out, idx, vals, 32, hot=SPREAD_HOT,
                                                  hot_min=SPREAD_HOT_MIN)
    calls["inductor"] = lambda: plain(out, idx, vals)
    calls["inductor partitioned"] = lambda: parted(out, idx, vals)
    row = {"dtype": str(dtype).removeprefix("torch."), "width": width, "rows": rows,
           "dist": dist, "partitions": P, "plans": plans,
           "err": checked_errors(calls, ref, 1e-5, ours),
           "kernels": {k: {n: round(t, 2) for n, t in kernel_us(calls[k], names=None).items()}
                       for k in ("op", "inductor")}}
    row.update(rounds(calls, ROUNDS))
    return row


def main() -> None:
    run_cells(__doc__, "probe_narrow_mid.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; plans: copies, error, hot rows; "
              "kernels: µs of each kernel (profiler, 20 eager calls); err: relative error "
              "against float64")


if __name__ == "__main__":
    main()
