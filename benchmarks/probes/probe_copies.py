"""How many copies should the narrow kernels spread contended adds over, and how should
``_sum`` read them?

One GPU. On the grid's narrow cells where copies are allowed and contended (4M value
elements a cell), µs a call in a CUDA graph of 20 calls (median of five rounds taken in
turn) of ``narrow_index_add`` as the pass calls it (``P128``: at most 128 copies, the plan
choosing), with ``_sum`` reading ``SUM_COPIES`` = 64 or 32 copies a step instead of 128,
with at most 64 copies, with 64 or 128 copies forced, and without PDL; the copies each
plan chose are recorded, and each kernel's µs without PDL (profiler, median of 20 eager
calls; with PDL ``_sum``'s time includes its wait for ``_scatter``).

    python benchmarks/probes/probe_copies.py [--out probe_copies.json]
"""

from __future__ import annotations

import probe_narrow_costs as narrow_costs
import torch
from probe_narrow_costs import cell_data, rounds, run_cells

from commrt.fx import scatter_narrow as sn

DEV = torch.device("cuda")
ROUNDS = 5
# (dtype, row width (0: 1-D values), output rows, indices)
CELLS = ((torch.float32, 0, 65536, "skewed"), (torch.float32, 4, 1024, "uniform"),
         (torch.float32, 4, 1024, "skewed"), (torch.float32, 4, 1024, "hot"),
         (torch.float32, 16, 1024, "uniform"), (torch.float32, 16, 1024, "skewed"),
         (torch.float32, 16, 8, "uniform"), (torch.float32, 16, 8, "skewed"),
         (torch.float32, 16, 8, "hot"), (torch.bfloat16, 0, 65536, "skewed"),
         (torch.bfloat16, 4, 1024, "skewed"), (torch.bfloat16, 16, 1024, "skewed"))
# name: (SUM_COPIES, narrow_index_add arguments)
VARIANTS = {"P128": (128, dict(partitions=128)),
            "P128 sum64": (64, dict(partitions=128)),
            "P128 sum32": (32, dict(partitions=128)),
            "P64": (128, dict(partitions=64)),
            "P64 sum32": (32, dict(partitions=64)),
            "forced 128": (128, dict(partitions=128, min_copies=128, per_address=0)),
            "forced 64 P128": (128, dict(partitions=128, min_copies=64, per_address=0,
                                         spread=1 << 20)),
            "forced 64 P128 sum64": (64, dict(partitions=128, min_copies=64, per_address=0,
                                              spread=1 << 20)),
            "forced 64": (128, dict(partitions=64, min_copies=64, per_address=0)),
            "P128 no pdl": (128, dict(partitions=128, pdl=False)),
            "P64 no pdl": (128, dict(partitions=64, pdl=False))}
PROFILED = ("P128 no pdl", "P64 no pdl")


def run(out, idx, vals, sum_copies: int, kw: dict):
    sn.SUM_COPIES = sum_copies  # read at each call, captured with it
    return sn.narrow_index_add(out, idx, vals, **kw)


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    row = {"dtype": str(dtype)[6:], "width": width, "rows": rows, "dist": dist,
           "copies": {}, "kernels": {}}
    for name, (cp, kw) in VARIANTS.items():
        state = torch.empty(sn.state_numel(), device=DEV, dtype=torch.int32)
        got = run(out, idx, vals, cp, dict(kw, state=state))
        err = float((got.double() - ref).norm() / ref.norm())
        assert err < tol, (name, err)
        row["copies"][name] = int(state[0])
    row.update(rounds({name: lambda cp=cp, kw=kw: run(out, idx, vals, cp, kw)
                       for name, (cp, kw) in VARIANTS.items()}, ROUNDS))
    for name in PROFILED:
        cp, kw = VARIANTS[name]
        row["kernels"][name] = {k: round(v, 2) for k, v in narrow_costs.kernel_us(
            lambda cp=cp, kw=kw: run(out, idx, vals, cp, kw)).items() if v}
    sn.SUM_COPIES = VARIANTS["P128"][0]
    return row


def main() -> None:
    run_cells(__doc__, "probe_copies.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of "
              "20 calls); spread: the least and most of the rounds; "
              "kernels: median µs of each over 20 eager calls (profiler)")


if __name__ == "__main__":
    main()
