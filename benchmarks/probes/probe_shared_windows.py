"""Do single values into more rows than shared memory holds gain from shared-memory sums
over interleaved windows?

One GPU. Single values (1-D) into more than ``SHARED_PLANE`` rows go to the narrow
kernels: plain atomics where the plan sees no contention, else copies, which took 1-D
values into 65,536 rows, skewed, 1.07-1.15x Inductor's partitions in the grids.
``scatter_shared`` sums every output row in shared memory; past ``SHARED_PLANE`` rows it
can sum interleaved windows of rows (row r in window r % W), each window's programs
reading all the indices. For 4M fp32 and bf16 values, µs a call in a CUDA graph of 20
calls (median of five rounds taken in turn) of the narrow kernels as the pass calls them,
the windowed sums in windows of 16,384 and 32,768 rows (8 and 16 warps), and Inductor's plain and
partitioned scatters (``index_put``).

    python benchmarks/probes/probe_shared_windows.py [--out probe_shared_windows.json]

at e3454a8, the one commit whose ``shared_sums_index_add`` takes ``window``.
"""

from __future__ import annotations

import torch
import torch._inductor.config as ic
from probe_narrow_costs import cell_data, rounds, run_cells

from commrt.fx import scatter as pass_scatter
from commrt.fx.scatter_narrow import narrow_index_add
from commrt.fx.scatter_rule import pair_sample
from commrt.fx.scatter_shared import shared_sums_index_add

DEV = torch.device("cuda")
ROUNDS = 5
F32, BF16 = torch.float32, torch.bfloat16
DISTS = ("uniform", "skewed", "hot")
# (dtype, output rows, indices); 4M 1-D values a cell
CELLS = tuple((F32, rows, d) for rows in (32768, 65536, 131072) for d in DISTS) + \
    tuple((BF16, 65536, d) for d in DISTS)
# Inductor's bf16 atomics on contended rows: 0.17-90 s a call (scatter_grid_NVIDIA_H200.md)
SLOW = {(BF16, "skewed"): ("inductor",), (BF16, "hot"): ("inductor", "inductor partitioned")}


def _plain(o, i, v):
    return torch.index_put(o, (i,), v, accumulate=True)


def _parted(o, i, v):  # the same op, compiled with Inductor's partitions
    return torch.index_put(o, (i,), v, accumulate=True)


def cell(dtype, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, 0, rows, dist)
    P = pass_scatter.copies(rows, 1, idx.numel(), dtype,
                            torch.cuda.get_device_properties(DEV).total_memory)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    torch._dynamo.reset()  # two functions of their own code: dynamo caches by code
    plain, parted = torch.compile(_plain, dynamic=False), torch.compile(_parted, dynamic=False)
    calls = {
        "narrow": lambda: narrow_index_add(out, idx, vals, P, pair_sample=pair_sample(rows)),
        "shared 16K": lambda: shared_sums_index_add(out, idx, vals, window=16384),
        "shared 16K w16": lambda: shared_sums_index_add(out, idx, vals, window=16384,
                                                        warps=16),
        "shared 32K": lambda: shared_sums_index_add(out, idx, vals, window=32768),
        "shared 32K w16": lambda: shared_sums_index_add(out, idx, vals, window=32768,
                                                        warps=16)}
    slow = SLOW.get((dtype, dist), ())
    if "inductor" not in slow:
        with ic.patch({"fx_graph_cache": False}):
            plain(out, idx, vals)
        calls["inductor"] = lambda: plain(out, idx, vals)
    if "inductor partitioned" not in slow:
        with ic.patch({"partitioned_scatter_enabled": True, "fx_graph_cache": False}):
            parted(out, idx, vals)
        calls["inductor partitioned"] = lambda: parted(out, idx, vals)
    row = {"dtype": str(dtype)[6:], "rows": rows, "dist": dist, "partitions": P, "err": {}}
    for name, fn in calls.items():
        row["err"][name] = float((fn().double() - ref).norm() / ref.norm())
    row.update(rounds(calls, ROUNDS))
    return row


def main() -> None:
    run_cells(__doc__, "probe_shared_windows.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; err: relative error against "
              "float64")


if __name__ == "__main__":
    main()
