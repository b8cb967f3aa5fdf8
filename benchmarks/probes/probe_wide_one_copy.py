"""Do the wide kernels gain from one copy and no plan where uniform indices pay the plan and
a third launch, and do a program's combined rows then keep skewed and hot indices fast?

One GPU. fp32 rows of 100 into 1,024 rows go to the wide kernels (``scatter_kernels``),
which plan on the GPU (``_prepare``'s program 0), add into copies the plan chose and sum
them (``_sum``); on uniform indices they took 1.17-1.25x Inductor's plain scatter in the
grids at f0bd61e, where the plan picks one copy. ``partitioned_index_add(..., 1)`` with no
plan: every program combines its rows where they hold at most ``LEADERS`` distinct
indices, and an fp32 output needs no ``_sum`` (two launches, as Inductor's scatter).
Variants: the op as the pass calls it ("op"), the wide kernels with the pass's copies and
their plan ("wide"), on one copy with the plan ("one copy, plan") and without it ("one
copy"); against Inductor's partitioned scatter ("inductor partitioned", its defaults)
and its plain scatter ("inductor"). Grid cells (4M value elements a cell): µs a call
in a CUDA graph of 20 calls (median of five rounds taken in turn; spread: the least and
most of the rounds); each variant's error against float64 is checked first::

    python benchmarks/probes/probe_wide_one_copy.py [--out probe_wide_one_copy.json]

Run at fac8fb8, the last commit where ``partitioned_index_add`` takes ``plan``.

``--split``: fp32 rows of 100 into 1,024 rows only, with one more variant, one copy with
the plan and ``_sum`` not launched ("one copy, plan, no _sum": with one copy and an fp32
output ``_sum`` does nothing but flag an index out of range), to split what the plan and
the ``_sum`` launch cost (default out ``probe_wide_one_copy_split.json``).
"""

from __future__ import annotations

import sys

import torch
from probe_narrow_costs import checked_rounds, run_cells
from probe_spread import partitioned

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx import scatter_kernels
from commrt.fx.scatter_kernels import partitioned_index_add

ROUNDS = 5
F32, BF16 = torch.float32, torch.bfloat16
# (dtype, row width, output rows, indices)
CELLS = [(dt, w, rows, d) for dt, w, rows in ((F32, 100, 1024), (F32, 100, 8), (F32, 16, 1024),
                                               (F32, 1024, 1024), (BF16, 100, 1024))
         for d in ("uniform", "skewed", "hot")]


def wide(copies: int | None = None, **kw):
    def run(out, idx, vals, P):
        return partitioned_index_add(out, idx, vals, P if copies is None else copies, **kw)
    return run


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {"op": torch.ops.commrt.partitioned_index_put,  # with the pass's copies
                "wide": wide(), "one copy, plan": wide(1, plan=True), "one copy": wide(1),
                "inductor partitioned": partitioned(True)}
    return checked_rounds(dtype, width, rows, dist, variants, ROUNDS)


class _NoLaunch:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def no_sum(out, idx, vals, P):
    """One copy with the plan, ``_sum`` not launched."""
    kept, scatter_kernels._sum = scatter_kernels._sum, _NoLaunch()
    try:
        return partitioned_index_add(out, idx, vals, 1, plan=True)
    finally:
        scatter_kernels._sum = kept


def split_cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {"op": torch.ops.commrt.partitioned_index_put, "one copy, plan": wide(1, plan=True),
                "one copy, plan, no _sum": no_sum, "one copy": wide(1)}
    return checked_rounds(dtype, width, rows, dist, variants, ROUNDS)


def main() -> None:
    unit = f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)"
    if "--split" in sys.argv:
        sys.argv.remove("--split")
        run_cells(__doc__, "probe_wide_one_copy_split.json",
                  [(F32, 100, 1024, d) for d in ("uniform", "skewed", "hot")], split_cell, unit,
                  flags=" --split", script="probe_wide_one_copy")
    else:
        run_cells(__doc__, "probe_wide_one_copy.json", CELLS, cell, unit)


if __name__ == "__main__":
    main()
