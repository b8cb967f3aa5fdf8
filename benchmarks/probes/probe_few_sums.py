"""Would narrow and wide rows into a few output rows be summed faster than by the few-rows
kernel's compares, by selects into per-row accumulators or by one-hot products?

One GPU. ``scatter_few._partial`` (rows of up to 4 into up to 16 rows) sums a block of
values into each output row in turn: ``tl.sum`` over the block's indices for each row, a
reduction across warps each time. fp32 rows of 16 into 8 rows went to ``scatter_spread``
(1.09-1.10x Inductor's partitions uniform in the grid), rows of 100 into 8 rows to
Inductor's partitioned graph. Two other forms of the partials, each followed by
``scatter_few._total`` over a grid of 64-element blocks:

- ``select``: ``acc[R, SUB, DP] += where(index == row, values, 0)``, the block's values
  broadcast over the output rows, no reduction until the end (``R * SUB * DP`` = the tile);
- ``dot``: ``acc[R, DP] += onehot @ values`` on tensor cores, fp32 in three tf32 parts
  (an earlier run, at 8d92605: 16-25 µs on rows of 16 and 100 into 8 rows against 10-12
  for Inductor's partitions, and errors 2-10x commrt's: the products' fp32 accumulation
  on tensor cores is not exact).

For 4M value elements, µs a call in a CUDA graph of 20 calls (median of five rounds
taken in turn): the op as the pass calls it, each form (``compare``: the shipped
``_partial`` on any width), and Inductor's plain and partitioned scatters (``index_put``).

    python benchmarks/probes/probe_few_sums.py [--out probe_few_sums.json]
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from probe_narrow_costs import cell_data, checked_errors, inductor_columns, rounds, run_cells

from commrt.dispatch.profile import sm_count
from commrt.fx import scatter as pass_scatter
from commrt.fx.scatter_few import TILE, _partial, _total
from commrt.fx.scatter_kernels import PARTS, _add_in_parts, _rows_of
from commrt.symm_mem.launch import next_pow2

DEV = torch.device("cuda")
ROUNDS = 5
F32, BF16 = torch.float32, torch.bfloat16
CELLS = ((F32, 0, 8, "uniform"), (F32, 4, 8, "uniform"), (F32, 16, 8, "uniform"),
         (F32, 16, 8, "hot"), (F32, 100, 8, "uniform"), (F32, 100, 8, "skewed"),
         (F32, 16, 16, "uniform"), (F32, 1024, 8, "uniform"),
         (BF16, 0, 8, "uniform"), (BF16, 4, 8, "uniform"), (BF16, 16, 8, "uniform"),
         (BF16, 100, 8, "uniform"))
FORMS = {"compare": {"kind": "compare"}, "select": {"kind": "select"},
         "select 8192": {"kind": "select", "tile": 8192},
         "select 2/SM": {"kind": "select", "per_sm": 2},
         "select 8 warps": {"kind": "select", "tile": 8192, "warps": 8},
         "dot": {"kind": "dot", "per_sm": 2, "tile": 2048}}


@triton.jit
def _select_partial(idx, vals, part, n, rows, chunk, D: tl.constexpr, R: tl.constexpr,
                    DP: tl.constexpr, SUB: tl.constexpr, WIDE: tl.constexpr):
    g = tl.program_id(0)
    lo = g * chunk
    if WIDE:
        lo = lo.to(tl.int64)
    hi = tl.minimum(lo + chunk, n)
    k = tl.arange(0, R)[:, None, None]
    c = tl.arange(0, DP)[None, None, :]
    acc = tl.zeros([R, SUB, DP], tl.float32)
    bad_any = tl.zeros([1, SUB, 1], tl.int32)
    for start in range(lo, hi, SUB):
        r = start + tl.arange(0, SUB)[None, :, None]
        rm = r < hi
        v = tl.load(vals + r * D + c, mask=rm & (c < D), other=0).to(tl.float32)
        i = tl.load(idx + r, mask=rm, other=0)
        i = tl.where(i < 0, i + rows, i)
        bad_any |= (rm & ((i < 0) | (i >= rows))).to(tl.int32)
        acc += tl.where(i == k, v, 0.0)
    s = tl.sum(acc, axis=1)
    if tl.max(bad_any) > 0:
        s = tl.full([R, DP], float("nan"), tl.float32)
    rr = tl.arange(0, R)[:, None]
    cc = tl.arange(0, DP)[None, :]
    tl.store(part + (g * rows + rr) * D + cc, s, mask=(rr < rows) & (cc < D))


@triton.jit
def _dot_partial(idx, vals, part, n, rows, chunk, D: tl.constexpr, R: tl.constexpr,
                 DP: tl.constexpr, SUB: tl.constexpr, PARTS: tl.constexpr,
                 WIDE: tl.constexpr):
    # finite values and indices in range only (a probe: the cells have no other)
    g = tl.program_id(0)
    lo = g * chunk
    if WIDE:
        lo = lo.to(tl.int64)
    hi = tl.minimum(lo + chunk, n)
    c = tl.arange(0, DP)
    rr = tl.arange(0, R)
    acc = tl.zeros([R, DP], tl.float32)
    for start in range(lo, hi, SUB):
        r = start + tl.arange(0, SUB)
        v = tl.load(vals + r[:, None] * D + c[None, :],
                    mask=(r < hi)[:, None] & (c < D)[None, :], other=0).to(tl.float32)
        i, ok, bad = _rows_of(idx, r, hi, rows, WIDE)
        onehot = tl.where((rr[:, None] == i[None, :]) & ok[None, :], 1.0, 0.0)
        acc = _add_in_parts(acc, onehot, v, PARTS)
    tl.store(part + (g * rows + rr[:, None]) * D + c[None, :], acc,
             mask=(rr < rows)[:, None] & (c < D)[None, :])


def few_sums(self, index, values, kind: str, per_sm: int = 4, tile: int = 4096,
             warps: int = 4):
    """``self.index_add(0, index, values)`` through one form of partials and ``_total``."""
    rows, n = self.shape[0], index.numel()
    D = self.numel() // rows
    plane = rows * D
    out = torch.empty_like(self)
    if kind == "compare":
        R, DP = next_pow2(rows), next_pow2(D)
        sub = max(1, TILE // DP)
    elif kind == "select":
        R, DP = next_pow2(rows), next_pow2(D)
        sub = max(1, tile // (R * DP))
    else:
        R, DP = max(16, next_pow2(rows)), max(16, next_pow2(D))
        sub = max(16, tile // DP)
    G = min(per_sm * sm_count(self.device), triton.cdiv(n, sub))
    part = torch.empty(G * plane, device=self.device, dtype=torch.float32)
    args = (index, values, part, n, rows, triton.cdiv(n, G))
    meta = {"D": D, "R": R, "DP": DP, "SUB": sub, "WIDE": n * D >= 1 << 31,
            "num_warps": warps}
    if kind == "compare":
        _partial[(G,)](*args, **meta)
    elif kind == "select":
        _select_partial[(G,)](*args, **meta)
    else:
        _dot_partial[(G,)](*args, PARTS=PARTS[values.dtype], **meta)
    pb = min(next_pow2(plane), 64)
    _total[(triton.cdiv(plane, pb),)](self, part, out, G, plane, PB=pb,
                                      GB=max(1, min(next_pow2(G), 8192 // pb)), num_warps=4)
    return out


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    P = pass_scatter.copies(rows, max(1, width), idx.numel(), dtype,
                            torch.cuda.get_device_properties(DEV).total_memory)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    plain, parted = inductor_columns(out, idx, vals)
    calls = {"op": lambda: torch.ops.commrt.partitioned_index_put(out, idx, vals, P)}
    for name, kw in FORMS.items():
        calls[name] = lambda kw=kw: few_sums(out, idx, vals, **kw)
    calls["inductor"] = lambda: plain(out, idx, vals)
    calls["inductor partitioned"] = lambda: parted(out, idx, vals)
    row = {"dtype": str(dtype).removeprefix("torch."), "width": width, "rows": rows,
           "dist": dist, "partitions": P,
           "err": checked_errors(calls, ref, 1e-5 if dtype == F32 else 8e-3,
                                 lambda name: name.startswith(("select", "compare")), True)}
    row.update(rounds(calls, ROUNDS))
    return row


def main() -> None:
    run_cells(__doc__, "probe_few_sums.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; err: relative error against "
              "float64")


if __name__ == "__main__":
    main()
