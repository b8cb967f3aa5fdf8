"""Where did the seed benchmark's time go: the wide kernels of this checkout against an
earlier commit's, on the seed's shape.

One GPU. ``bench_scatter.py`` (three index_add of fp32 rows of 100, 1M indices drawn from
0..k, into 501 rows) read 0.64-0.69 ms for commrt at adfac6a and 0.60-0.93 ms at
d1c740e, the contended k slowest. For one of the three scatters, µs a call in a CUDA graph
of 20 calls (median of ``ROUNDS`` rounds taken in turn) and each kernel's µs (profiler,
median of 20 eager calls): the op as the pass calls it; the same with one thing changed
(``variants``: ``_sum`` or ``_prepare`` a plain launch, scalar atomics, other ``_sum``
steps); the earlier commit's ``partitioned_index_add`` (with its
own rule constants); and Inductor's partitioned scatter. Earlier forms of the variants ran
at cec7f3b (``_sum`` on 16 copies a step, as shipped then; fp32 in three tf32 parts
too), at d76bcc1 (combined rows
adding infinities only where a tile has one, or not at all; the values loaded to be
evicted first) and at c8067ae (the infinities counted in a product).

The earlier kernels are read from ``--old DIR``, which holds that commit's
``scatter_kernels.py`` and ``scatter_rule.py`` with their imports of each other made
absolute::

    mkdir old && for m in scatter_kernels scatter_rule; do
      git show adfac6a:comm/fx/$m.py | sed 's/^from \\.scatter_/from old_scatter_/' \\
        > old/old_$m.py; done
    python benchmarks/probes/probe_seed_ab.py --old old --old-commit adfac6a --out r.json
"""

from __future__ import annotations

import argparse
import json

import torch
from probe_narrow_costs import (
    checked_errors,
    inductor_columns,
    kernel_us,
    meta,
    old_kernels,
    old_option,
    rounds,
    with_constants,
)

import commrt.fx.scatter_kernels as wide
from commrt.fx import scatter as pass_scatter

DEV = torch.device("cuda")
N, D, ROWS = 1_000_000, 100, 501
KS = (0, 15, 500)
ROUNDS = 5


def _op(**kw):
    return lambda o, i, v, P: wide.partitioned_index_add(o, i, v, P, **kw)


def variants() -> dict:
    """The wide op with one thing changed each (name: ``fn(out, idx, vals, P)``)."""
    return {"_sum plain launch": _op(sum_pdl=False),
            "_prepare plain launch": _op(wait_first=False),
            "scalar atomics": with_constants(wide, _op(), row_alignment=lambda *a: 1),
            "_sum 16 copies a step": with_constants(wide, SUM_CP=16),
            "_sum 64 copies a step": with_constants(wide, SUM_CP=64),
            "_sum 64 a step": with_constants(wide, SUM_BLOCK=64)}


def cell(old, k: int) -> dict:
    g = torch.Generator(device=DEV).manual_seed(k)
    out = torch.randn(ROWS, D, device=DEV, generator=g)
    vals = torch.randn(N, D, device=DEV, generator=g)
    idx = torch.randint(0, k + 1, (N,), device=DEV, generator=g)
    ref = out.double().index_add(0, idx, vals.double())
    P = pass_scatter.copies(ROWS, D, N, torch.float32,
                            torch.cuda.get_device_properties(DEV).total_memory)
    _, parted = inductor_columns(out, idx, vals)
    ours = {"shipped": lambda: torch.ops.commrt.partitioned_index_put(out, idx, vals, P)}
    for name, fn in variants().items():
        ours[name] = lambda fn=fn: fn(out, idx, vals, P)
    if old is not None:
        ours["before"] = lambda: old.partitioned_index_add(out, idx, vals, P)
    calls = {**ours, "inductor partitioned": lambda: parted(out, idx, vals)}
    row = {"k": k, "partitions": P,
           "err": checked_errors(calls, ref, 1e-5, lambda name: name in ours)}
    row.update(rounds(calls, ROUNDS))
    row["kernels"] = {name: kernel_us(fn, names=None) for name, fn in calls.items()}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    old_option(ap)
    ap.add_argument("--out", default="probe_seed_ab.json")
    args = ap.parse_args()
    old, old_flags = old_kernels(args)
    command = "python benchmarks/probes/probe_seed_ab.py" + old_flags
    result = {"meta": dict(meta(command, "µs a call (median of rounds, each a CUDA graph of "
                                "20 calls); kernels: µs, profiler, median of 20 eager calls"),
                           before=args.old_commit), "cells": []}
    for k in KS:
        result["cells"].append(cell(old, k))
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
