"""What do the narrow plan's second sample and ``_init``'s warps cost a call?

One GPU. On grid cells of the narrow kernels (4M value elements a cell): µs a call in a
CUDA graph of 20 calls (median of five rounds taken in turn; spread: the least and most
of the rounds) of ``narrow_index_add`` as the pass calls it, without the second sample
(``pair_sample=0``), and with ``_init`` on 1 or 2 warps instead of ``INIT_WARPS``; the
copies and hot rows each plan chose, and ``_init``'s µs (profiler, median of 20 eager
calls). Run at b5bd04d, where ``_init`` took ``INIT_WARPS`` everywhere (since, it takes
``INIT_WARPS_ONE`` with one sample on smaller outputs, which this probe does not set)::

    python benchmarks/probes/probe_plan_cost.py [--out probe_plan_cost.json]
"""

from __future__ import annotations

import probe_narrow_costs as narrow_costs
import torch
from probe_narrow_costs import cell_data, rounds, run_cells

from commrt.fx import scatter_narrow as sn
from commrt.fx.scatter_rule import half_adds, partitions_for

DEV = torch.device("cuda")
ROUNDS = 5
# (dtype, row width (0: 1-D values), output rows, indices)
CELLS = ((torch.float32, 16, 1024, "uniform"), (torch.float32, 16, 1024, "skewed"),
         (torch.float32, 16, 1024, "hot"), (torch.float32, 4, 1024, "uniform"),
         (torch.float32, 4, 1024, "skewed"), (torch.float32, 16, 8, "uniform"),
         (torch.float32, 0, 65536, "uniform"), (torch.float32, 0, 65536, "skewed"),
         (torch.bfloat16, 16, 1024, "uniform"), (torch.bfloat16, 0, 65536, "skewed"),
         (torch.float32, 4, 65536, "uniform"), (torch.float32, 16, 65536, "uniform"),
         (torch.bfloat16, 16, 65536, "uniform"), (torch.float32, 16, 1 << 20, "uniform"))
# name: (INIT_WARPS, narrow_index_add arguments)
VARIANTS = {"shipped": (sn.INIT_WARPS, {}), "no pairs": (sn.INIT_WARPS, dict(pair_sample=0)),
            "w2": (2, {}), "w1": (1, {}), "no pairs w2": (2, dict(pair_sample=0)),
            "no pairs w1": (1, dict(pair_sample=0))}


def run(out, idx, vals, warps: int, kw: dict):
    sn.INIT_WARPS = warps  # read at each call, captured with it
    return sn.narrow_index_add(out, idx, vals, **kw)


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    n = idx.numel()
    memory = torch.cuda.get_device_properties(DEV).total_memory
    P = partitions_for(rows, n, 4 * max(1, width), memory, narrow=True)
    base = dict(partitions=P, half_adds=half_adds(rows, max(1, width), n, P, dtype))
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    row = {"dtype": str(dtype)[6:], "width": width, "rows": rows, "dist": dist,
           "partitions": P, "plan": {}, "init": {}}
    for name, (w, kw) in VARIANTS.items():
        state = torch.empty(sn.state_numel(), device=DEV, dtype=torch.int32)
        got = run(out, idx, vals, w, dict(base, **kw, state=state))
        err = float((got.double() - ref).norm() / ref.norm())
        assert err < tol, (name, err)
        row["plan"][name] = state[:3].tolist()
    row.update(rounds({name: lambda w=w, kw=kw: run(out, idx, vals, w, dict(base, **kw))
                       for name, (w, kw) in VARIANTS.items()}, ROUNDS))
    for name, (w, kw) in VARIANTS.items():
        row["init"][name] = round(narrow_costs.kernel_us(
            lambda w=w, kw=kw: run(out, idx, vals, w, dict(base, **kw)),
            names=("_init",))["_init"], 2)
    sn.INIT_WARPS = VARIANTS["shipped"][0]
    return row


def main() -> None:
    run_cells(__doc__, "probe_plan_cost.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of "
              "20 calls); init: median µs of _init over 20 eager calls "
              "(profiler)")


if __name__ == "__main__":
    main()
