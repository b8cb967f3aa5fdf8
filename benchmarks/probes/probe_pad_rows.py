"""Do the wide kernels add rows whose width is not a multiple of four faster into fp32
copies whose rows are padded to 16 bytes (``scatter_kernels.copy_stride``)?

One GPU. fp32 rows of 99 went to Inductor's partitions (``scatter_rule.fp32_fours``, since
gone): on one H100 the wide kernels took 19 / 33 / 32 µs uniform / skewed / hot into 1,024
rows against 9.6 / 17.5 / 17.8 for rows of 100, whose copies' rows start on 16 bytes and
take four fp32 an atomic. Columns: ``partitioned_index_add`` with the copies' rows padded
("pad") and ``D`` apart ("no pad"), with the copies the pass gives the cell; Inductor's
two compiled scatters (``index_put``); µs a call in a CUDA graph of 20 calls (median of
five rounds taken in turn), every commrt column under the error bound first::

    python benchmarks/probes/probe_pad_rows.py [--out probe_pad_rows.json]

Its result, at 3e1d477, stops before bf16 hot indices: a 240 s limit cut the run, where
Inductor's bf16 scatters of skewed indices took up to 20 ms a call.
"""

from __future__ import annotations

import torch
from probe_narrow_costs import cell_row, compiled_cell, ours, run_cells

from commrt.fx.scatter_kernels import partitioned_index_add

F32, BF16 = torch.float32, torch.bfloat16
ROUNDS = 5
# (dtype, row width, output rows, index distribution)
CELLS = [(F32, 99, 1024, d) for d in ("uniform", "skewed", "hot")] + \
    [(BF16, 99, 1024, d) for d in ("uniform", "skewed", "hot")]


def cell(dtype: torch.dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals, P, ref, plain, parted = compiled_cell(dtype, width, rows, dist)
    calls = {
        "pad": lambda: partitioned_index_add(out, idx, vals, P),
        "no pad": lambda: partitioned_index_add(out, idx, vals, P, pad_rows=False),
        "inductor": lambda: plain(out, idx, vals),
        "inductor partitioned": lambda: parted(out, idx, vals),
    }
    row = cell_row(dtype, width, rows, dist, calls, ref, ours, ROUNDS, deterministic=False)
    row["partitions"] = P
    return row


def main() -> None:
    run_cells(__doc__, "probe_pad_rows.json", CELLS, cell,
              "µs a call (median of 5 rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
