"""Do contended narrow rows run faster on ``scatter_spread``'s copies when each warp first
sums its lanes' values that share an address (``match.any.sync``, then a shuffle tree),
so that only one lane of each such set adds with an atomic?

One GPU. The floors (``probe_target_floors``) left room only on contended rows into a
thousand rows, where a block's rows summed for free cut the atomics 3-10x; the block-wide
sums tried before (sorted sums, shared sums for rows, one sum a hot candidate) cost more
than they saved. A warp's sums (``fx.warp_sums``) cost a few instructions a value and no
barrier. Columns, in CUDA graphs, for 4M value elements, each checked against float64
first: the op as the pass calls it; ``plain``: ``scatter_spread`` without warp sums
(named ``spread`` at a900474, whose median the rounds' ``spread`` ranges overwrote);
``spread busy``: with them, as the rule asks (a block where a candidate is busy but not
hot adds its other rows through them); ``match``: every block's rows through them, 4
columns at a time, to copy ``program % P``; ``switch 2 b8``: ``spread busy`` with the
values loaded after the candidates (the form first measured); Inductor's plain and
partitioned scatters (``index_put``).

    python benchmarks/probes/probe_spread_match.py [--out probe_spread_match.json]
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from probe_narrow_costs import cell_data, checked_errors, inductor_columns, rounds, run_cells

from commrt.dispatch.profile import has_pdl
from commrt.fx import scatter as pass_scatter
from commrt.fx.scatter_kernels import _rows_of
from commrt.fx.scatter_rule import (
    SPREAD_BUSY,
    SPREAD_BUSY_HOT_MIN,
    SPREAD_HOT,
    SPREAD_HOT_MIN,
)
from commrt.fx.scatter_scratch import zeroed
from commrt.fx.scatter_spread import SUM_TILE, _launches, spread_index_add
from commrt.fx.warp_sums import warp_add
from commrt.symm_mem.launch import Launcher, cdiv

DEV = torch.device("cuda")
ROUNDS = 5
F32, BF16 = torch.float32, torch.bfloat16
SHAPES = ((4, 1024), (16, 1024))
CELLS = tuple((dt, w, r, d) for dt in (F32, BF16) for w, r in SHAPES
              for d in ("uniform", "skewed", "hot"))
BLOCK, WARPS = 1024, 4


@triton.jit
def _spread_match(extra, idx, vals, n, rows, plane, D: tl.constexpr, DP: tl.constexpr,
                  R: tl.constexpr, P: tl.constexpr, PDL: tl.constexpr):
    # a block of R value rows to copy pid % P, 4 columns at a time: each warp sums its
    # lanes' values of one row before one atomic adds them
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0)
    r = pid * R + tl.arange(0, R)
    i, ok, bad = _rows_of(idx, r, n, rows, False)
    base = extra + (pid & (P - 1)) * plane
    for c0 in tl.static_range(0, DP, 4):
        c = c0 + tl.arange(0, 4)
        m = ok[:, None] & (c < D)[None, :]
        v = tl.load(vals + r[:, None] * D + c[None, :], mask=m, other=0).to(tl.float32)
        warp_add(base + i[:, None] * D + c[None, :], m, v)
    tl.store(extra + tl.full([], P, tl.int64) * plane + 0 * r, 1.0, mask=bad)


@triton.jit
def _spread_switch(extra, idx, vals, n, rows, plane, D: tl.constexpr, DP: tl.constexpr,
                   R: tl.constexpr, P: tl.constexpr, HOT: tl.constexpr,
                   HOT_MIN: tl.constexpr, BUSY: tl.constexpr, PDL: tl.constexpr):
    # _spread's hot candidates (each hit by HOT_MIN or more of the block's rows: summed and
    # added once); where BUSY to HOT_MIN of the block's rows hit a candidate, the rest as
    # _spread_match, else as _spread (row j to copy j % P)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0)
    r = pid * R + tl.arange(0, R)
    i, ok, bad = _rows_of(idx, r, n, rows, False)
    c = tl.arange(0, DP)
    cm = c < D
    plain = ok
    busy = 0
    for k in tl.static_range(HOT):
        at = pid * R + k * (R // HOT)
        h = tl.load(idx + at, mask=at < n, other=-1)
        h = tl.where(h < -rows, -1, tl.where(h < 0, h + rows, h))
        hit = plain & (i == h)
        hits = tl.sum(hit.to(tl.int32))
        busy += ((hits >= BUSY) & (hits < HOT_MIN)).to(tl.int32)
        if hits >= HOT_MIN:
            vh = tl.load(vals + r[:, None] * D + c[None, :], mask=hit[:, None] & cm[None, :],
                         other=0).to(tl.float32)
            tl.atomic_add(extra + (pid & (P - 1)) * plane + h * D + c, tl.sum(vh, axis=0),
                          mask=cm, sem="relaxed")
            plain = plain & (hit == 0)
    if busy > 0:
        base = extra + (pid & (P - 1)) * plane
        for c0 in tl.static_range(0, DP, 4):
            c4 = c0 + tl.arange(0, 4)
            m4 = plain[:, None] & (c4 < D)[None, :]
            v4 = tl.load(vals + r[:, None] * D + c4[None, :], mask=m4, other=0).to(tl.float32)
            warp_add(base + i[:, None] * D + c4[None, :], m4, v4)
    else:
        m = plain[:, None] & cm[None, :]
        v = tl.load(vals + r[:, None] * D + c[None, :], mask=m, other=0).to(tl.float32)
        dst = extra + (r & (P - 1)) * plane + i * D
        tl.atomic_add(dst[:, None] + c[None, :], v, mask=m, sem="relaxed")
    tl.store(extra + tl.full([], P, tl.int64) * plane + 0 * r, 1.0, mask=bad)


run_match = Launcher(_spread_match)
run_switch = Launcher(_spread_switch)


def match_index_add(self, index, values, partitions: int, hot: int = 0,
                    busy: int = 4) -> torch.Tensor:
    """``self.index_add(0, index, values)`` (a new tensor) on ``partitions`` fp32 copies,
    each warp's values of one address summed before one atomic (``hot``: candidates a
    block, ``_spread_switch``)."""
    rows = self.shape[0]
    D = self.numel() // max(1, rows)
    n = index.numel()
    plane = rows * D
    assert (partitions + 1) * plane + 2 < 1 << 31, "int32 addresses only"
    out = torch.empty_like(self)
    extra = zeroed(self.device, partitions * plane + 2)
    pdl = has_pdl(self.device)
    dp = triton.next_power_of_2(D)
    assert D >= 4, "rows of 4 or more"
    r = max(32 * WARPS, BLOCK // dp)  # a warp's 32 lanes on 32 rows of a column group
    if hot:
        go = run_switch.prepare((cdiv(n, r),), WARPS, D=D, DP=dp, R=r, P=partitions,
                                HOT=hot, HOT_MIN=r // 4, BUSY=busy, PDL=pdl)
    else:
        go = run_match.prepare((cdiv(n, r),), WARPS, D=D, DP=dp, R=r, P=partitions,
                               PDL=pdl)
    total = _launches(rows, n, D, partitions, 0, 1, 0, BLOCK, WARPS, SUM_TILE, pdl)[1]
    go(extra, index, values, n, rows, plane)
    total(self, extra, out, plane)
    return out


def ours(name: str) -> bool:  # a column checked against its bound: not Inductor's
    return not name.startswith("inductor")


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    P = pass_scatter.copies(rows, max(1, width), idx.numel(), dtype,
                            torch.cuda.get_device_properties(DEV).total_memory)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    plain, parted = inductor_columns(out, idx, vals)
    calls = {
        "op": lambda: torch.ops.commrt.partitioned_index_put(out, idx, vals, P),
        "plain": lambda: spread_index_add(out, idx, vals, P, hot=SPREAD_HOT,
                                           hot_min=SPREAD_HOT_MIN),
        "spread busy": lambda: spread_index_add(out, idx, vals, P, hot=SPREAD_HOT,
                                                hot_min=SPREAD_HOT_MIN, busy=SPREAD_BUSY,
                                                busy_hot_min=SPREAD_BUSY_HOT_MIN),
        "match": lambda: match_index_add(out, idx, vals, P),
        "switch 2 b8": lambda: match_index_add(out, idx, vals, P, hot=2, busy=8),
        "inductor": lambda: plain(out, idx, vals),
        "inductor partitioned": lambda: parted(out, idx, vals),
    }
    bound = 1e-5 if dtype == F32 else 1e-2
    row = {"dtype": str(dtype).removeprefix("torch."), "width": width, "rows": rows,
           "dist": dist, "partitions": P, "err": checked_errors(calls, ref, bound, ours)}
    row.update(rounds(calls, ROUNDS))
    return row


def main() -> None:
    run_cells(__doc__, "probe_spread_match.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; err: relative error against "
              "float64")


if __name__ == "__main__":
    main()
