"""Do the narrow kernels gain from ``_sum``'s programs at the end of ``_scatter``'s grid
(``fused_sum``: two launches, not three) instead of a launch of their own?

One GPU. Where copies are allowed or the output is not fp32, the narrow kernels launch
``_sum`` after ``_scatter`` (a programmatic dependent): a no-op where the plan chose one
fp32 copy or the output's own dtype, which still cost 0.6-0.7 µs a call on one H200
(``probe_half_switch.py``), and the cells that commrt loses by a few percent to Inductor's
plain scatter are those (fp32 1-D values into 65,536 rows, uniform: 55.6 against 52.7 µs in
the grid at b73d91c). With ``fused_sum``, up to ``FUSED_SUM_PER_SM`` programs a
multiprocessor at the end of ``_scatter``'s grid do ``_sum``'s work: where there is nothing
to sum they return at once, else they wait for ``_scatter``'s programs to count themselves
done. Variants: the op as the pass calls it ("op"), the same call with ``fused_sum``
("fused"), and with 2 and 8 programs a multiprocessor ("fused 2/SM", "fused 8/SM"); against
Inductor's plain scatter ("inductor"). µs a call in a CUDA graph of 20 calls (median of five
rounds taken in turn; spread: the least and most). ``fused_sum`` was removed after the grid
measured it (docs/decisions/2026-11-28-scatter-sum-inside-scatter-grid-measured.md): run the
probe at d19ca81, whose ``_sum`` programs poll with one atomic and a pause (c649b87: atomics
without a pause, every ``_scatter`` program counting itself done; 6eac8ef: plain loads)::

    git checkout d19ca81
    python benchmarks/probes/probe_fused_sum.py [--out probe_fused_sum.json]
"""

from __future__ import annotations

import functools

import torch
from probe_narrow_costs import checked_rounds, run_cells

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx import scatter_narrow

ROUNDS = 5
F32, B16 = torch.float32, torch.bfloat16
CELLS = [(F32, 0, 65536, d) for d in ("uniform", "skewed", "hot")] + \
    [(F32, 16, 1024, d) for d in ("uniform", "skewed", "hot")] + \
    [(F32, 4, 65536, "uniform"), (F32, 4, 1024, "uniform")] + \
    [(B16, 4, 65536, d) for d in ("uniform", "skewed")] + \
    [(B16, 16, 16384, "uniform"), (B16, 0, 65536, "uniform"), (B16, 0, 65536, "skewed")]
ORIGINAL = scatter_narrow.narrow_index_add


def fused(per_sm: int = 0):
    """The op, its narrow kernels called with ``fused_sum`` (``per_sm``: programs a
    multiprocessor; 0: the module's)."""
    def run(out, idx, vals, P):
        kept = scatter_narrow.narrow_index_add, scatter_narrow.FUSED_SUM_PER_SM
        scatter_narrow.narrow_index_add = functools.partial(ORIGINAL, fused_sum=True)
        scatter_narrow.FUSED_SUM_PER_SM = per_sm or kept[1]
        try:
            return torch.ops.commrt.partitioned_index_put(out, idx, vals, P)
        finally:
            scatter_narrow.narrow_index_add, scatter_narrow.FUSED_SUM_PER_SM = kept
    return run


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {"op": torch.ops.commrt.partitioned_index_put, "fused": fused(),
                "fused 2/SM": fused(2), "fused 8/SM": fused(8)}
    return checked_rounds(dtype, width, rows, dist, variants, ROUNDS)


def main() -> None:
    run_cells(__doc__, "probe_fused_sum.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
