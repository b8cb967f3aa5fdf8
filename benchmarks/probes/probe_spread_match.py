"""Do contended narrow rows run faster on ``scatter_spread``'s copies when each warp first
sums its lanes' values that share an address (``match.any.sync``, then a shuffle tree),
so that only one lane of each such set adds with an atomic?

One GPU. The floors (``probe_target_floors``) left room only on contended rows into a
thousand rows, where a block's rows summed for free cut the atomics 3-10x; the block-wide
sums tried before (sorted sums, shared sums for rows, one sum a hot candidate) cost more
than they saved. A warp's sums cost a few instructions a value and no barrier. ``match``
is ``_spread`` with each block's values taken 4 columns at a time (so that a warp's 32
lanes hold 32 rows of one column group), all to copy ``program % P``: the lanes of one
row sum their values (``match.any.sync``, then a shuffle tree skipped once no lane has a
peer left) and the lowest adds them with one ``red.v4``. ``switch H`` takes
``H`` candidates as ``_spread`` does, summing those that a quarter of the block's rows
hit, then ``match`` where one is hit by 4 (``b8``: 8) to a quarter of them, else
``_spread``'s adds. Against
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
SHAPES = ((4, 1024), (16, 1024))
CELLS = tuple((dt, w, r, d) for dt in (F32, BF16) for w, r in SHAPES
              for d in ("uniform", "skewed", "hot"))
BLOCK, WARPS = 1024, 4

# One tree round on the 4 values: add the values of the next-higher lane still in the set,
# then drop the lanes whose rank's low bit is set (their values now held by a lower lane);
# skipped once no lane of the warp has one left.
_ROUND = ("setp.ne.b64 p, hi, 0; vote.sync.any.pred q, p, -1; @!q bra.uni DONE${:uid}; "
          "neg.s32 t, hi; and.b32 t, hi, t; bfind.u32 src, t; "
          + "".join(f"shfl.sync.idx.b32 y{j}, x{j}, src, 31, -1; " for j in range(4))
          + "".join(f"@p add.f32 x{j}, x{j}, y{j}; " for j in range(4))
          + "and.b32 t, rank, 1; setp.ne.b32 q, t, 0; vote.sync.ballot.b32 b, q, -1; "
          "not.b32 b, b; and.b32 hi, hi, b; shr.u32 rank, rank, 1; ")
# 4 elements a lane (pack=4): $4-$7 the fp32 addresses, $8-$11 to add (0: not), $12-$15
# the values; $0-$3 unused. Where a lane's 4 addresses follow one another and all 4 are to
# be added, the warp's lanes of the same 4 addresses are summed first and the lowest of them
# adds the sums (one red.v4 where aligned); any other lane adds its own.
MATCH_ADD = tl.constexpr(
    "{ .reg .pred p, q, e, ld, v; .reg .b32 peers, hi, rank, t, src, b; .reg .b64 k, w; "
    ".reg .f32 x0, x1, x2, x3, y0, y1, y2, y3; "
    + "".join(f"mov.b32 x{j}, ${12 + j}; " for j in range(4))
    + "setp.ne.b32 e, $8, 0; setp.ne.and.b32 e, $9, 0, e; setp.ne.and.b32 e, $10, 0, e; "
    "setp.ne.and.b32 e, $11, 0, e; "
    + "".join(f"add.s64 w, $4, {4 * j}; setp.eq.and.s64 e, ${4 + j}, w, e; "
              for j in range(1, 4))
    + "mov.u32 t, %laneid; cvt.u64.u32 w, t; not.b64 w, w; selp.b64 k, $4, w, e; "
    "match.any.sync.b64 peers, k, -1; mov.u32 t, %lanemask_lt; and.b32 rank, peers, t; "
    "setp.eq.b32 ld, rank, 0; popc.b32 rank, rank; mov.u32 t, %lanemask_gt; "
    "and.b32 hi, peers, t; "
    + _ROUND.replace("setp.ne.b64 p", "setp.ne.b32 p") * 5 + "DONE${:uid}: "
    "and.b64 w, $4, 15; setp.eq.and.b64 v, w, 0, e; and.pred v, v, ld; "
    "@v red.relaxed.gpu.global.add.v4.f32 [$4], {x0, x1, x2, x3}; "
    "not.pred v, v; and.pred v, v, ld; "
    + "".join(f"setp.ne.and.b32 p, ${8 + j}, 0, v; @p red.relaxed.gpu.global.add.f32 "
              f"[${4 + j}], x{j}; " for j in range(4))
    + "".join(f"mov.u32 ${j}, 0; " for j in range(4)) + "}")
# ... with no lane's values summed with another's (every lane adds its own)
OWN_ADD = tl.constexpr(MATCH_ADD.value.replace("selp.b64 k, $4, w, e;", "mov.b64 k, w;"))


@triton.jit
def _match_add(at, m, x, COMBINE: tl.constexpr):
    if not COMBINE:
        return tl.inline_asm_elementwise(OWN_ADD, "=r,=r,=r,=r,l,l,l,l,r,r,r,r,r,r,r,r",
                                         [at.to(tl.int64, bitcast=True), m.to(tl.int32), x],
                                         dtype=tl.int32, is_pure=False, pack=4)
    return tl.inline_asm_elementwise(MATCH_ADD, "=r,=r,=r,=r,l,l,l,l,r,r,r,r,r,r,r,r",
                                     [at.to(tl.int64, bitcast=True), m.to(tl.int32), x],
                                     dtype=tl.int32,
                                     is_pure=False, pack=4)


@triton.jit
def _spread_match(extra, idx, vals, n, rows, plane, D: tl.constexpr, DP: tl.constexpr,
                  R: tl.constexpr, P: tl.constexpr, COMBINE: tl.constexpr,
                  PDL: tl.constexpr):
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
        _match_add(base + i[:, None] * D + c[None, :], m, v, COMBINE)
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
            _match_add(base + i[:, None] * D + c4[None, :], m4, v4, True)
    else:
        m = plain[:, None] & cm[None, :]
        v = tl.load(vals + r[:, None] * D + c[None, :], mask=m, other=0).to(tl.float32)
        dst = extra + (r & (P - 1)) * plane + i * D
        tl.atomic_add(dst[:, None] + c[None, :], v, mask=m, sem="relaxed")
    tl.store(extra + tl.full([], P, tl.int64) * plane + 0 * r, 1.0, mask=bad)


run_match = Launcher(_spread_match)
run_switch = Launcher(_spread_switch)


def match_index_add(self, index, values, partitions: int, combine: bool = True,
                    hot: int = 0, busy: int = 4) -> torch.Tensor:
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
                               COMBINE=combine, PDL=pdl)
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
        "switch 2": lambda: match_index_add(out, idx, vals, P, hot=2),
        "switch 1": lambda: match_index_add(out, idx, vals, P, hot=1),
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
