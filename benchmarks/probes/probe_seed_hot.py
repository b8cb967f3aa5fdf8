"""Do the wide kernels run the seed benchmark's contended cells faster where a sample of the
indices holds few distinct rows, by summing each program's values of those rows as one-hot
products into a partial it adds once (``partitioned_index_add(hot=...)``: ``_hot``)?

One GPU. The seed's shape (``bench_scatter.py``: fp32 rows of 100, 1M indices drawn from
0..k, into 501 rows), one of its three scatters. µs a call in a CUDA graph of 20 calls
(median of ``ROUNDS`` rounds taken in turn) and each kernel's µs (profiler, median of 20
eager calls): the op as the pass calls it ("shipped"); the wide kernels without hot rows
and with ``hot`` rows (16, 32 or 64) on ``_hot``'s launch shapes (``VARIANTS``); Inductor's
partitioned scatter. Every column of ours checked against float64 first (relative error
under 5e-5: a sum of 1M values into one row at k = 0 reads 2e-5 in fp32, Inductor's too).

    python benchmarks/probes/probe_seed_hot.py [--ks 0,31,63,500] --out probe.json
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
    rounds,
    with_constants,
)

import commrt.fx.scatter_kernels as wide
from commrt.fx import scatter as pass_scatter

DEV = torch.device("cuda")
N, D, ROWS = 1_000_000, 100, 501
KS = (0, 3, 7, 15, 31, 63, 500)
ROUNDS = 5
# (name, hot rows, constants): _hot's value bytes a step an SM, programs an SM, warps and columns
# a program. The plan's rows told apart by a sort (HOT_SORTED; _prepare compiled for sm_90 by
# Triton 3.6 held 40 barriers and 2,500 instructions so, against 116 and 4,000 for 32 rows a
# reduction each and 212 and 6,700 for 64; 5 and 816 without hot rows) ran here at 25b8cad, its
# columns "..., sorted list"; the kernels dropped it at 4d78067. On the shipped shape (128
# columns, 64 KB a step) 32 hot rows compile for sm_90 to 255 registers, 120 bytes a thread
# spilled, 75 KB of shared memory; 64 spill 840 bytes. 64 hot rows (k = 63 holds 64 rows) on
# shapes that compile without spills: 64 columns and 32 KB a step, 128 columns and 16 KB (255
# registers on 4 warps, two programs an SM); 64 columns and 16 KB (232); 32 columns, four programs
# an SM (122). _scatter taking 2, 4 or 8 blocks of value rows a program on the hot route (its
# registers as compiled, or capped at 64 or 72) was measured at 7cb0938, not kept.
VARIANTS = (
    ("hot 32", 32, {}),
    ("hot 32, 32 KB x 2", 32, {"HOT_SM_BYTES": 32768}),
    ("hot 64, 64 columns, 32 KB x 2", 64, {"HOT_COLUMNS": 64, "HOT_SM_BYTES": 32768}),
    ("hot 64, 16 KB x 2", 64, {"HOT_SM_BYTES": 16384}),
    ("hot 64, 64 columns, 16 KB x 2", 64, {"HOT_COLUMNS": 64, "HOT_SM_BYTES": 16384}),
    ("hot 64, 32 columns, 16 KB x 4", 64,
     {"HOT_COLUMNS": 32, "HOT_SM_BYTES": 16384, "HOT_PROGRAMS": 4}),
)
# the columns whose kernels are timed apart
KERNELS = ("no hot rows", "hot 32", "hot 64, 64 columns, 32 KB x 2", "inductor partitioned")


def _hot(hot: int):
    return lambda o, i, v, P: wide.partitioned_index_add(o, i, v, P, hot=hot)


def variants() -> dict:
    """The hot rows on each launch shape (name: ``fn(out, idx, vals, P)``)."""
    out = {"no hot rows": with_constants(wide, _hot(0)), "hot 16": with_constants(wide, _hot(16))}
    for name, hot, constants in VARIANTS:
        out[name] = with_constants(wide, _hot(hot), **constants)
    return out


def cell(k: int) -> dict:
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
    calls = {**ours, "inductor partitioned": lambda: parted(out, idx, vals)}
    row = {"k": k, "partitions": P}
    for hot in (32, 64):
        state = torch.zeros(wide.HOT_AT.value + 1 + hot, device=DEV, dtype=torch.int32)
        wide.partitioned_index_add(out, idx, vals, P, hot=hot, state=state)
        row[f"hot rows found (of {hot})"] = int(state[wide.HOT_AT.value])
    row["err"] = checked_errors(calls, ref, 5e-5, lambda name: name in ours)
    row.update(rounds(calls, ROUNDS))
    row["kernels"] = {name: kernel_us(fn, names=None) for name, fn in calls.items()
                      if name in KERNELS}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="probe_seed_hot.json")
    ap.add_argument("--ks", default=",".join(map(str, KS)), help="the cells' k, comma-separated")
    args = ap.parse_args()
    ks = "" if args.ks == ap.get_default("ks") else f" --ks {args.ks}"
    result = {"meta": meta(f"python benchmarks/probes/probe_seed_hot.py{ks}",
                           "µs a call (median of rounds, each a CUDA graph of 20 calls); "
                           "kernels: µs, profiler, median of 20 eager calls"), "cells": []}
    for k in map(int, args.ks.split(",")):
        result["cells"].append(cell(k))
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
