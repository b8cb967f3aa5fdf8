"""Does the narrow scatter gain from planning in every ``_scatter`` program, or from
adding into zero scratch with no ``_init`` at all?

One GPU. The narrow kernels' plan is made by ``_init``'s program 0; ``_scatter`` waits for
it (and for the copy of the output) before its first add. Two variants of
``narrow_index_add``: ``plans`` (each ``_scatter`` program makes the same plan from the same
sample while its first block loads; ``_init`` only copies) and ``zero`` (no ``_init``: the
adds go to zero scratch and ``_sum`` adds the output; not where the pass adds fp16/bf16 in
their own dtype, or sums a block's rows). On grid cells (4M value elements a cell): µs a
call in a CUDA graph of 20 calls (median of five rounds taken in turn; spread: the least
and most of the rounds) of ``commrt::partitioned_index_put`` with the copies the pass gives
it, under each variant, and Inductor's plain scatter (``index_put``, compiled) in the same
rounds; each variant's error against float64 is checked first. Run at c406d1e, the one
commit with the two options (the next removed them: slower in 10 of 11 cells)::

    python benchmarks/probes/probe_scatter_plans.py [--out probe_scatter_plans.json]
"""

from __future__ import annotations

from unittest import mock

import torch
from probe_narrow_costs import run_cells, variant_rounds

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx import scatter_narrow as sn

ROUNDS = 5
# (dtype, row width (0: 1-D values), output rows, indices)
CELLS = [(torch.float32, 16, 1024, d) for d in ("uniform", "skewed", "hot")] + \
    [(torch.float32, 0, 65536, d) for d in ("uniform", "skewed")] + \
    [(torch.bfloat16, 4, 65536, d) for d in ("uniform", "skewed", "hot")] + \
    [(torch.bfloat16, 16, 65536, "uniform"), (torch.float32, 16, 65536, "uniform"),
     (torch.bfloat16, 4, 1 << 20, "uniform")]
VARIANTS = {"shipped": {}, "plans": {"scatter_plans": True}, "zero": {"from_zero": True}}


def call(out, idx, vals, P: int, kw: dict):
    shipped = sn.narrow_index_add

    def variant(*args, **given):
        extra = dict(kw)
        if extra.get("from_zero") and (given.get("half_adds") or given.get("local")):
            extra = {"scatter_plans": True}
        return shipped(*args, **given, **extra)

    with mock.patch.object(sn, "narrow_index_add", variant):  # the pass imports it each call
        return torch.ops.commrt.partitioned_index_put(out, idx, vals, P)


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    # three calls each: the scratch left zero gives the same sum each call
    return variant_rounds(dtype, width, rows, dist,
                          {name: lambda *a, kw=kw: call(*a, kw) for name, kw in VARIANTS.items()},
                          ROUNDS, checks=3)


def main() -> None:
    run_cells(__doc__, "probe_scatter_plans.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
