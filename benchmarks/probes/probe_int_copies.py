"""Can integer rows wider than 16 elements do without the plan: one value element a
thread, value row ``j`` into copy ``j % P``, the copies summed by a second launch?

One GPU. ``scatter_ints.int_flat_index_add`` adds a flat run of 256 value elements a
program on 8 warps (one a thread, as ``probe_int_flat`` timed on one copy), with no plan:
one copy is a clone of the output, more are ``scatter_scratch``'s and ``_int_sum`` adds
them to it. Against the op as the pass calls it (int32: the narrow kernels' plan, or
Inductor's plain scatter; int64: ``int_index_add``'s native atomics on the pass's copies)
and Inductor's two compiled scatters (``index_put``), on the grid's cells (4M value
elements, values -8..8): µs a call in a CUDA graph of 20 calls (median of five rounds
taken in turn; spread: the least and most of the rounds), every column equal to torch's
sum first. Copies ``P`` up to ``MAX_COPY_ELEMENTS`` elements in all::

    python benchmarks/probes/probe_int_copies.py [--out probe_int_copies.json]
"""

from __future__ import annotations

import sys

import torch
from probe_int32_rows import ROUNDS, base_cell, exact_row
from probe_narrow_costs import kernel_us, run_cells

from commrt.fx import scatter as pass_scatter
from commrt.fx.scatter_ints import int_flat_index_add

I32, I64 = torch.int32, torch.int64
DISTS = ("uniform", "skewed", "hot")
# (dtype, row width, output rows, index distribution)
CELLS = [(I32, 100, 1024, d) for d in DISTS] + [(I32, 1024, 1024, d) for d in DISTS] + \
    [(I32, 1024, 8, "uniform"), (I32, 1024, 8, "hot"), (I32, 4096, 1024, "uniform"),
     (I32, 4096, 1024, "hot"), (I32, 1024, 65536, "uniform"), (I32, 1024, 65536, "hot"),
     (I32, 100, 65536, "uniform")] + \
    [(I64, 100, 1024, "uniform"), (I64, 100, 1024, "hot"), (I64, 1024, 65536, "uniform"),
     (I64, 1024, 65536, "skewed")]
COPIES = (1, 4, 8, 16, 32)
MAX_COPY_ELEMENTS = 1 << 22


def cell(dtype: torch.dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals, P, ref, calls = base_cell(width, rows, dist, dtype)
    if not pass_scatter._routes(rows, width, idx.numel(), dtype, dtype, P):
        del calls["op"]  # the pass leaves the cell to Inductor: the op is its plain column
    for p in COPIES:
        if p == 1 or p * rows * width <= MAX_COPY_ELEMENTS:
            calls[f"flat P{p}"] = lambda p=p: int_flat_index_add(out, idx, vals, p)
    row = exact_row(calls, ref, width, rows, dist, dtype=str(dtype).removeprefix("torch."),
                    partitions=P)
    if KERNELS_TOO:
        row["kernels"] = {name: {k: round(v, 2) for k, v in
                                 kernel_us(calls[name], names=None).items()}
                          for name in calls if name.startswith("flat")}
    return row


# --kernels: two cells only, each flat column's kernels timed apart (eager, profiler; at
# e5ec0c0 the sum was a programmatic dependent of the adds, and a column "no pdl" not)
KERNELS_CELLS = [(I32, 100, 1024, "uniform"), (I32, 1024, 8, "uniform")]
KERNELS_TOO = "--kernels" in sys.argv


def main() -> None:
    if KERNELS_TOO:
        sys.argv.remove("--kernels")
    run_cells(__doc__, "probe_int_copies_kernels.json" if KERNELS_TOO else
              "probe_int_copies.json", KERNELS_CELLS if KERNELS_TOO else CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)",
              " --kernels" if KERNELS_TOO else "", "probe_int_copies")


if __name__ == "__main__":
    main()
