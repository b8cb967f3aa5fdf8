"""Which form of the narrow plan makes ``_init`` shortest?

One GPU. The narrow ``_init`` (program 0 plans, the others copy the output) on a few of
the grid's cells, µs of the kernel (profiler, median of 40 launches), with three forms of
the plan: ``ship``, the checkout's ``_init`` (where it was run, e375ab8: a 64 x 64 matrix
of compares), on 8, 4, 2 and 1 warps, with and without its cap of 64 registers; ``load``, every
pair compared elementwise against shifted loads of a compact copy of the samples in
global memory; ``gather``, the same shifts through ``tl.gather``; and ``copy only`` (no
plan). Each form's plan (copies, hot rows) is checked against ``ship w8 r64``'s; a form
that differs is listed in ``plans_differ``. Run at e375ab8 (``_init`` and ``_plan`` of
that commit)::

    python benchmarks/probes/probe_plan_forms.py probe_plan_forms.json
"""
import datetime
import json
import sys

import probe_narrow_costs as narrow_costs
import torch
import triton
import triton.language as tl
from probe_narrow_costs import cell_data

from commrt.bench import commit
from commrt.fx import scatter_narrow as sn
from commrt.fx.scatter_rule import (
    HOT,
    HOT_ADDS,
    HOT_MIN,
    HOT_SHARE,
    MIN_COPIES,
    NARROW_PAIR_SAMPLE,
    NARROW_PER_ADDRESS,
    NARROW_SAMPLE,
    NARROW_SPREAD,
    partitions_for,
)


@triton.jit
def _plan_ew(a, valid, b, scr, n, rows, P: tl.constexpr, S: tl.constexpr, H: tl.constexpr,
             HOT_MIN: tl.constexpr, HOT_ADDS: tl.constexpr, HOT_SHARE: tl.constexpr,
             PER_ADDRESS: tl.constexpr, MIN_COPIES: tl.constexpr, SPREAD: tl.constexpr,
             PAIRS: tl.constexpr, GATHER: tl.constexpr):
    pos = tl.arange(0, S)
    sampled = tl.maximum(tl.sum(valid.to(tl.int32)), 1).to(tl.float32)
    if not GATHER:
        tl.store(scr + pos, a)
        if PAIRS:
            tl.store(scr + S + pos, b)
        tl.debug_barrier()
    count = tl.full([S], 1, tl.int32)
    earlier = tl.zeros([S], tl.int32)
    cnt = tl.zeros([S], tl.int32)
    for s in tl.static_range(1, S):
        q = (pos + s) % S
        if GATHER:
            x = tl.gather(a, q, 0)
        else:
            x = tl.load(scr + q)
        e = a == x
        count += e.to(tl.int32)
        earlier |= (e & (q < pos)).to(tl.int32)
    if PAIRS:
        for s in tl.static_range(0, S):
            q = (pos + s) % S
            if GATHER:
                x = tl.gather(b, q, 0)
            else:
                x = tl.load(scr + S + q)
            cnt += (a == x).to(tl.int32)
    adds_row = n * count.to(tl.float32) / sampled
    heavy = (a >= 0) & (count >= HOT_MIN) & (adds_row > HOT_ADDS) & \
        ((adds_row > P * HOT_ADDS) | (count * HOT_SHARE >= sampled))
    hot = tl.full([H], -1, tl.int32)
    nhot = 0
    if tl.max(heavy.to(tl.int32)) > 0:
        cand = heavy & (earlier == 0)
        rank = tl.cumsum(cand.to(tl.int32), axis=0) - cand.to(tl.int32)
        pick = cand[:, None] & (rank[:, None] == tl.arange(0, H)[None, :])
        hot = tl.sum(tl.where(pick, a[:, None] + 1, 0), axis=0) - 1
        nhot = tl.sum((hot >= 0).to(tl.int32))
    rest = (a >= 0) & (heavy == 0)
    m = tl.sum(rest.to(tl.int32)).to(tl.float32)
    same = tl.sum(tl.where(rest, count - 1, 0)).to(tl.float32)
    pairs = m * (m - 1.0)
    if PAIRS:
        bn = tl.sum((b >= 0).to(tl.int32))
        if nhot > 0:
            bn -= tl.sum(tl.max((b[:, None] == hot[None, :]).to(tl.int32), axis=1))
        same += tl.sum(tl.where(rest, cnt, 0)).to(tl.float32)
        pairs += m * bn.to(tl.float32)
    n_rest = n * m / sampled
    adds = n_rest * same / tl.maximum(pairs, 1.0)
    adds = tl.maximum(adds, n_rest / rows)
    p = MIN_COPIES
    while (p * SPREAD < adds) & (p < P):
        p *= 2
    if adds <= PER_ADDRESS:
        p = 1
    p = tl.minimum(p, P)
    return p, hot, nhot


