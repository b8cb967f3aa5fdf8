"""Would fp16/bf16 narrow rows on one copy run as fast as Inductor's plain scatter on
uniform indices if they were added in their own dtype (no fp32 copy, no ``_sum``)?

One GPU. bf16 ``index_put`` of rows of 4 into 65,536 rows (16 values a row) goes to the
narrow kernels on one fp32 copy, summed into the output by ``_sum``: 1.13-1.17x Inductor's
plain scatter on uniform indices in the grids at f0bd61e. Adding in bf16 straight into the
output (``half_adds``, as the rule does up to ``HALF_ADDS_PER_ROW`` values a row) lost on
skewed indices there (70 against 49 µs,
docs/decisions/2026-11-25-scatter-half-precision-rows-added-their.md). A plan that chose
between the two on the GPU would still launch ``_sum`` (a no-op where it chose bf16), so
bf16 adds must come well under the ceiling for it to pay. Variants: the op as the pass calls
it ("op": from 0c7eba3 on with that choice, ``own_adds``), the one fp32 copy ("fp32 copy":
the op before), ``half_adds`` with the pass's hot rows ("half adds") and without them ("half
adds, no hot"), and the op without its ``_sum`` launch ("op, no _sum", a no-op where the
plan adds in bf16: where it does not, as on skewed and hot indices, this variant is wrong
and dropped); against Inductor's plain scatter ("inductor"). µs a call in a CUDA graph of 20
calls (median of five rounds taken in turn; spread: the least and most)::

    python benchmarks/probes/probe_half_switch.py [--out probe_half_switch.json]
"""

from __future__ import annotations

import torch
from probe_narrow_costs import checked_rounds, run_cells

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx import scatter_narrow
from commrt.fx.scatter_narrow import narrow_index_add
from commrt.fx.scatter_rule import OWN_ADDS

ROUNDS = 5
CELLS = [(dt, w, rows, d) for dt in (torch.bfloat16, torch.float16)
         for w, rows in ((4, 65536), (16, 16384)) for d in ("uniform", "skewed", "hot")]


def half(**kw):
    def run(out, idx, vals, P):
        return narrow_index_add(out, idx, vals, 1, half_adds=True, **kw)
    return run


class _NoLaunch:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def no_sum(out, idx, vals, P):
    """The op (``own_adds``, one copy) with ``_sum`` not launched."""
    kept, scatter_narrow._sum = scatter_narrow._sum, _NoLaunch()
    try:
        return narrow_index_add(out, idx, vals, 1, own_adds=OWN_ADDS)
    finally:
        scatter_narrow._sum = kept


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {"op": torch.ops.commrt.partitioned_index_put,  # with the pass's copies
                "op, no _sum": no_sum,
                "fp32 copy": lambda out, idx, vals, P: narrow_index_add(out, idx, vals, 1),
                "half adds": half(), "half adds, no hot": half(hot=0)}
    return checked_rounds(dtype, width, rows, dist, variants, ROUNDS)


def main() -> None:
    run_cells(__doc__, "probe_half_switch.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
