"""Does the scatter kernels' last launch, ``_sum``, cost less on fewer programs, and the
wide kernels' as a programmatic dependent?

One GPU. Where the plan keeps one copy, ``_sum`` does nothing, yet its launch is on the
call's path: with the wide kernels (fp32 rows of 100 into 1,024 rows, uniform) the call
took 9.8 µs without it against 11.1 with it, Inductor's plain scatter 9.3
(``probe_wide_one_copy_split_NVIDIA_H200.json``); the narrow kernels' programmatic ``_sum``
cost 0.55-0.75 µs doing nothing (``probe_half_switch_NVIDIA_H200.json``). ``_sum`` takes up
to ``SUM_PROGRAMS`` programs (2,048), each looping over the plane: 1,024 of them for 1-D
values into 65,536 rows with 128 copies allowed. Variants: the op as the pass calls it
("op"), the same with at most 512, 132 or 32 ``_sum`` programs ("sum k"), and for the wide
kernels ``_sum`` launched as a programmatic dependent of ``_scatter`` ("pdl", "pdl sum
k"); against Inductor's plain scatter ("inductor"). Grid cells (4M value elements a cell):
µs a call in a CUDA graph of 20 calls (median of five rounds taken in turn; spread: the
least and most of the rounds); each variant's error against float64 is checked first::

    python benchmarks/probes/probe_sum_grid.py [--out probe_sum_grid.json]

Run at cf70dce, the one commit where the kernels take ``sum_programs`` (the wide ``_sum``
has been a programmatic dependent since).
"""

from __future__ import annotations

import functools

import torch
from probe_narrow_costs import checked_rounds, run_cells

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx import scatter_kernels, scatter_narrow

ROUNDS = 5
F32, BF16 = torch.float32, torch.bfloat16
NARROW = [(F32, 0, 65536, d) for d in ("uniform", "skewed", "hot")] + \
    [(F32, 16, 1024, d) for d in ("uniform", "skewed")] + \
    [(BF16, 4, 65536, d) for d in ("uniform", "skewed")]
WIDE = [(F32, 100, 1024, d) for d in ("uniform", "skewed", "hot")] + \
    [(BF16, 1024, 8, d) for d in ("uniform", "hot")] + [(BF16, 100, 1024, "uniform")]
CELLS = NARROW + WIDE


def op_with(module, name: str, **kw):
    """The op as the pass calls it, with ``module.name`` (the kernels' entry it imports at
    each call) given ``kw``."""
    def run(out, idx, vals, P):
        kept = getattr(module, name)
        setattr(module, name, functools.partial(kept, **kw))
        try:
            return torch.ops.commrt.partitioned_index_put(out, idx, vals, P)
        finally:
            setattr(module, name, kept)
    return run


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {"op": torch.ops.commrt.partitioned_index_put}
    if (dtype, width, rows, dist) in NARROW:
        mod, name = scatter_narrow, "narrow_index_add"
        extra = {}
    else:
        mod, name = scatter_kernels, "partitioned_index_add"
        extra = {"pdl": op_with(mod, name, sum_pdl=True)}
        extra.update({f"pdl sum {k}": op_with(mod, name, sum_pdl=True, sum_programs=k)
                      for k in (132, 32)})
    variants.update({f"sum {k}": op_with(mod, name, sum_programs=k) for k in (512, 132, 32)})
    variants.update(extra)
    return checked_rounds(dtype, width, rows, dist, variants, ROUNDS)


def main() -> None:
    run_cells(__doc__, "probe_sum_grid.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
