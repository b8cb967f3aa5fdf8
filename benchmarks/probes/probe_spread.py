"""Does a fixed-shape copy of Inductor's partitioned scatter (``scatter_spread``: value j
to fp32 copy j % p, no zeroing launch) run as fast as Inductor's own at its faster config?

One GPU. Where the rule hands narrow rows with many values a row to Inductor's partitions,
Inductor's autotuner picks the scatter kernel's config by a coin toss, and the slower one
costs up to 18%
(docs/decisions/2026-11-28-scatter-two-speeds-inductor-partitioned-graph.md). Here
``spread_index_add`` with Inductor's partition count, on blocks of whole rows (1,024
elements a block on 4 warps, ``_spread_sum`` a programmatic dependent: "blocks"), and so
with the rows that a few candidates of a block take summed first where enough of its rows
take them ("hot k of m": k candidates, m rows; element-wise blocks as Inductor's kernel,
with and without PDL, ran at 93b0b4a, and with bf16 and wide rows at fe1ff21); the op as the
pass calls it with its copies ("op": the narrow kernels, or from f0bd61e on
``scatter_spread`` where the rule gives it); against Inductor's partitioned scatter compiled
with its defaults ("inductor partitioned") and with pointwise autotuning off ("partitioned
first": its first config) and its plain scatter ("inductor"). fp32 grid cells (4M value
elements a cell) where the rule gives Inductor's partitions or the narrow kernels lose to
them: µs a call in a CUDA graph of 20 calls (median of five rounds taken in turn; spread:
the least and most of the rounds); each variant's error against float64 is checked first (a
variant over the bound is left out, its error under "dropped")::

    python benchmarks/probes/probe_spread.py [--out probe_spread.json]

``--blocks``: the shipped spread's block (1,024, 2,048 or 4,096 value elements on 4 or 8
warps) and hot candidates (1 or 2, none) on the cells the rule gives it, against Inductor's
partitions at their first config (default out ``probe_spread_blocks.json``).
"""

from __future__ import annotations

import sys

import torch
import torch._inductor.config as ic
from probe_narrow_costs import DEV, checked_rounds, run_cells

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx.scatter_rule import inductor_partitions
from commrt.fx.scatter_spread import spread_index_add

ROUNDS = 5
F32, BF16 = torch.float32, torch.bfloat16
# (dtype, row width (0: 1-D), output rows, indices)
CELLS = [(F32, w, rows, d) for w, rows in ((4, 1024), (16, 8))
         for d in ("uniform", "skewed", "hot")] + \
    [(F32, 16, 1024, "uniform"), (F32, 16, 1024, "skewed"), (F32, 1, 65536, "skewed"),
     (F32, 1, 65536, "uniform")]


def copies(out, idx) -> int:
    memory = torch.cuda.get_device_properties(DEV).total_memory
    return inductor_partitions(out.numel(), idx.numel(), out.element_size(), memory)


def spread(**kw):
    def run(out, idx, vals, P):
        return spread_index_add(out, idx, vals, copies(out, idx), **kw)
    return run


def _put_tuned(o, i, v):
    return torch.index_put(o, (i,), v, accumulate=True)


def _put_first(o, i, v):  # a code object of its own: Dynamo caches compiles by it
    return torch.index_put(o, (i,), v, accumulate=True)


def partitioned(tune: bool):
    """Inductor's partitioned scatter (``index_put``), compiled at its first call with
    pointwise autotuning on (``tune``) or off."""
    f = torch.compile(_put_tuned if tune else _put_first, dynamic=False)

    def run(out, idx, vals, P):
        with ic.patch({"partitioned_scatter_enabled": True, "fx_graph_cache": False,
                       "triton.autotune_pointwise": tune}):
            return f(out, idx, vals)
    return run


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {"blocks": spread(), "hot 4 of 8": spread(hot=4, hot_min=8),
                "hot 2 of 16": spread(hot=2, hot_min=16),
                "op": torch.ops.commrt.partitioned_index_put,  # with the pass's copies
                "inductor partitioned": partitioned(True),
                "partitioned first": partitioned(False)}
    return checked_rounds(dtype, width, rows, dist, variants, ROUNDS)


# --blocks: the shipped spread's block (value elements, warps) and candidates, on the cells
# the rule gives it
BLOCK_CELLS = [(F32, w, rows, d) for w, rows in ((16, 8), (4, 1024))
               for d in ("uniform", "skewed", "hot")]


def block_cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {"hot 2 of 16": spread(hot=2, hot_min=16),  # as shipped: 1,024 on 4 warps
                "hot 1 of 16": spread(hot=1, hot_min=16), "no hot": spread(),
                "2048 w4 hot 2 of 32": spread(hot=2, hot_min=32, block=2048),
                "2048 w8 hot 2 of 32": spread(hot=2, hot_min=32, block=2048, warps=8),
                "4096 w8 hot 2 of 64": spread(hot=2, hot_min=64, block=4096, warps=8),
                "partitioned first": partitioned(False)}
    return checked_rounds(dtype, width, rows, dist, variants, ROUNDS)


def main() -> None:
    unit = f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)"
    if "--blocks" in sys.argv:
        sys.argv.remove("--blocks")
        run_cells(__doc__, "probe_spread_blocks.json", BLOCK_CELLS, block_cell, unit,
                  flags=" --blocks", script="probe_spread")
    else:
        run_cells(__doc__, "probe_spread.json", CELLS, cell, unit)


if __name__ == "__main__":
    main()
