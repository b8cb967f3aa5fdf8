"""Do vector reductions (four elements an instruction, ``scatter_atomics.add_rows``) make
the scatter kernels faster?

One GPU. On grid cells (4M value elements a cell) whose rows are a multiple of four wide:
µs a call in a CUDA graph of 20 calls (median of five rounds taken in turn; spread: the
least and most of the rounds) of ``commrt::partitioned_index_put`` with the copies the pass
gives it, with one atomic an element ("scalar") and with the vector adds ("vector"); the
error of each against float64. Cells marked "forced" are ones the rule leaves to Inductor
(the kernels are called with the copies they would get). Run at 2600d82, the one commit with
the vector adds (the next removed them: slower or within 2% in 22 of 24 cells)::

    python benchmarks/probes/probe_vector_adds.py [--out probe_vector_adds.json]
"""

from __future__ import annotations

import torch
from probe_narrow_costs import cell_data, rounds, run_cells

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx import scatter_atomics
from commrt.fx.scatter import copies
from commrt.fx.scatter_rule import COMMRT, decide

DEV = torch.device("cuda")
ROUNDS = 5
# (dtype, row width, output rows, indices)
CELLS = [(torch.float32, 16, 1024, d) for d in ("uniform", "skewed", "hot")] + \
    [(torch.float32, 16, 65536, "uniform"), (torch.float32, 4, 1024, "uniform"),
     (torch.float32, 4, 1024, "skewed"), (torch.float32, 4, 65536, "uniform"),
     (torch.bfloat16, 4, 65536, "uniform"), (torch.bfloat16, 4, 1 << 20, "uniform"),
     (torch.bfloat16, 16, 65536, "uniform"), (torch.bfloat16, 16, 1024, "uniform"),
     (torch.bfloat16, 16, 1024, "skewed")] + \
    [(torch.float32, 100, 1024, d) for d in ("uniform", "skewed", "hot")] + \
    [(torch.float32, 1024, 1024, d) for d in ("uniform", "skewed", "hot")] + \
    [(torch.bfloat16, 100, 1024, "uniform"), (torch.bfloat16, 1024, 1024, "uniform"),
     (torch.bfloat16, 1024, 1024, "hot"), (torch.float32, 1024, 8, "uniform"),
     (torch.float32, 1024, 65536, "uniform"), (torch.float32, 100, 65536, "uniform")]


def call(out, idx, vals, P: int, vec: bool):
    has = scatter_atomics.has_vector_atomics
    scatter_atomics.has_vector_atomics = has if vec else (lambda device: False)
    try:  # read at each call (the graph keeps the kernels it captured)
        return torch.ops.commrt.partitioned_index_put(out, idx, vals, P)
    finally:
        scatter_atomics.has_vector_atomics = has


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    n = idx.numel()
    memory = torch.cuda.get_device_properties(DEV).total_memory
    P = copies(rows, width, n, dtype, memory)
    choice, _ = decide(rows, width, n, dtype)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    row = {"dtype": str(dtype)[6:], "width": width, "rows": rows, "dist": dist,
           "partitions": P, "forced": choice != COMMRT, "err": {}}
    variants = {"scalar": False, "vector": True}
    for name, vec in variants.items():
        got = call(out, idx, vals, P, vec)
        row["err"][name] = float((got.double() - ref).norm() / ref.norm())
        assert row["err"][name] < (1e-5 if dtype == torch.float32 else 2e-2), (name, row)
    row.update(rounds({name: lambda vec=vec: call(out, idx, vals, P, vec)
                       for name, vec in variants.items()}, ROUNDS))
    return row


def main() -> None:
    run_cells(__doc__, "probe_vector_adds.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
