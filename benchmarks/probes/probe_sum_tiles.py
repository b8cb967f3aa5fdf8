"""Does the narrow kernels' ``_sum`` gain from a tile that fits the copies the plan chose?

One GPU. Where copies are allowed, the narrow kernels launch ``_sum`` with a tile of
``CP = min(partitions, SUM_COPIES)`` copies by ``SUM_TILE // CP`` elements: with up to
128 copies allowed it loaded ``[128, 64]`` tiles even where the plan chose 16 copies (fp32
rows of 16 into 1,024 rows, uniform: ``_sum`` took 2.4 µs of a 12.2 µs call on one H200).
With ``scatter_narrow.SUM_FIT`` it reads the copies in one ``[SUM_FIT, BLOCK]`` tile
where the plan chose at most ``SUM_FIT + 1`` (a branch on the GPU), in steps of ``CP``
otherwise. For a few grid cells (4M value elements), µs a call in a CUDA graph of 20
calls (median of five rounds taken in turn) of the op as the pass calls it with steps
only (``SUM_FIT`` out of reach) and with ``SUM_FIT`` 16 and 32, Inductor's plain scatter
(``index_put``), and the copies each plan chose. ``--twins``: cells with 16 copies only,
steps and ``SUM_FIT`` 32, each twice (its twin captured in its own graph, as every
variant is), so that a difference between two variants can be told from one between two
captures of the same kernels. (The results at 2d95fa7 and 6990e99 came from the probe's
own copy of ``_sum`` with the one tile, before it was shipped; their columns say which.)

    python benchmarks/probes/probe_sum_tiles.py [--out probe_sum_tiles.json] [--twins]
"""

from __future__ import annotations

import contextlib
import sys

import torch
import triton
from probe_narrow_costs import cell_data, checked_rounds, plan, run_cells

from commrt.fx import scatter as pass_scatter
from commrt.fx import scatter_narrow
from commrt.fx.scatter_rule import pair_sample

DEV = torch.device("cuda")
ROUNDS = 5
F32, BF16 = torch.float32, torch.bfloat16
CELLS = ((F32, 16, 1024, "uniform"), (F32, 16, 1024, "skewed"), (F32, 16, 1024, "hot"),
         (F32, 0, 65536, "uniform"), (F32, 0, 65536, "skewed"), (F32, 0, 65536, "hot"),
         (F32, 1, 65536, "skewed"), (F32, 4, 1024, "uniform"), (F32, 4, 1024, "skewed"),
         (BF16, 16, 1024, "uniform"), (BF16, 16, 1024, "skewed"), (BF16, 0, 65536, "uniform"),
         (BF16, 0, 65536, "skewed"))
TWINS = "--twins" in sys.argv
TWIN_CELLS = ((F32, 16, 1024, "uniform"), (BF16, 16, 1024, "uniform"), (F32, 4, 1024, "uniform"))
STEPS = 1 << 20  # a SUM_FIT that no tile of copies is over: steps only


def variant(fit: int):
    """The op as the pass calls it with ``SUM_FIT`` set to ``fit`` (over ``SUM_COPIES``:
    steps only)."""
    def fn(out, idx, vals, P):
        shipped = scatter_narrow.SUM_FIT
        scatter_narrow.SUM_FIT = fit
        try:
            return pass_scatter._partitioned_index_put(out, idx, vals, P)
        finally:
            scatter_narrow.SUM_FIT = shipped
    return fn


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {"steps": variant(STEPS), "fit16": variant(16), "fit32": variant(32)}
    if TWINS:
        variants = {"loop": variant(STEPS), "fit": variant(32), "loop twin": variant(STEPS),
                    "fit twin": variant(32)}
    row = checked_rounds(dtype, width, rows, dist, variants, ROUNDS)
    out, idx, vals = cell_data(dtype, width, rows, dist)
    P = pass_scatter.copies(rows, max(1, width), idx.numel(), dtype,
                            torch.cuda.get_device_properties(DEV).total_memory)
    with contextlib.suppress(Exception):  # the narrow kernels' plan, where they run
        row["copies"] = plan(out, idx, vals, P, pair_sample=pair_sample(rows))[0]
    row["triton"] = triton.__version__
    return row


def main() -> None:
    if TWINS:
        sys.argv.remove("--twins")
    run_cells(__doc__, "probe_sum_tiles.json", TWIN_CELLS if TWINS else CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; copies: the plan's",
              " --twins" if TWINS else "")


if __name__ == "__main__":
    main()