@triton.jit
def _init_ew(self_ptr, acc, scr, idx, state, n, rows, plane, P: tl.constexpr,
             S: tl.constexpr, T: tl.constexpr, H: tl.constexpr, HOT_MIN: tl.constexpr,
             HOT_ADDS: tl.constexpr, HOT_SHARE: tl.constexpr, PER_ADDRESS: tl.constexpr,
             MIN_COPIES: tl.constexpr, SPREAD: tl.constexpr, BLOCK: tl.constexpr,
             GATHER: tl.constexpr):
    pid = tl.program_id(0)
    if pid == 0:
        a, valid = sn._sample(idx, n, rows, S)
        b = a
        if (P > 1) & (T > 0):
            b, _ = sn._sample(idx, n, rows, T, True)
        p, hot, nhot = _plan_ew(a, valid, b, scr, n, rows, P, S, H, HOT_MIN, HOT_ADDS,
                                HOT_SHARE, PER_ADDRESS, MIN_COPIES, SPREAD,
                                (P > 1) & (T > 0), GATHER)
        sn._plan_store(state, p, hot, nhot, H)
    else:
        offs = (pid - 1) * BLOCK + tl.arange(0, BLOCK)
        m = offs < plane
        tl.store(acc + offs, tl.load(self_ptr + offs, mask=m).to(acc.dtype.element_ty),
                 mask=m)


def launcher(out, idx, P, variant, warps, regs, state, scr, acc):
    rows, n = out.shape[0], idx.numel()
    plane = out.numel()
    plan = dict(P=P, S=NARROW_SAMPLE, T=NARROW_PAIR_SAMPLE, H=HOT, HOT_MIN=HOT_MIN,
                HOT_ADDS=HOT_ADDS, HOT_SHARE=HOT_SHARE, PER_ADDRESS=NARROW_PER_ADDRESS,
                SPREAD=NARROW_SPREAD, MIN_COPIES=min(MIN_COPIES, P))
    grid = (1 + triton.cdiv(plane, 2048),)
    kw = dict(num_warps=warps, **({"maxnreg": regs} if regs else {}))
    if variant == "ship":
        return lambda: sn._init[grid](out, acc, acc, idx, state, n, rows, plane, **plan,
                                      BLOCK=2048, WIDE=False, PDL=False, **kw)
    if variant == "copy only":
        plan.update(P=1, HOT_MIN=1 << 30)
        return lambda: sn._init[grid](out, acc, acc, idx, state, n, rows, plane, **plan,
                                      BLOCK=2048, WIDE=False, PDL=False, **kw)
    return lambda: _init_ew[grid](out, acc, scr, idx, state, n, rows, plane, **plan,
                                  BLOCK=2048, GATHER=variant == "gather", **kw)


def kernel_us(fn) -> float | None:
    """Median µs of the _init kernel (either form) over 40 launches."""
    t = narrow_costs.kernel_us(fn, calls=40, names=("_init", "_init_ew"))
    return round(max(t.values()), 2) if max(t.values()) else None


CELLS = ((torch.float32, 0, 65536, "uniform"), (torch.float32, 0, 65536, "skewed"),
         (torch.float32, 16, 1024, "uniform"), (torch.float32, 16, 1024, "skewed"),
         (torch.float32, 16, 65536, "uniform"), (torch.float32, 4, 65536, "uniform"),
         (torch.float32, 100, 8, "hot"))
VARIANTS = [("ship", 8, 64), ("ship", 8, 0), ("ship", 4, 64), ("ship", 4, 0), ("ship", 2, 0),
            ("ship", 1, 0), ("copy only", 8, 64), ("load", 8, 64), ("load", 8, 0),
            ("load", 4, 0), ("gather", 8, 0), ("gather", 4, 0), ("gather", 2, 0),
            ("gather", 1, 0)]


def main():
    res = []
    for dtype, width, rows, dist in CELLS:
        out, idx, vals = cell_data(dtype, width, rows, dist)
        n = idx.numel()
        P = partitions_for(rows, n, 4 * max(1, width),
                           torch.cuda.get_device_properties(0).total_memory, narrow=True)
        acc = torch.empty_like(out)
        scr = torch.empty(4 * NARROW_SAMPLE, device="cuda", dtype=torch.int32)
        row = {"width": width, "rows": rows, "dist": dist, "P": P, "us": {}, "plans": {}}
        for variant, warps, regs in VARIANTS:
            state = torch.zeros(4 + HOT + 4 * NARROW_SAMPLE, device="cuda", dtype=torch.int32)
            name = f"{variant} w{warps}" + (f" r{regs}" if regs else "")
            try:
                fn = launcher(out, idx.view(-1), P, variant, warps, regs, state, scr, acc)
                fn()
                torch.cuda.synchronize()
                plan = state.tolist()
                row["plans"][name] = [plan[0], plan[2], sorted(plan[3:3 + plan[2]])]
                row["us"][name] = kernel_us(fn)
            except Exception as e:  # noqa: BLE001
                row["us"][name] = f"FAILED {type(e).__name__}: {str(e)[:200]}"
        ref = row["plans"].get("ship w8 r64")
        row["plans_differ"] = {k: v for k, v in row["plans"].items()
                               if v != ref and not k.startswith("copy")}
        del row["plans"]
        row["plan"] = ref
        res.append(row)
        print(json.dumps(row), flush=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "date": datetime.date.today().isoformat(),
            "commit": commit(),
            "command": "python benchmarks/probes/probe_plan_forms.py OUT.json",
            "unit": "µs of the _init kernel (profiler, median of 40 launches)"}
    with open(sys.argv[1] if len(sys.argv) > 1 else "probe_plan_forms.json", "w") as f:
        json.dump({"meta": meta, "cells": res}, f, indent=1)


if __name__ == "__main__":
    main()
