"""Do rows of 16 to 256 elements into a few output rows gain from one-hot products
(``scatter_few._dot_partial``) over Inductor's partitions and commrt's kernels?

One GPU. fp32 rows of 16 into 8 rows went to ``scatter_spread`` (1.09-1.10x Inductor's
partitions uniform in the grid), rows of 100 into 8 rows to Inductor's partitioned graph
(fp32: 1.05-1.08x its other compile), bf16 ``index_put`` of both to Inductor's partitions
(bf16 adds). Here every program of ``_dot_partial`` sums its share of the values into
each output row as ``onehot @ values`` on tensor cores (fp32 in three exact tf32 parts),
stores a partial, and ``_total`` adds self and the partials (deterministic, no atomics).
For 4M value elements, µs a call in a CUDA graph of 20 calls (median of five rounds taken
in turn): the op as the pass calls it today, ``few_rows_index_add`` with its defaults
(2 programs an SM, 4,096 values a step, ``_total`` a programmatic dependent) and
variants of them, and Inductor's plain and partitioned scatters (``index_put``). Rows of
4 compare the shipped compare-and-add ``_partial`` with the products.

    python benchmarks/probes/probe_few_dot.py [--out probe_few_dot.json]
"""

from __future__ import annotations

import torch
import torch._inductor.config as ic
from probe_narrow_costs import cell_data, rounds, run_cells

from commrt.fx import scatter as pass_scatter
from commrt.fx.scatter_few import few_rows_index_add

DEV = torch.device("cuda")
ROUNDS = 5
F32, BF16 = torch.float32, torch.bfloat16
CELLS = ((F32, 16, 8, "uniform"), (F32, 16, 8, "skewed"), (F32, 16, 8, "hot"),
         (F32, 100, 8, "uniform"), (F32, 100, 8, "hot"), (F32, 16, 16, "uniform"),
         (F32, 256, 8, "uniform"), (F32, 4, 8, "uniform"),
         (BF16, 16, 8, "uniform"), (BF16, 16, 8, "hot"), (BF16, 100, 8, "uniform"),
         (BF16, 100, 8, "skewed"), (BF16, 4, 8, "uniform"))
VARIANTS = {"dot": {}, "dot 1/SM": {"programs_per_sm": 1}, "dot 4/SM": {"programs_per_sm": 4},
            "dot 2048 a step": {"tile": 2048}, "dot 8192 a step": {"tile": 8192},
            "dot no pdl": {"pdl": False}}


def _plain(o, i, v):
    return torch.index_put(o, (i,), v, accumulate=True)


def _parted(o, i, v):  # the same op, compiled with Inductor's partitions
    return torch.index_put(o, (i,), v, accumulate=True)


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    P = pass_scatter.copies(rows, width, idx.numel(), dtype,
                            torch.cuda.get_device_properties(DEV).total_memory)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    torch._dynamo.reset()  # two functions of their own code: dynamo caches by code
    plain, parted = torch.compile(_plain, dynamic=False), torch.compile(_parted, dynamic=False)
    with ic.patch({"fx_graph_cache": False}):
        plain(out, idx, vals)
    with ic.patch({"partitioned_scatter_enabled": True, "fx_graph_cache": False}):
        parted(out, idx, vals)
    calls = {"op": lambda: torch.ops.commrt.partitioned_index_put(out, idx, vals, P)}
    for name, kw in VARIANTS.items():
        calls[name] = lambda kw=kw: few_rows_index_add(out, idx, vals, dot=True, **kw)
    if width <= 4:
        calls["compare"] = lambda: few_rows_index_add(out, idx, vals, dot=False)
        calls["compare no pdl"] = lambda: few_rows_index_add(out, idx, vals, dot=False,
                                                             pdl=False)
    calls["inductor"] = lambda: plain(out, idx, vals)
    calls["inductor partitioned"] = lambda: parted(out, idx, vals)
    row = {"dtype": str(dtype).removeprefix("torch."), "width": width, "rows": rows,
           "dist": dist, "partitions": P, "err": {}}
    bound = 1e-5 if dtype == F32 else 8e-3
    for name, fn in calls.items():
        got = fn()
        row["err"][name] = err = float((got.double() - ref).norm() / ref.norm())
        if name.startswith(("dot", "compare")):
            assert err < bound, (name, row)
            assert torch.equal(fn(), got), (name, "not deterministic")
    row.update(rounds(calls, ROUNDS))
    return row


def main() -> None:
    run_cells(__doc__, "probe_few_dot.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; err: relative error against "
              "float64")


if __name__ == "__main__":
    main()
