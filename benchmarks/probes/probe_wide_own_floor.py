"""Where does the wide kernels' own-adds call spend its time over Inductor's plain scatter?

One GPU. On the grid's bf16 ``index_put`` of rows of 100 into 1,024 rows, uniform (the plan
adds in bf16: ``wide_own_adds``), each fixed cost of the call left out in turn, and then
together, for the floor of the three launches' form:

- ``no _sum launch``: ``_sum`` (which has nothing to do there) not launched;
- ``fixed plan``: ``_prepare``'s program 0 stores the plan the sample finds there (one
  copy, added in bf16) without sampling;
- ``no sums``: ``_scatter`` compiled without the combined rows' sums (``leaders=-1``: the
  registers they hold);
- ``no compare``: without the rows' compare matrix before the wait;
- ``rows 32 on 8 warps``: Inductor's tile drawn in the grid (32 rows of 128 columns).

Each is checked against float64 on that cell, where it is still the op (the plan finds no
contention there); ``no sums`` is the op on every cell (contended rows go to the copies
uncombined), and so is also timed on the skewed and hot cells. µs a call in a CUDA graph
of 20 calls (median of ``ROUNDS`` rounds taken in turn) beside Inductor's plain and
partitioned scatters, and each kernel's µs (profiler, median of 20 eager calls)::

    python benchmarks/probes/probe_wide_own_floor.py [--out r.json]
"""

from __future__ import annotations

import argparse
import inspect
import json
import tempfile
import textwrap

import torch
from probe_narrow_costs import (
    cell_data,
    inductor_columns,
    kernel_us,
    meta,
    rounds,
    with_constants,
)
from probe_scatter_forms import _COMPARE, form_kernel

import commrt.fx.scatter_kernels as wide
from commrt.fx import scatter as pass_scatter
from commrt.fx.scatter_rule import WIDE_OWN_ADDS
from commrt.symm_mem.launch import Launcher

DEV = torch.device("cuda")
ROUNDS = 5
CELL = (torch.bfloat16, 100, 1024)
_PLAN = "    else:\n        # The chance that two indices share a row"
# program 0 stores the plan uniform indices get (one copy, adds in the output's dtype)
_FIXED = ("    else:\n        tl.store(state, 1)\n        tl.store(state + 1, 0)\n"
          "        tl.store(state + 2, 0)\n        if OWN > 0:\n"
          "            tl.store(state + 3, 1)\n")
_NO_COMPARE = ("    same = (j[:, None] == j[None, :]) & ok[:, None]\n"
               "    first = ok\n")


class _NoLaunch:
    """A launcher whose launches do nothing (``_sum`` not launched)."""

    def prepare(self, *args, **kwargs):
        return lambda *a: None


def fixed_plan() -> list:
    """The edit of ``_prepare`` that stores the uncontended plan without sampling."""
    src = textwrap.dedent(inspect.getsource(wide._prepare.fn))
    start = src.index(_PLAN)
    return [(src[start:], _FIXED)]


def variants(where: str) -> dict:
    """{name: fn(out, idx, vals, P)}: the op and its forms (``with_constants`` patches the
    kernels' module for the call)."""
    prepare = Launcher(form_kernel("fixed plan", fixed_plan(), where, wide._prepare))
    no_compare = Launcher(form_kernel("no compare", [(_COMPARE.split("\n", 1)[1], _NO_COMPARE)],
                                      where))
    no_sum = _NoLaunch()

    def op(leaders):
        return lambda o, i, v, P: wide.partitioned_index_add(o, i, v, P, own_adds=WIDE_OWN_ADDS,
                                                             leaders=leaders)
    sums, bare = op(wide.LEADERS), op(-1)
    floor = dict(run_sum=no_sum, run_prepare=prepare)
    return {
        "shipped": lambda o, i, v, P: torch.ops.commrt.partitioned_index_put(o, i, v, P),
        "no _sum launch": with_constants(wide, sums, run_sum=no_sum),
        "fixed plan": with_constants(wide, sums, run_prepare=prepare),
        "no sums": bare,
        "no sums, no _sum launch": with_constants(wide, bare, run_sum=no_sum),
        "no sums, no _sum launch, fixed plan": with_constants(wide, bare, **floor),
        "floor, no compare": with_constants(wide, bare, run_scatter=no_compare, **floor),
        "floor, rows 32 on 8 warps": with_constants(wide, bare, BLOCK_ROWS=32,
                                                    SCATTER_WARPS=8, **floor),
    }


def cell(dist: str, calls: dict) -> dict:
    out, idx, vals = cell_data(*CELL, dist)
    P = pass_scatter.copies(CELL[2], CELL[1], idx.numel(), CELL[0],
                            torch.cuda.get_device_properties(DEV).total_memory)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    plain, parted = inductor_columns(out, idx, vals)
    ours = {name: lambda fn=fn: fn(out, idx, vals, P) for name, fn in calls.items()}
    row = {"dtype": "bfloat16", "width": CELL[1], "rows": CELL[2], "dist": dist,
           "partitions": P, "err": {}}
    every = {**ours, "inductor": lambda: plain(out, idx, vals),
             "inductor partitioned": lambda: parted(out, idx, vals)}
    for name, fn in every.items():
        row["err"][name] = err = float((fn().double() - ref).norm() / ref.norm())
        assert name not in ours or err < 2e-2, (name, err)
    row.update(rounds(every, ROUNDS))
    row["kernels"] = {name: kernel_us(fn, names=None) for name, fn in every.items()}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="probe_wide_own_floor.json")
    args = ap.parse_args()
    result = {"meta": meta("python benchmarks/probes/probe_wide_own_floor.py",
                           "µs a call (median of rounds, each a CUDA graph of 20 calls); "
                           "kernels: µs, profiler, median of 20 eager calls"), "cells": []}
    with tempfile.TemporaryDirectory() as where:
        forms = variants(where)
        every_cell = {k: forms[k] for k in ("shipped", "no sums")}
        for dist in ("uniform", "skewed", "hot"):
            row = cell(dist, forms if dist == "uniform" else every_cell)
            result["cells"].append(row)
            print(json.dumps(row), flush=True)
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
