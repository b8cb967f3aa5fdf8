"""Do the few-rows selects sum faster with more loads in flight: Triton's pipeliner on the
loop, or one reduction a step so that a program can take larger steps?

One GPU. fp32 rows of 16 into 8 rows, uniform, took 9.52 µs in the grid against 12.1 for
Inductor's partitions, short of 1.3x by 2%; the value stream alone takes 4.0
(``probe_target_floors_NVIDIA_H200.json``). A ``_partial`` program holds 4,096 value
elements a step (one block prefetched) on 4 warps, 4 programs an SM: about 16 KB of loads
in flight an SM. Forms of ``_partial``, each followed by ``scatter_few``'s ``_total`` as
shipped (a programmatic dependent): ``shipped``; ``stagesK``: the same selects over a
``tl.range`` with ``num_stages=K`` and no prefetch by hand; ``stepS``: ``[R, S, DP]``
selects summed over the block each step into ``[R, DP]`` sums (steps of ``S`` value rows);
``step2x``: ``stepS`` on 2 programs an SM. Columns, in CUDA graphs, for 4M value elements,
each checked against float64 first, with Inductor's partitions (``index_put``).

    python benchmarks/probes/probe_few_forms.py [--out probe_few_forms.json]
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from probe_narrow_costs import cell_data, cell_row, inductor_columns, run_cells

import commrt.fx.scatter_few as few
from commrt.dispatch.profile import has_pdl, sm_count
from commrt.fx.scatter_kernels import _wrapped
from commrt.symm_mem.launch import Launcher, cdiv, next_pow2

ROUNDS = 5
F32 = torch.float32
CELLS = ((F32, 16, 8, "uniform"), (F32, 16, 8, "skewed"), (F32, 4, 8, "uniform"),
         (F32, 0, 8, "uniform"), (F32, 4, 16, "uniform"))


@triton.jit
def _form(idx, vals, part, n, rows, chunk, D: tl.constexpr, R: tl.constexpr,
          DP: tl.constexpr, SUB: tl.constexpr, FORM: tl.constexpr, STAGES: tl.constexpr,
          PDL: tl.constexpr):
    # FORM 1: [R, SUB, DP] selects over tl.range(num_stages=STAGES), one reduction at the
    # end; FORM 2: [R, SUB, DP] selects summed into [R, DP] each step
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    g = tl.program_id(0)
    lo = g * chunk
    hi = tl.minimum(lo + chunk, n)
    k = tl.arange(0, R)[:, None, None]
    c = tl.arange(0, DP)[None, None, :]
    s = tl.arange(0, SUB)[None, :, None]
    cm = c < D
    bad_any = tl.zeros([1, SUB, 1], tl.int32)
    if FORM == 1:
        acc = tl.zeros([R, SUB, DP], tl.float32)
        for start in tl.range(lo, hi, SUB, num_stages=STAGES):
            r = start + s
            rm = r < hi
            v = tl.load(vals + r * D + c, mask=rm & cm, other=0)
            i, bad = _wrapped(tl.load(idx + r, mask=rm, other=0), rm, rows)
            bad_any |= bad.to(tl.int32)
            acc += tl.where(i == k, v, 0.0)
        tot = tl.sum(acc, axis=1)
    else:
        tot = tl.zeros([R, DP], tl.float32)
        for start in tl.range(lo, hi, SUB, num_stages=STAGES):
            r = start + s
            rm = r < hi
            v = tl.load(vals + r * D + c, mask=rm & cm, other=0)
            i, bad = _wrapped(tl.load(idx + r, mask=rm, other=0), rm, rows)
            bad_any |= bad.to(tl.int32)
            tot += tl.sum(tl.where(i == k, v, 0.0), axis=1)
    few._store_partial(part, tot, tl.max(bad_any) > 0, g, rows, D, R, DP)


run_form = Launcher(_form)


def form_index_add(self, index, values, form: int, stages: int, tile: int, per_sm: int):
    """``few_rows_index_add`` (fp32 rows) with ``_form``'s partials: ``tile`` accumulator
    elements a step, ``per_sm`` programs an SM."""
    rows = self.shape[0]
    D = self.numel() // rows
    n = index.numel()
    plane = rows * D
    R, DP = next_pow2(rows), next_pow2(D)
    sub = max(1, tile // (R * DP))
    G = min(per_sm * (sm_count(self.device) or few.INTERPRETER_SMS), cdiv(n, sub))
    pdl = has_pdl(self.device)
    go = run_form.prepare((G,), few.WARPS, False, None, D=D, R=R, DP=DP, SUB=sub,
                          FORM=form, STAGES=stages, PDL=pdl)
    pb = min(next_pow2(plane), few.TOTAL_BLOCK)
    gb = max(1, min(next_pow2(G), few.TOTAL_TILE // pb))
    total = few.run_total.prepare((cdiv(plane, pb),), 4, pdl, PB=pb, GB=gb, PDL=pdl)
    out = torch.empty_like(self)
    part = torch.empty(G * plane, device=self.device, dtype=torch.float32)
    go(index, values, part, n, rows, cdiv(n, G))
    total(self, part, out, G, plane)
    return out


VARIANTS = {
    "stages2": dict(form=1, stages=2, tile=8192, per_sm=4),
    "stages3": dict(form=1, stages=3, tile=4096, per_sm=4),
    "step8k": dict(form=2, stages=1, tile=8192, per_sm=4),
    "step16k": dict(form=2, stages=1, tile=16384, per_sm=4),
    "step16k s2": dict(form=2, stages=2, tile=16384, per_sm=4),
    "step2x": dict(form=2, stages=1, tile=16384, per_sm=2),
}


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    _, parted = inductor_columns(out, idx, vals)
    o2, v2 = (out[:, None], vals[:, None]) if width == 0 else (out, vals)

    def ours(kw):
        return lambda: form_index_add(o2, idx, v2, **kw).view(out.shape)

    calls = {"shipped": lambda: few.few_rows_index_add(out, idx, vals),
             **{name: ours(kw) for name, kw in VARIANTS.items()},
             "inductor partitioned": lambda: parted(out, idx, vals)}
    return cell_row(dtype, width, rows, dist, calls, ref,
                    lambda name: not name.startswith("inductor"), ROUNDS)


def main() -> None:
    run_cells(__doc__, "probe_few_forms.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; err: relative error against "
              "float64")


if __name__ == "__main__":
    main()
