"""Does a fixed-shape copy of Inductor's partitioned scatter (``scatter_spread``: value j
to fp32 copy j % p, no zeroing launch) run as fast as Inductor's own at its faster config?

One GPU. Where the rule hands narrow rows with many values a row to Inductor's partitions,
Inductor's autotuner picks the scatter kernel's config by a coin toss, and the slower one
costs up to 18% (docs/decisions.md, 2026-11-28). Here ``spread_index_add`` with Inductor's
partition count, as shipped ("spread": 1,024 elements a program on 4 warps, ``_spread_sum``
a programmatic dependent), without PDL, on 512 elements and 8 warps, and with half the
copies; the op as the pass calls it today ("op"); against Inductor's partitioned scatter
compiled with its defaults ("inductor partitioned") and with pointwise autotuning off
("partitioned first": its first config) and its plain scatter ("inductor"). Grid cells (4M
value elements a cell), fp32 and bf16, where the rule gives Inductor's partitions or the
narrow kernels lose to them: µs a call in a CUDA graph of 20 calls (median of five rounds
taken in turn; spread: the least and most of the rounds); each variant's error against
float64 is checked first (a variant over the bound is left out, its error under
"dropped")::

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
CELLS = [(F32, 4, 1024, d) for d in ("uniform", "skewed", "hot")] + \
    [(F32, 16, 8, "uniform"), (F32, 100, 8, "uniform"), (F32, 1, 65536, "skewed"),
     (F32, 16, 1024, "skewed"), (BF16, 4, 1024, "uniform"), (BF16, 100, 8, "uniform"),
     (BF16, 1024, 8, "uniform")]


def copies(out, idx) -> int:
    memory = torch.cuda.get_device_properties(DEV).total_memory
    return inductor_partitions(out.numel(), idx.numel(), out.element_size(), memory)


def spread(**kw):
    def run(out, idx, vals, P, half: bool = False):
        p = copies(out, idx) // (2 if half else 1)
        return spread_index_add(out, idx, vals, max(1, p), **kw)
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
    variants = {"spread": spread(), "spread no pdl": spread(pdl=False),
                "spread 512 w8": spread(xblock=512, warps=8),
                "spread half": lambda *a: spread()(*a, half=True),
                "op": torch.ops.commrt.partitioned_index_put,  # with the pass's copies
                "inductor partitioned": partitioned(True),
                "partitioned first": partitioned(False)}
    return checked_rounds(dtype, width, rows, dist, variants, ROUNDS)


def main() -> None:
    run_cells(__doc__, "probe_spread.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
