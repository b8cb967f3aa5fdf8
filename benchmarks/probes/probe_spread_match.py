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
columns at a time, to copy ``program % P``; Inductor's plain and partitioned scatters
(``index_put``). At a900474 a ``switch 2 b8`` column ran ``spread busy``'s rule with the
values loaded after the candidates (the form first measured).

    python benchmarks/probes/probe_spread_match.py [--out probe_spread_match.json]
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from probe_narrow_costs import cell_row, compiled_cell, ours, run_cells

from commrt.dispatch.profile import has_pdl
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


run_match = Launcher(_spread_match)


def match_index_add(self, index, values, partitions: int) -> torch.Tensor:
    """``self.index_add(0, index, values)`` (a new tensor) on ``partitions`` fp32 copies,
    each warp's values of one address summed before one atomic."""
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
    go = run_match.prepare((cdiv(n, r),), WARPS, D=D, DP=dp, R=r, P=partitions, PDL=pdl)
    total = _launches(rows, n, D, partitions, 0, 1, 0, BLOCK, WARPS, SUM_TILE, pdl)[1]
    go(extra, index, values, n, rows, plane)
    total(self, extra, out, plane)
    return out


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals, P, ref, plain, parted = compiled_cell(dtype, width, rows, dist)
    calls = {
        "op": lambda: torch.ops.commrt.partitioned_index_put(out, idx, vals, P),
        "plain": lambda: spread_index_add(out, idx, vals, P, hot=SPREAD_HOT,
                                          hot_min=SPREAD_HOT_MIN),
        "spread busy": lambda: spread_index_add(out, idx, vals, P, hot=SPREAD_HOT,
                                                hot_min=SPREAD_HOT_MIN, busy=SPREAD_BUSY,
                                                busy_hot_min=SPREAD_BUSY_HOT_MIN),
        "match": lambda: match_index_add(out, idx, vals, P),
        "inductor": lambda: plain(out, idx, vals),
        "inductor partitioned": lambda: parted(out, idx, vals),
    }
    return {**cell_row(dtype, width, rows, dist, calls, ref, ours, ROUNDS, False),
            "partitions": P}


def main() -> None:
    run_cells(__doc__, "probe_spread_match.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; err: relative error against "
              "float64")


if __name__ == "__main__":
    main()
