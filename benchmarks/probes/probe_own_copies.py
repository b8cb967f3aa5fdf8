"""Do the shared-memory sums run faster with a copy of the sums a warp, added to with plain
loads and stores where a warp's lanes fall on distinct elements, than with atomics?

One GPU. ``scatter_shared`` adds every value to shared-memory sums with
``red.shared.add.f32``, which Hopper runs as a compare-and-swap loop (about one element a
cycle an SM); rows of 4 into 1,024 rows lost to Inductor's partitions so (32-41 µs against
16-28). With a copy a warp (``own``), a lane alone on its element in its warp
(``match.any``) adds with a load and a store; lanes that share one still use the atomic.
For 4M values a cell (the grid's data), µs a call in a CUDA graph of 20 calls (median of
five rounds taken in turn): the op as the pass calls it, the shared sums as shipped (copies
shared by warps past 64 KB), ``own`` on 4, 8 and 16 warps where the copies fit, and
Inductor's plain and partitioned scatters (``index_put``).

    python benchmarks/probes/probe_own_copies.py [--out probe_own_copies.json]
"""

from __future__ import annotations

import torch
from probe_narrow_costs import DEV, cell_data, inductor_columns, rounds, run_cells

from commrt.fx import scatter as pass_scatter
from commrt.fx.scatter_shared import NoRoom, shared_sums_index_add

ROUNDS = 5
F32, BF16 = torch.float32, torch.bfloat16
DISTS = ("uniform", "skewed", "hot")
# (dtype, row width (0: 1-D), output rows, index distribution); 4M value elements a cell
CELLS = tuple((dt, w, rows, d) for w, rows in ((4, 1024), (0, 1024), (4, 2048), (16, 256))
              for dt in (F32, BF16) for d in DISTS)
# Inductor's bf16 atomics on contended rows: up to 1.3 s a call (scatter_grid_NVIDIA_H200.md)
SLOW = {(BF16, "skewed"), (BF16, "hot")}


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    P = pass_scatter.copies(rows, max(1, width), idx.numel(), dtype,
                            torch.cuda.get_device_properties(DEV).total_memory)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    plain, parted = inductor_columns(out, idx, vals)
    calls = {"op": lambda: torch.ops.commrt.partitioned_index_put(out, idx, vals, P),
             "shared": lambda: shared_sums_index_add(out, idx, vals)}
    for warps in (4, 8, 16):
        try:
            shared_sums_index_add(out, idx, vals, own=True, warps=warps)
        except NoRoom:
            continue
        calls[f"own w{warps}"] = lambda w=warps: shared_sums_index_add(out, idx, vals,
                                                                       own=True, warps=w)
    if (dtype, dist) not in SLOW:
        calls["inductor"] = lambda: plain(out, idx, vals)
    calls["inductor partitioned"] = lambda: parted(out, idx, vals)
    row = {"dtype": str(dtype)[6:], "width": width, "rows": rows, "dist": dist,
           "partitions": P, "err": {}}
    bound = 1e-5 if dtype == F32 else 2e-2
    for name, fn in calls.items():
        for _ in range(3):  # a race would move the error
            row["err"][name] = err = float((fn().double() - ref).norm() / ref.norm())
            if name.startswith(("own", "shared")):
                assert err < bound, (name, row)
    row.update(rounds(calls, ROUNDS))
    return row


def main() -> None:
    run_cells(__doc__, "probe_own_copies.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; err: relative error against "
              "float64 (the last of three calls)")


if __name__ == "__main__":
    main()
