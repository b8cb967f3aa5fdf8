"""Does a fixed-shape copy of Inductor's partitioned scatter (``scatter_spread``: value j
to fp32 copy j % p, no zeroing launch) run as fast as Inductor's own at its faster config?

One GPU. Where the rule hands narrow rows with many values a row to Inductor's partitions,
Inductor's autotuner picks the scatter kernel's config by a coin toss, and the slower one
costs up to 18% (docs/decisions.md, 2026-11-28). Here ``spread_index_add`` with Inductor's
partition count, on blocks of whole rows (1,024 elements a block on 4 warps,
``_spread_sum`` a programmatic dependent: "blocks"), and so with the rows that a few
candidates of a block take summed first where enough of its rows take them ("hot k of m": k
candidates, m rows; element-wise blocks as Inductor's kernel, with and without PDL, ran at
93b0b4a, and with bf16 and wide rows at fe1ff21); the op as the pass calls it with its
copies ("op": the narrow kernels, or from f0bd61e on ``scatter_spread`` where the rule
gives it); against Inductor's partitioned scatter compiled with its defaults ("inductor
partitioned") and with pointwise autotuning off ("partitioned first": its first config) and
its plain scatter ("inductor"). fp32 grid cells (4M value elements a cell) where the rule
gives Inductor's partitions or the narrow kernels lose to them: µs a call in a CUDA graph
of 20 calls (median of five rounds taken in turn; spread: the least and most of the
rounds); each variant's error against float64 is checked first (a variant over the bound is
left out, its error under "dropped")::

    python benchmarks/probes/probe_spread.py [--out probe_spread.json]
"""

from __future__ import annotations

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


def main() -> None:
    run_cells(__doc__, "probe_spread.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
