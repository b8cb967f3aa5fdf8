"""Do the scatter kernels gain from their first kernel launched as a programmatic dependent
of the launch before it (``wait_first``)?

One GPU. The narrow kernels' ``_init`` and the wide kernels' ``_prepare`` were plain
launches: each waited in the stream for the kernel before it to finish and for its own
launch, where Inductor's scatter pays one launch fewer (no third kernel). With
``wait_first`` (now the op's default) they are launched as programmatic dependents and
wait for that kernel in ``griddepcontrol.wait`` before reading anything
(``tests/test_gpu_pdl_order.py``), so their launch may overlap its end. Cells: those of the
grid at d047a19 over 1.05x the faster compiled column on one H200. Variants: the op as the
pass calls it ("op") and the same with plain first launches ("plain first"), both also
in the grid's compiled graph of ``index_put`` ("compiled", "compiled plain first": the
grid read wait_first slower on fp32 cells than this probe's calls of the op did); against
Inductor's plain scatter ("inductor"). µs a call in a CUDA graph of 20 calls (median of
five rounds taken in turn; spread: the least and most)::

    python benchmarks/probes/probe_init_pdl.py [--out probe_init_pdl.json]

(At c98eb01 and ca4bf9d, before ``wait_first`` was the default, the variants were "op",
plain first, and "wait first".)
"""

from __future__ import annotations

import functools
import os
import sys

import torch
from probe_narrow_costs import checked_rounds, run_cells

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx import scatter_kernels, scatter_narrow

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import bench_scatter as bs  # noqa: E402

ROUNDS = 5
F32, B16 = torch.float32, torch.bfloat16
CELLS = [(F32, 0, 65536, "uniform"), (F32, 1, 65536, "uniform"),
         (F32, 16, 1024, "uniform"), (F32, 16, 1024, "skewed"),
         (F32, 100, 1024, "uniform"), (F32, 1024, 1024, "uniform"),
         (B16, 4, 65536, "uniform"), (B16, 16, 65536, "uniform")] + \
    [(B16, 100, 1024, d) for d in ("uniform", "skewed", "hot")]
NARROW, WIDE = scatter_narrow.narrow_index_add, scatter_kernels.partitioned_index_add


def plain_first(out, idx, vals, P, op=torch.ops.commrt.partitioned_index_put):
    """The op as the pass calls it, its narrow and wide kernels' first launch a plain one."""
    kept = scatter_narrow.narrow_index_add, scatter_kernels.partitioned_index_add
    scatter_narrow.narrow_index_add = functools.partial(NARROW, wait_first=False)
    scatter_kernels.partitioned_index_add = functools.partial(WIDE, wait_first=False)
    try:
        return op(out, idx, vals, P)
    finally:
        scatter_narrow.narrow_index_add, scatter_kernels.partitioned_index_add = kept


def compiled(plain: bool):
    """The grid's commrt column of ``index_put`` (``bench_scatter``'s, with its settings;
    the same compiled graph for both variants: the op picks its kernels at each call), its
    first launch a plain one where ``plain``."""
    f = bs._column("commrt", bs.column_fn("index_put", "commrt"))

    def run(out, idx, vals, P):
        with bs._context("commrt"):
            if plain:
                return plain_first(out, idx, vals, P, op=lambda *a: f(*a[:3]))
            return f(out, idx, vals)
    return run


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    torch._dynamo.reset()
    variants = {"op": torch.ops.commrt.partitioned_index_put, "plain first": plain_first,
                "compiled": compiled(False), "compiled plain first": compiled(True)}
    return checked_rounds(dtype, width, rows, dist, variants, ROUNDS)


def main() -> None:
    run_cells(__doc__, "probe_init_pdl.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
