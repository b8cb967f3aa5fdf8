"""Does the narrow kernels' ``_sum`` gain from a tile that fits the copies the plan chose?

One GPU. Where copies are allowed, the narrow kernels launch ``_sum`` with a tile of
``CP = min(partitions, SUM_COPIES)`` copies by ``SUM_TILE // CP`` elements: with up to
128 copies allowed it loads ``[128, 64]`` tiles even where the plan chose 16 copies (fp32
rows of 16 into 1,024 rows, uniform: ``_sum`` took 2.4 µs of a 12.2 µs call on one H200).
The variant (``_sum_fit``) reads the copies in one ``[SMALL, BLOCK]`` tile where the
plan chose at most ``SMALL + 1`` (a branch on the GPU), as shipped otherwise. For a few
grid cells (4M value elements), µs a call in a CUDA graph of 20 calls (median of five
rounds taken in turn) of the op as the pass calls it with the shipped ``_sum`` (steps of
``CP`` until 2d95fa7; since then ``SUM_FIT``, this probe's variant at 32) and with
``_sum_fit`` at ``SMALL`` 16 and 32, Inductor's plain scatter (``index_put``), and the
copies each plan chose. ``--twins`` (once ``_sum_fit`` was shipped as ``SUM_FIT``): cells with 16
copies only, ``_sum`` with and without ``SUM_FIT``, each twice (its twin captured in its
own graph, as every variant is), so that a difference between two variants can be told
from one between two captures of the same kernels.

    python benchmarks/probes/probe_sum_tiles.py [--out probe_sum_tiles.json] [--twins]
"""

from __future__ import annotations

import contextlib
import sys

import torch
import triton
import triton.language as tl
from probe_narrow_costs import cell_data, checked_rounds, plan, run_cells

from commrt.fx import scatter as pass_scatter
from commrt.fx import scatter_narrow
from commrt.fx.scatter_rule import pair_sample

DEV = torch.device("cuda")
ROUNDS = 5
F32, BF16 = torch.float32, torch.bfloat16
CELLS = ((F32, 16, 1024, "uniform"), (F32, 16, 1024, "skewed"), (F32, 16, 1024, "hot"),
         (F32, 0, 65536, "uniform"), (F32, 0, 65536, "skewed"), (F32, 0, 65536, "hot"),
         (F32, 1, 65536, "skewed"), (F32, 4, 1024, "uniform"), (F32, 4, 1024, "skewed"),
         (BF16, 16, 1024, "uniform"), (BF16, 16, 1024, "skewed"), (BF16, 0, 65536, "uniform"),
         (BF16, 0, 65536, "skewed"))


@triton.jit
def _sum_fit(acc, extra, out, state, plane, SAME: tl.constexpr, BLOCK: tl.constexpr,
             CP: tl.constexpr, PDL: tl.constexpr = False, SMALL: tl.constexpr = 16):
    # scatter_kernels._sum, with the p - 1 extra copies read in one [SMALL, BLOCK] tile
    # where they fit
    if PDL:
        tl.extra.cuda.gdc_wait()
    p = tl.load(state)
    bad = tl.load(state + 1) != 0
    if (p > 1) | bad | (not SAME):
        step = tl.num_programs(0).to(tl.int64) * BLOCK
        for start in range(tl.program_id(0).to(tl.int64) * BLOCK, plane, step):
            offs = start + tl.arange(0, BLOCK)
            m = offs < plane
            x = tl.load(acc + offs, mask=m, other=0)
            if p - 1 <= SMALL:
                c = tl.arange(0, SMALL).to(tl.int64)
                at = extra + c[:, None] * plane + offs[None, :]
                cm = (c[:, None] < p - 1) & m[None, :]
                x += tl.sum(tl.load(at, mask=cm, other=0), axis=0)
                tl.store(at, tl.zeros([SMALL, BLOCK], tl.float32), mask=cm)
            else:
                for c0 in range(0, p - 1, CP):
                    c = (c0 + tl.arange(0, CP)).to(tl.int64)
                    at = extra + c[:, None] * plane + offs[None, :]
                    cm = (c[:, None] < p - 1) & m[None, :]
                    x += tl.sum(tl.load(at, mask=cm, other=0), axis=0)
                    tl.store(at, tl.zeros([CP, BLOCK], tl.float32), mask=cm)
            x = tl.where(bad, float("nan"), x)
            tl.store(out + offs, x.to(out.dtype.element_ty), mask=m)


class _Fit:
    def __init__(self, small: int):
        self.small = small

    def __getitem__(self, grid):
        def launch(*args, **kw):
            return _sum_fit[grid](*args, SMALL=self.small, **kw)
        return launch


@contextlib.contextmanager
def fitted(small: int):
    shipped = scatter_narrow._sum
    scatter_narrow._sum = _Fit(small)
    try:
        yield
    finally:
        scatter_narrow._sum = shipped


def variant(small: int):
    def fn(out, idx, vals, P):
        args = (out, idx, vals, P)
        if not small:
            return pass_scatter._partitioned_index_put(*args)
        with fitted(small):
            return pass_scatter._partitioned_index_put(*args)
    return fn


TWINS = "--twins" in sys.argv
TWIN_CELLS = ((F32, 16, 1024, "uniform"), (BF16, 16, 1024, "uniform"), (F32, 4, 1024, "uniform"))


def looped(out, idx, vals, P):
    shipped = scatter_narrow.SUM_FIT
    scatter_narrow.SUM_FIT = 1 << 20
    try:
        return pass_scatter._partitioned_index_put(out, idx, vals, P)
    finally:
        scatter_narrow.SUM_FIT = shipped


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {"shipped": variant(0), "fit16": variant(16), "fit32": variant(32)}
    if TWINS:  # "loop": the copies in steps of CP whatever the plan (SUM_FIT out of reach)
        variants = {"loop": looped, "fit": variant(0), "loop twin": looped,
                    "fit twin": variant(0)}
    row = checked_rounds(dtype, width, rows, dist, variants, ROUNDS)
    out, idx, vals = cell_data(dtype, width, rows, dist)
    P = pass_scatter.copies(rows, max(1, width), idx.numel(), dtype,
                            torch.cuda.get_device_properties(DEV).total_memory)
    with contextlib.suppress(Exception):  # the narrow kernels' plan, where they run
        row["copies"] = plan(out, idx, vals, P, pair_sample=pair_sample(rows))[0]
    row["triton"] = triton.__version__
    return row


def main() -> None:
    if TWINS:
        sys.argv.remove("--twins")
    run_cells(__doc__, "probe_sum_tiles.json", TWIN_CELLS if TWINS else CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; copies: the plan's")


if __name__ == "__main__":
    main()
