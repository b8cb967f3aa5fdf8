"""Do the scatter kernels gain from a ``_sum`` that returns without waiting for ``_scatter``
where the plan left it nothing to do (``sum_early``)?

One GPU. ``_sum`` is a programmatic dependent of ``_scatter``; where the plan chose one
fp32 copy (the output itself) or the output's own dtype (``own_adds``) it has nothing to
do, yet it waited for ``_scatter`` and read the plan before returning: 0.6-0.7 µs a call
on one H200 (``probe_half_switch.py``), about 1.3 µs in the wide kernels
(``probe_wide_one_copy.py``). With ``sum_early``, ``_scatter``'s programs let ``_sum``
launch only once they have seen the plan, and ``_sum`` reads it without waiting and
returns; the stream's next launch still waits for ``_scatter``
(``tests/test_gpu_pdl_order.py``). Variants: the op as the pass calls it ("early"), the
same call without ``sum_early`` ("wait"), and, on narrow rows, one copy up to 512 adds an
address ("early pa512", where the plan chose copies at 128); against Inductor's plain
scatter ("inductor"). µs a call in a CUDA graph of 20 calls (median of five rounds taken
in turn; spread: the least and most)::

    python benchmarks/probes/probe_sum_early.py [--out probe_sum_early.json]
"""

from __future__ import annotations

import functools

import torch
from probe_narrow_costs import checked_rounds, run_cells

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx import scatter_kernels, scatter_narrow

ROUNDS = 5
F32, B16 = torch.float32, torch.bfloat16
CELLS = [(F32, 0, 65536, d) for d in ("uniform", "skewed", "hot")] + \
    [(F32, 16, 65536, "uniform")] + \
    [(F32, 16, 1024, d) for d in ("uniform", "skewed")] + \
    [(B16, 4, 65536, d) for d in ("uniform", "skewed")] + \
    [(B16, 16, 16384, "uniform")] + \
    [(F32, 100, 1024, d) for d in ("uniform", "skewed", "hot")]
NARROW, WIDE = scatter_narrow.narrow_index_add, scatter_kernels.partitioned_index_add


def patched(**kw):
    """The op, its narrow and wide kernels called with ``kw`` (the wide ones with
    ``sum_early`` only)."""
    def run(out, idx, vals, P):
        kept = scatter_narrow.narrow_index_add, scatter_kernels.partitioned_index_add
        scatter_narrow.narrow_index_add = functools.partial(NARROW, **kw)
        scatter_kernels.partitioned_index_add = functools.partial(
            WIDE, **{k: v for k, v in kw.items() if k == "sum_early"})
        try:
            return torch.ops.commrt.partitioned_index_put(out, idx, vals, P)
        finally:
            scatter_narrow.narrow_index_add, scatter_kernels.partitioned_index_add = kept
    return run


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {"early": torch.ops.commrt.partitioned_index_put,
                "wait": patched(sum_early=False)}
    if 0 < width <= 16 and dtype == F32:
        variants["early pa512"] = patched(per_address=512)
    return checked_rounds(dtype, width, rows, dist, variants, ROUNDS)


def main() -> None:
    run_cells(__doc__, "probe_sum_early.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
