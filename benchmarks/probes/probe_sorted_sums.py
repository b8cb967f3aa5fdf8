"""Do narrow scatters gain from each block sorting its indices and adding each output
row's sum once, with no plan at all?

One GPU. The narrow kernels' plan (a sample of the indices, made by one program before
the adds) and their ``_sum`` launch cost 1-3 µs a call, which uniform indices into small
outputs do not repay: fp32 rows of 16 and 100 into 1,024 rows ran 1.16-1.29x Inductor's
plain scatter in the grids at 5039f88. Block-local sums with compares (``local``) need no
plan, but one masked reduction a shared index made skewed indices slow. Here a block of
``SUB`` rows sorts ``row * SUB + position`` (``tl.sort``), loads its values in that order,
sums each output row's run with one segmented scan and adds the last of each run: as many
adds as the block has distinct rows, whatever the indices; the copy of the output before
it (``_init`` with nothing to plan) is its only other launch, and with PDL the block sorts
and loads while the copy runs. fp16/bf16 values are summed in fp32 and added in their own
dtype. Variants: value elements a block, the most columns a block holds (0: whole rows),
warps. On grid cells (4M value elements a cell): µs a call in a CUDA graph of 20 calls
(median of five rounds taken in turn; spread: the least and most of the rounds), with the
op as the pass calls it ("op", with the copies the pass gives the cell), Inductor's plain
scatter (``index_put``, compiled) and its partitioned scatter in the same rounds; each
variant's error against float64 is checked first (a variant over the bound is left out of
the cell, its error under "dropped")::

    python benchmarks/probes/probe_sorted_sums.py [--out probe_sorted_sums.json]
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from probe_local_columns import partitioned
from probe_narrow_costs import cell_data, checked_rounds, run_cells

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.dispatch.profile import has_pdl
from commrt.fx import scatter_narrow as sn
from commrt.symm_mem.launch import cdiv, next_pow2

ROUNDS = 5
# (dtype, row width (0: 1-D values), output rows, indices)
CELLS = [(dt, w, rows, d) for dt, w, rows in ((torch.float32, 16, 1024),
                                              (torch.float32, 100, 1024),
                                              (torch.bfloat16, 100, 1024),
                                              (torch.float32, 4, 65536),
                                              (torch.bfloat16, 4, 65536),
                                              (torch.bfloat16, 16, 1024),
                                              (torch.float32, 0, 65536),
                                              (torch.float32, 1024, 1024))
         for d in ("uniform", "skewed", "hot")]
# name: (value elements a block, the most columns a block holds (0: whole rows), warps)
VARIANTS = {"e4096 w8": (4096, 0, 8), "e4096 w4": (4096, 0, 4), "e8192 w8": (8192, 0, 8),
            "e2048 w4": (2048, 0, 4), "e4096 c32 w4": (4096, 32, 4)}


@triton.jit
def _seg_sum(row_l, v_l, row_r, v_r):
    # a segmented sum over sorted rows (the left part's last row equals the right
    # part's first only if it continues into it)
    return row_r, v_r + tl.where(row_l == row_r, v_l, 0.0)


@triton.jit
def _seg_count(row_l, c_l, row_r, c_r):
    return row_r, c_r + tl.where(row_l == row_r, c_l, 0)


@triton.jit
def _sorted_scatter(acc, idx, vals, n, rows, D: tl.constexpr, DP: tl.constexpr,
                    SUB: tl.constexpr, KEY64: tl.constexpr, COLS_FIRST: tl.constexpr,
                    PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    if COLS_FIRST:
        pid = tl.program_id(1)
        c = tl.program_id(0) * DP + tl.arange(0, DP)
    else:
        pid = tl.program_id(0)
        c = tl.program_id(1) * DP + tl.arange(0, DP)
    cm = c < D
    pos = tl.arange(0, SUB)
    r = pid * SUB + pos
    rm = r < n
    i = tl.load(idx + r, mask=rm, other=0)
    i = tl.where(i < 0, i + rows, i)
    ok = rm & (i >= 0) & (i < rows)
    row = tl.where(ok, i, rows)  # out of range or past the end: sorted last, never added
    if KEY64:
        key = row.to(tl.int64) * SUB + pos
    else:
        key = row.to(tl.int32) * SUB + pos
    ks = tl.sort(key)
    srow = (ks // SUB).to(tl.int32)
    sr = pid * SUB + (ks % SUB).to(tl.int32)
    valid = srow < rows
    ones = tl.full([SUB], 1, tl.int32)
    _, left = tl.associative_scan((srow, ones), 0, _seg_count, reverse=True)
    last = valid & (left == 1)  # the last entry of its row's run
    if D == 1:
        v = tl.load(vals + sr, mask=valid, other=0).to(tl.float32)
        _, s = tl.associative_scan((srow, v), 0, _seg_sum)
        if PDL:
            tl.extra.cuda.gdc_wait()
        tl.atomic_add(acc + srow, s.to(acc.dtype.element_ty), mask=last, sem="relaxed")
    else:
        m = valid[:, None] & cm[None, :]
        v = tl.load(vals + sr[:, None] * D + c[None, :], mask=m, other=0).to(tl.float32)
        rr = tl.broadcast_to(srow[:, None], (SUB, DP))
        _, s = tl.associative_scan((rr, v), 0, _seg_sum)
        if PDL:
            tl.extra.cuda.gdc_wait()
        tl.atomic_add(acc + srow[:, None] * D + c[None, :], s.to(acc.dtype.element_ty),
                      mask=last[:, None] & cm[None, :], sem="relaxed")


def sorted_index_add(self, index, values, block: int = 4096, columns: int = 0,
                     warps: int = 8, pdl: bool = True) -> torch.Tensor:
    """``self.index_add(0, index, values)`` (a new tensor): ``_init`` copies ``self``
    (nothing to plan), then ``_sorted_scatter``. Indices in range (no poison here)."""
    rows = self.shape[0]
    D = self[0].numel() if self.dim() > 1 else 1
    n = index.numel()
    out = torch.empty_like(self)
    plane = rows * D
    state = torch.empty(sn.state_numel(1), device=self.device, dtype=torch.int32)
    pdl = pdl and has_pdl(self.device)
    blk = sn.HALF_BLOCK if self.dtype != torch.float32 else sn.BLOCK
    sn._init[(1 + cdiv(plane, blk),)](
        self, out, state, index, state, n, rows, plane, P=1, S=sn.NARROW_SAMPLE,
        W=sn.NARROW_SAMPLE, H=1, HOT_MIN=1 << 30, HOT_ADDS=1, HOT_SHARE=1, PER_ADDRESS=1,
        MIN_COPIES=1, SPREAD=1, BLOCK=blk, WIDE=False, PDL=pdl, num_warps=4)
    DP = min(next_pow2(D), columns) if columns else next_pow2(D)
    sub = max(16, block // DP)
    grid = (cdiv(n, sub), cdiv(D, DP))
    cols_first = grid[1] > 1
    if cols_first:
        grid = grid[::-1]
    _sorted_scatter[grid](out, index, values, n, rows, D=D, DP=DP, SUB=sub,
                          KEY64=(rows + 1) * sub >= 1 << 31, COLS_FIRST=cols_first, PDL=pdl,
                          num_warps=warps, **({"launch_pdl": True} if pdl else {}))
    return out


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    """``variant_rounds`` of the cell; a variant over its error bound is left out, its
    error under "dropped"."""
    variants = {name: lambda o, i, v, P, b=b, c=c, w=w: sorted_index_add(o, i, v, b, c, w)
                for name, (b, c, w) in VARIANTS.items()}
    variants["op"] = torch.ops.commrt.partitioned_index_put  # the op as the pass calls it
    variants["inductor partitioned"] = partitioned()
    dropped = {}
    out, idx, vals = cell_data(dtype, width, rows, dist)
    for name in VARIANTS:  # a variant that fails to compile or run is left out
        try:
            variants[name](out, idx, vals, 1)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            dropped[name] = f"{type(e).__name__}: {str(e)[:200]}"
            del variants[name]
    return checked_rounds(dtype, width, rows, dist, variants, ROUNDS, dropped)


def main() -> None:
    run_cells(__doc__, "probe_sorted_sums.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
