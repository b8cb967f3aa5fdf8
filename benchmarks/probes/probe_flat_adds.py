"""Do the wide kernels gain from adding uncontended values over the flattened values
instead of by rows?

One GPU, at 28e4676 (``partitioned_index_add(flat=...)`` and ``FLAT_CHUNK`` were removed
after it). Where the plan leaves one copy and no combining (uniform indices),
``_scatter``'s programs add their 16 rows in [16, BD] blocks, BD the power of two at or
over the row width up to 128: rows of 100 leave 28 of 128 lanes idle. Inductor's scatter
adds flattened values, 1,024 a program. Variants: the op as the pass calls it, with
``flat=True`` (each program adds a span of next_pow2(16 * D) flattened values, CHUNK of
them a step) and with ``flat=False`` (rows, as shipped), against Inductor's plain scatter
and its partitions in the same rounds; then each kernel's own time (median of 20 eager
calls in a profiler trace), and Inductor's kernels'.

µs a call in a CUDA graph of 20 calls (median of five rounds taken in turn; spread: the
least and most); each variant's error against float64 is checked first::

    git checkout 28e4676 && python benchmarks/probes/probe_flat_adds.py [--out probe.json]
"""

from __future__ import annotations

import torch
from probe_local_columns import partitioned
from probe_narrow_costs import checked_rounds, op_kernels, patched_op, run_cells, with_constants

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx import scatter_kernels

ROUNDS = 5
F32, B16 = torch.float32, torch.bfloat16
CELLS = [(t, w, 1024, "uniform") for w in (100, 200) for t in (B16, F32)]
CHUNKS = (256, 512, 1024, 2048)


def chunked(chunk: int):
    """The op with flattened adds, ``chunk`` value elements a step."""
    op = patched_op(scatter_kernels, "partitioned_index_add", flat=True)
    return with_constants(scatter_kernels, op, FLAT_CHUNK=chunk)


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {f"op flat {c}": chunked(c) for c in CHUNKS}
    variants["op rows"] = patched_op(scatter_kernels, "partitioned_index_add", flat=False)
    row = checked_rounds(dtype, width, rows, dist,
                         {**variants, "inductor partitioned": partitioned()}, ROUNDS)
    row["kernels"] = op_kernels(variants, dtype, width, rows, dist, row["partitions"])
    return row


def main() -> None:
    run_cells(__doc__, "probe_flat_adds.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
