"""What does the wide kernels' plan cost a call, and would a smaller sample do?

One GPU. The wide kernels (``scatter_kernels``) plan in ``_prepare``'s program 0 from a
strided sample of ``SAMPLE`` indices compared with ``SHIFTS`` shifts of it (1,024 pairs),
and ``_scatter`` waits for all of ``_prepare``. On rows of 100 into 1,024 rows, uniform,
the call is 1-2 µs slower than Inductor's plain scatter (two launches). Variants: the op
as the pass calls it with the sample as shipped ("op 128x8") and smaller ("op SxK": S
indices, K shifts; set through ``scatter_kernels.SAMPLE`` and ``SHIFTS``, which the wide
kernels read for every plan at 1b86a7c, where this ran, and since only where they do not
choose the output's dtype), against Inductor's plain scatter and its partitions, in the same
rounds; then each kernel's own time (median of 20 eager calls in a profiler trace), and
Inductor's kernels'.

µs a call in a CUDA graph of 20 calls (median of five rounds taken in turn; spread: the
least and most); each variant's error against float64 is checked first::

    python benchmarks/probes/probe_wide_plan.py [--out probe_wide_plan.json]
"""

from __future__ import annotations

import torch
from probe_local_columns import partitioned
from probe_narrow_costs import checked_rounds, op_kernels, run_cells, with_constants

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx import scatter_kernels

ROUNDS = 5
F32, B16 = torch.float32, torch.bfloat16
CELLS = [(t, 100, 1024, d) for t in (B16, F32) for d in ("uniform", "skewed", "hot")]
SAMPLES = ((128, 8), (64, 4), (64, 2), (32, 2))


def with_sample(S: int, K: int):
    return with_constants(scatter_kernels, SAMPLE=S, SHIFTS=K)


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {f"op {s}x{k}": with_sample(s, k) for s, k in SAMPLES}
    row = checked_rounds(dtype, width, rows, dist,
                         {**variants, "inductor partitioned": partitioned()}, ROUNDS)
    row["kernels"] = op_kernels(variants, dtype, width, rows, dist, row["partitions"])
    return row


def main() -> None:
    run_cells(__doc__, "probe_wide_plan.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
