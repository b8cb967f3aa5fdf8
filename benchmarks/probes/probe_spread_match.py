"""Do contended narrow rows run faster on ``scatter_spread``'s copies when each warp first
sums its lanes' values that share an address (``match.any.sync``, then a shuffle tree),
so that only one lane of each such set adds with an atomic?

One GPU. The floors (``probe_target_floors``) left room only on contended rows into a
thousand rows, where a block's rows summed for free cut the atomics 3-10x; the block-wide
sums tried before (sorted sums, shared sums for rows, one sum a hot candidate) cost more
than they saved. A warp's sums cost a few instructions a value and no barrier. ``match``
is ``_spread`` with each block's values added, 4 columns at a time (so that a warp's 32
lanes hold 32 rows of one column group), to copy ``program % P`` after the warp's sums;
``match hot`` also sums the block's hot candidates first, as ``_spread`` does. Against
them, in CUDA graphs, for 4M value elements: the op as the pass calls it,
``scatter_spread`` as shipped, and Inductor's plain and partitioned scatters
(``index_put``). Every column of commrt's is checked against float64 first.

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
from commrt.fx.scatter_rule import SPREAD_HOT, SPREAD_HOT_MIN
from commrt.fx.scatter_scratch import zeroed
from commrt.fx.scatter_spread import SUM_TILE, _launches, spread_index_add
from commrt.symm_mem.launch import Launcher, cdiv

DEV = torch.device("cuda")
ROUNDS = 5
F32, BF16 = torch.float32, torch.bfloat16
SHAPES = ((4, 1024), (16, 1024), (16, 8), (100, 1024))
CELLS = tuple((dt, w, r, d) for dt in (F32, BF16) for w, r in SHAPES
              for d in ("uniform", "skewed", "hot"))
BLOCK, WARPS = 1024, 4

# one tree round: add the value of the next-higher lane still in the set, then drop the
# lanes whose rank's low bit is set (their value now held by a lower lane)
_ROUND = ("neg.s32 t, hi; and.b32 t, hi, t; bfind.u32 src, t; setp.ne.b32 p, hi, 0; "
          "shfl.sync.idx.b32 y, x, src, 31, -1; @p add.f32 x, x, y; and.b32 t, rank, 1; "
          "setp.ne.b32 q, t, 0; vote.sync.ballot.b32 b, q, -1; not.b32 b, b; "
          "and.b32 hi, hi, b; shr.u32 rank, rank, 1; ")
# $0: the sum of the values of the warp's lanes whose key equals this lane's (whole at the
# lowest such lane), $1: 1 at that lane; $2: the key, $3: the value
MATCH_SUM = tl.constexpr("{ .reg .pred p, q; .reg .b32 peers, hi, rank, t, src, b; "
                         ".reg .f32 x, y; mov.b32 x, $3; match.any.sync.b32 peers, $2, -1; "
                         "mov.u32 t, %lanemask_lt; "
                         "and.b32 rank, peers, t; setp.eq.b32 q, rank, 0; "
                         "selp.u32 $1, 1, 0, q; popc.b32 rank, rank; "
                         "mov.u32 t, %lanemask_gt; and.b32 hi, peers, t; "
                         + _ROUND * 5 + "mov.b32 $0, x; }")


@triton.jit
def _match_sum(key, x):
    return tl.inline_asm_elementwise(MATCH_SUM, "=r,=r,r,r", [key, x],
                                     dtype=(tl.float32, tl.int32), is_pure=False, pack=1)


@triton.jit
def _spread_match(extra, idx, vals, n, rows, plane, D: tl.constexpr, DP: tl.constexpr,
                  CW: tl.constexpr, R: tl.constexpr, P: tl.constexpr, HOT: tl.constexpr,
                  HOT_MIN: tl.constexpr, PDL: tl.constexpr):
    # a block of R value rows to copy pid % P, in column groups of CW: each warp sums its
    # lanes' values of one address before one atomic adds them; HOT as in _spread
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0)
    r = pid * R + tl.arange(0, R)
    i, ok, bad = _rows_of(idx, r, n, rows, False)
    base = (pid & (P - 1)) * plane
    plain = ok
    if HOT > 0:
        c = tl.arange(0, DP)
        cm = c < D
        v = tl.load(vals + r[:, None] * D + c[None, :], mask=ok[:, None] & cm[None, :],
                    other=0).to(tl.float32)
        for k in tl.static_range(HOT):
            at = pid * R + k * (R // HOT)
            h = tl.load(idx + at, mask=at < n, other=-1)
            h = tl.where(h < -rows, -1, tl.where(h < 0, h + rows, h))
            hit = plain & (i == h)
            if tl.sum(hit.to(tl.int32)) >= HOT_MIN:
                s = tl.sum(tl.where(hit[:, None], v, 0.0), axis=0)
                tl.atomic_add(extra + base + h * D + c, s, mask=cm, sem="relaxed")
                plain = plain & (hit == 0)
    for c0 in tl.static_range(0, DP, CW):
        c = c0 + tl.arange(0, CW)
        m = plain[:, None] & (c < D)[None, :]
        v = tl.load(vals + r[:, None] * D + c[None, :], mask=m, other=0).to(tl.float32)
        at = base + i[:, None] * D + c[None, :]
        own = -1 - (tl.arange(0, R)[:, None] * CW + (c - c0)[None, :])
        s, lead = _match_sum(tl.where(m, at, own).to(tl.int32), v)
        tl.atomic_add(extra + at, s, mask=m & (lead != 0), sem="relaxed")
    tl.store(extra + tl.full([], P, tl.int64) * plane + 0 * r, 1.0, mask=bad)


run_match = Launcher(_spread_match)


def match_index_add(self, index, values, partitions: int, hot: int = 0,
                    hot_min: int = 1) -> torch.Tensor:
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
    r = max(32 * WARPS, BLOCK // dp)  # a warp's 32 lanes on 32 rows of a column group
    go = run_match.prepare((cdiv(n, r),), WARPS, D=D, DP=dp, CW=min(4, dp), R=r,
                           P=partitions, HOT=hot, HOT_MIN=hot_min, PDL=pdl)
    total = _launches(rows, n, D, partitions, 0, 1, BLOCK, WARPS, SUM_TILE, pdl)[1]
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
        "spread": lambda: spread_index_add(out, idx, vals, P, hot=SPREAD_HOT,
                                           hot_min=SPREAD_HOT_MIN),
        "match": lambda: match_index_add(out, idx, vals, P),
        "match hot": lambda: match_index_add(out, idx, vals, P, SPREAD_HOT, SPREAD_HOT_MIN),
        "match 32": lambda: match_index_add(out, idx, vals, min(P, 32)),
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
