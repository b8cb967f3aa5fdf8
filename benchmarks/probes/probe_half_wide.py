"""Can commrt take bf16 ``index_put`` of wide rows into 1,024 rows from Inductor?

One GPU. The rule leaves bf16 ``index_put`` of rows of 100 into 1,024 rows (41 values a
row) to Inductor's partitions, which run uniform indices 1.7x slower than its plain
scatter, and rows of 1024 (4 a row) to the plain scatter, which a hot row slows 1.3x
past the partitions. Candidates, against both of Inductor's scatters in the same rounds:

- "wide": commrt's wide kernels as a bf16 ``index_add`` gets them (fp32 copies chosen on
  the GPU, converted by ``_sum``); "wide own N": the same, adding in bf16 straight into
  the output where the plan expects at most N adds an address (``own_adds``);
- rows of 1024: block-local sums added in bf16 (``local``, one copy, no plan) in blocks
  of C columns on W warps ("local cC wW"), as a bf16 ``index_add`` gets them with C = 128,
  W = 1; and the same blocks with no sums ("plain c128 w1": bf16 atomics only).

µs a call in a CUDA graph of 20 calls (median of five rounds taken in turn; spread: the
least and most); each variant's error against float64 is checked first (a variant over
the bound is left out, its error under "dropped")::

    python benchmarks/probes/probe_half_wide.py [--out probe_half_wide.json]
"""

from __future__ import annotations

import torch
from probe_local_columns import partitioned
from probe_narrow_costs import checked_rounds, run_cells

import commrt.fx.scatter  # noqa: F401 (defines commrt::partitioned_index_put)
from commrt.fx.scatter_kernels import partitioned_index_add
from commrt.fx.scatter_narrow import narrow_index_add
from commrt.fx.scatter_rule import partitions_for

ROUNDS = 5
B16 = torch.bfloat16
CELLS = [(B16, w, 1024, d) for w in (100, 1024) for d in ("uniform", "skewed", "hot")]
LOCAL = {"local c128 w1": (128, 1), "local c128 w2": (128, 2), "local c256 w1": (256, 1),
         "local c256 w2": (256, 2), "local c512 w2": (512, 2), "local c512 w4": (512, 4)}


def local(columns: int, warps: int, sums: bool = True):
    def run(out, idx, vals, P):
        sub = max(16, 4096 // columns)
        return narrow_index_add(out, idx, vals, 1, hot=0, columns=columns, warps=warps,
                                local=(3 if sub <= 16 else 4) if sums else 0,
                                half_adds=True)
    return run


def wide(own: int = 0):
    def run(out, idx, vals, P):
        # the copies the pass gives the wide kernels (P is the pass's for the cell's rule)
        memory = torch.cuda.get_device_properties(out.device).total_memory
        copies = partitions_for(out.shape[0], idx.numel(), 4 * out.shape[1], memory)
        return partitioned_index_add(out, idx, vals, copies, own_adds=own)
    return run


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    variants = {"wide": wide(), "wide own 128": wide(128), "wide own 512": wide(512)}
    if width == 1024:
        variants.update({k: local(c, w) for k, (c, w) in LOCAL.items()})
        variants["plain c128 w1"] = local(128, 1, sums=False)
    variants["inductor partitioned"] = partitioned()
    return checked_rounds(dtype, width, rows, dist, variants, ROUNDS)


def main() -> None:
    run_cells(__doc__, "probe_half_wide.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
