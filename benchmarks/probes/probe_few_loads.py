"""Do the few-rows selects run faster with more value loads in flight a program: two blocks
loaded a step (``pairs``), or two blocks a step with the next two loaded before they are
summed (``pairs ahead``), against one block loaded ahead (shipped)?

One GPU. ``scatter_few._partial`` loads the next block of value rows before it sums one
(``_selects``), 4,096 or 8,192 accumulator elements a program, 4 programs an SM. For 4M
value elements, µs a call in a CUDA graph of 20 calls (median of five rounds taken in
turn): the op (``few_rows_index_add``), and the same launches with each form of the
partials (accumulators of 4,096 or 8,192 elements), ``_total`` as shipped after each.

    python benchmarks/probes/probe_few_loads.py [--out probe_few_loads.json]
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from probe_narrow_costs import cell_data, checked_errors, rounds, run_cells

import commrt.fx.scatter_few as few
from commrt.dispatch.profile import has_pdl, sm_count
from commrt.symm_mem.launch import next_pow2

F32, BF16 = torch.float32, torch.bfloat16
ROUNDS = 5
CELLS = ((F32, 16, 8, "uniform"), (F32, 4, 8, "uniform"), (F32, 0, 8, "uniform"),
         (BF16, 16, 8, "uniform"), (F32, 4, 16, "uniform"), (F32, 100, 8, "skewed"))
FORMS = {f"{mode} {tile}": (mode, tile) for mode in ("ahead", "pairs", "pairs ahead")
         for tile in (4096, 8192)}


@triton.jit
def _sel(acc, v, i, rm, rows, k):
    i = tl.where(i < 0, i + rows, i)
    bad = (rm & ((i < 0) | (i >= rows))).to(tl.int32)
    return acc + tl.where(i == k, v.to(tl.float32), 0.0), bad


@triton.jit
def _loads_partial(idx, vals, part, n, rows, chunk, D: tl.constexpr, R: tl.constexpr,
                   DP: tl.constexpr, SUB: tl.constexpr, MODE: tl.constexpr,
                   PDL: tl.constexpr):
    # MODE 0: one block loaded ahead (as shipped); 1: two blocks loaded a step; 2: two
    # blocks a step, the next two loaded ahead
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    g = tl.program_id(0)
    lo = g * chunk
    hi = tl.minimum(lo + chunk, n)
    k = tl.arange(0, R)[:, None, None]
    c = tl.arange(0, DP)[None, None, :]
    s = tl.arange(0, SUB)[None, :, None]
    cm = c < D
    acc = tl.zeros([R, SUB, DP], tl.float32)
    bad_any = tl.zeros([1, SUB, 1], tl.int32)
    if MODE == 0:
        r = lo + s
        v = tl.load(vals + r * D + c, mask=(r < hi) & cm, other=0)
        i = tl.load(idx + r, mask=r < hi, other=0)
        for start in range(lo, hi, SUB):
            rm = start + s < hi
            r = start + SUB + s
            v_next = tl.load(vals + r * D + c, mask=(r < hi) & cm, other=0)
            i_next = tl.load(idx + r, mask=r < hi, other=0)
            acc, bad = _sel(acc, v, i, rm, rows, k)
            bad_any |= bad
            v, i = v_next, i_next
    elif MODE == 1:
        for start in range(lo, hi, 2 * SUB):
            r = start + s
            v = tl.load(vals + r * D + c, mask=(r < hi) & cm, other=0)
            i = tl.load(idx + r, mask=r < hi, other=0)
            r2 = r + SUB
            v2 = tl.load(vals + r2 * D + c, mask=(r2 < hi) & cm, other=0)
            i2 = tl.load(idx + r2, mask=r2 < hi, other=0)
            acc, bad = _sel(acc, v, i, r < hi, rows, k)
            bad_any |= bad
            acc, bad = _sel(acc, v2, i2, r2 < hi, rows, k)
            bad_any |= bad
    else:
        r = lo + s
        v = tl.load(vals + r * D + c, mask=(r < hi) & cm, other=0)
        i = tl.load(idx + r, mask=r < hi, other=0)
        v2 = tl.load(vals + (r + SUB) * D + c, mask=(r + SUB < hi) & cm, other=0)
        i2 = tl.load(idx + r + SUB, mask=r + SUB < hi, other=0)
        for start in range(lo, hi, 2 * SUB):
            r = start + 2 * SUB + s
            v_next = tl.load(vals + r * D + c, mask=(r < hi) & cm, other=0)
            i_next = tl.load(idx + r, mask=r < hi, other=0)
            v2_next = tl.load(vals + (r + SUB) * D + c, mask=(r + SUB < hi) & cm, other=0)
            i2_next = tl.load(idx + r + SUB, mask=r + SUB < hi, other=0)
            acc, bad = _sel(acc, v, i, start + s < hi, rows, k)
            bad_any |= bad
            acc, bad = _sel(acc, v2, i2, start + SUB + s < hi, rows, k)
            bad_any |= bad
            v, i, v2, i2 = v_next, i_next, v2_next, i2_next
    t = tl.sum(acc, axis=1)
    if tl.max(bad_any) > 0:
        t = tl.full([R, DP], float("nan"), tl.float32)
    rr = tl.arange(0, R)[:, None]
    cc = tl.arange(0, DP)[None, :]
    tl.store(part + (g * rows + rr) * D + cc, t, mask=(rr < rows) & (cc < D))


def loads_index_add(self, index, values, mode: str, tile: int):
    """``few_rows_index_add`` with the partials of ``mode`` (``FORMS``)."""
    rows, n = self.shape[0], index.numel()
    D = self.numel() // rows
    plane = rows * D
    out = torch.empty_like(self)
    R, DP = next_pow2(rows), next_pow2(D)
    sub = max(1, tile // (R * DP))
    G = min(few.PROGRAMS_PER_SM * sm_count(self.device), triton.cdiv(n, sub))
    part = torch.empty(G * plane, device=self.device, dtype=torch.float32)
    pdl = has_pdl(self.device)
    _loads_partial[(G,)](index, values, part, n, rows, triton.cdiv(n, G), D=D, R=R, DP=DP,
                         SUB=sub, MODE=("ahead", "pairs", "pairs ahead").index(mode),
                         PDL=pdl, num_warps=few.WARPS)
    pb = min(next_pow2(plane), few.TOTAL_BLOCK)
    gb = max(1, min(next_pow2(G), few.TOTAL_TILE // pb))
    few._total[(triton.cdiv(plane, pb),)](self, part, out, G, plane, PB=pb, GB=gb, PDL=pdl,
                                          num_warps=4,
                                          **({"launch_pdl": True} if pdl else {}))
    return out


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    calls = {"op": lambda: few.few_rows_index_add(out, idx, vals)}
    if width <= few.FEW_WIDTH:
        for name, (mode, tile) in FORMS.items():
            calls[name] = lambda m=mode, t=tile: loads_index_add(out, idx, vals, m, t)
    row = {"dtype": str(dtype).removeprefix("torch."), "width": width, "rows": rows,
           "dist": dist, "err": checked_errors(calls, ref, 1e-5 if dtype == F32 else 8e-3,
                                               deterministic=True)}
    row.update(rounds(calls, ROUNDS))
    return row


def main() -> None:
    run_cells(__doc__, "probe_few_loads.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; err: relative error against "
              "float64")


if __name__ == "__main__":
    main()
