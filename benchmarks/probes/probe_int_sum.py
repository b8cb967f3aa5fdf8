"""Do the flat integer adds' copies, summed by ``_int_sum``, cost more where the output's
plane is not a multiple of 16 elements, and does the sum gain from more programs on small
planes?

One GPU. ``scatter_ints.int_flat_index_add`` adds value row ``j`` into copy ``j % P``
and ``_int_sum`` adds the copies to ``self``, a tile of ``min(P, SUM_COPIES)`` copies by
``max(SUM_MIN, SUM_TILE // copies)`` elements a step, on ``cdiv(plane, that)`` programs
(4 for int32 rows of 99 into 8 rows, 128 copies). Until the copies' mask was taken up to
their 16-aligned stride, a plane of 792 elements (rows of 99 into 8 rows) masked every
load of the copies apart (Triton specializes an integer argument divisible by 16 only):
256 scalar loads a thread against 64 vectors of 4 on sm90. Columns: the op as the pass
calls it ("op", the copies' mask up to the stride), "op plane mask" (``_int_sum`` as it
was, masked at the plane), "op tile T" (``SUM_TILE`` = T, and ``SUM_MIN`` = 32 with
1,024: more programs), Inductor's two compiled scatters (``index_put``); on 65,536 rows,
instead of the sum's variants, "flat one copy" (``int_flat_index_add`` on one copy, where
Inductor's plain scatter ran 32.0 µs on rows of 99 against 36.4 on rows of 100 on one
H100, and the narrow kernels 38.3 and 37.8). µs a call in a CUDA graph of 20 calls
(median of five rounds taken in turn), every column equal to torch's sum first; then each
kernel's µs in the op's columns on the first cell::

    python benchmarks/probes/probe_int_sum.py [--out probe_int_sum.json]

Its result is at 1063176. The sum's steps have since shrunk on small planes
(``SUM_SPREAD``), so later the "op tile" columns of the 8-row cells match "op".
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from probe_int32_rows import base_cell, exact_row
from probe_narrow_costs import kernel_us, run_cells, with_constants

from commrt.fx import scatter_ints as si
from commrt.fx.scatter_kernels import _copies
from commrt.symm_mem.launch import Launcher

I32 = torch.int32
# (dtype, row width, output rows, index distribution)
CELLS = [(I32, 99, 8, "uniform"), (I32, 99, 8, "hot"), (I32, 100, 8, "uniform"),
         (I32, 99, 65536, "uniform"), (I32, 100, 65536, "uniform"), (I32, 99, 1024, "uniform"),
         (I32, 64, 8, "uniform")]
TILES = (4096, 2048)
ONE_COPY_ROWS = 65536  # and the flat adds on one copy, from these output rows


@triton.jit
def _plane_sum(self_ptr, extra, out, plane, stride, P: tl.constexpr, CP: tl.constexpr,
               BLOCK: tl.constexpr):
    # _int_sum before the copies' mask went up to the stride: masked at the plane
    step = tl.num_programs(0).to(tl.int64) * BLOCK
    for start in range(tl.program_id(0).to(tl.int64) * BLOCK, plane, step):
        offs = start + tl.arange(0, BLOCK)
        m = offs < plane
        x = tl.load(self_ptr + offs, mask=m, other=0)
        for c0 in tl.static_range(0, P, CP):
            x += _copies(extra, stride, offs, m, c0, P + 1, CP, BLOCK)
        tl.store(out + offs, x, mask=m)


PLANE_SUM = Launcher(_plane_sum, sanitize_overflow=False)


def patched(**values):
    """The op as the pass calls it with ``scatter_ints``' globals set to ``values``."""
    return with_constants(si, launches=si._flat_launches, **values)


def cell(dtype: torch.dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals, P, ref, calls = base_cell(width, rows, dist, dtype)
    if rows >= ONE_COPY_ROWS:  # the pass gives these to the narrow kernels
        calls["flat one copy"] = lambda: si.int_flat_index_add(out, idx, vals, 1)
    else:
        variants = {"op plane mask": patched(run_sum=PLANE_SUM),
                    **{f"op tile {t}": patched(SUM_TILE=t) for t in TILES},
                    "op tile 1024 min 32": patched(SUM_TILE=1024, SUM_MIN=32)}
        for name, run in variants.items():
            calls[name] = lambda run=run: run(out, idx, vals, P)
    plane = rows * width
    row = exact_row(calls, ref, width, rows, dist, dtype=str(dtype).removeprefix("torch."),
                    partitions=P, plane=plane, stride=si._stride(plane, P))
    if (width, rows, dist) == CELLS[0][1:]:
        row["kernels"] = {name: {k: round(v, 2) for k, v in
                                 kernel_us(calls[name], names=None).items()}
                          for name in calls if name.startswith("op")}
    return row


def main() -> None:
    run_cells(__doc__, "probe_int_sum.json", CELLS, cell,
              "µs a call (median of 5 rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
