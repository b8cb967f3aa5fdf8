"""Does the wide ``_scatter`` add uncontended rows faster once its row sums hold fewer
registers?

One GPU, at fae51e6 (``COMBINE_COLUMNS``, ``COMBINE_LOOP`` and ``SCATTER_MAXNREG`` were
removed after it; 1a1f427 ran the row-at-a-time sums). ``_scatter`` sums the rows of a
program that share an index (a 0/1 product on tensor cores) where the plan finds the adds
contended, else adds every row; the kernel holds the registers of its larger branch. With
the sums compiled out (``leaders=-1``), bf16 rows of 100 into 1,024 rows, uniform, ran
7.5 µs against 8.6 (``probe_wide_blocks_small_NVIDIA_H200.json``); Triton 3.8 compiling
for sm_90 gave the kernel 128 registers a thread with the sums, 80 without. Here the
sums run in a function of their own, ``COMBINE_COLUMNS`` columns a step. Variants: the op
as the pass calls it with the sums on 128, 64 and 32 columns a step, on 128 and 64 with
at most 40 registers a thread (``maxnreg``), and without sums (``leaders=-1``: contended
rows go to the copies one by one), against Inductor's plain scatter and its partitions in
the same rounds; then each kernel's own time (median of 20 eager calls in a profiler
trace), and Inductor's kernels'.

µs a call in a CUDA graph of 20 calls (median of five rounds taken in turn; spread: the
least and most); each variant's error against float64 is checked first::

    git checkout fae51e6 && python benchmarks/probes/probe_combine_columns.py [--out probe.json]

Each row also lists the registers and spills of every ``_scatter`` compiled so far.
"""

from __future__ import annotations

import gc

import torch
from probe_local_columns import partitioned
from probe_narrow_costs import checked_rounds, op_kernels, patched_op, run_cells, with_constants

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx import scatter_kernels

ROUNDS = 5
F32, B16 = torch.float32, torch.bfloat16
CELLS = [(t, 100, 1024, d) for t in (B16, F32) for d in ("uniform", "skewed", "hot")]
# (columns a step, a row at a time, registers a thread at most: 0 ptxas's choice)
SUMS = ((128, False, 0), (64, False, 0), (32, False, 0), (128, False, 40), (64, False, 40))
NAMES = ("COMBINE_COLUMNS", "COMBINE_LOOP", "SCATTER_MAXNREG")


def columns(bdc: int, loop: bool, maxnreg: int):
    return with_constants(scatter_kernels, **dict(zip(NAMES, (bdc, loop, maxnreg),
                                                      strict=True)))


def registers() -> list:
    """(registers, spills, LOOP, BDC, LEADERS, OWN) of each _scatter compiled so far."""
    found = []
    for obj in gc.get_objects():
        if type(obj).__name__ == "CompiledKernel" and getattr(obj, "name", "") == "_scatter":
            consts = {k[-1] if isinstance(k, tuple) else k: v
                      for k, v in getattr(obj.src, "constants", {}).items()} \
                if hasattr(obj, "src") else {}
            found.append([obj.n_regs, obj.n_spills, str(consts)[:200],
                          getattr(obj.metadata, "maxnreg", None)])
    return found


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {f"op sums on {c}" + (" by rows" if loop else "") +
                (f" maxnreg {m}" if m else ""): columns(c, loop, m) for c, loop, m in SUMS}
    variants["op no sums"] = patched_op(scatter_kernels, "partitioned_index_add", leaders=-1)
    row = checked_rounds(dtype, width, rows, dist,
                         {**variants, "inductor partitioned": partitioned()}, ROUNDS)
    row["kernels"] = op_kernels(variants, dtype, width, rows, dist, row["partitions"])
    row["registers"] = registers()
    return row


def main() -> None:
    run_cells(__doc__, "probe_combine_columns.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
