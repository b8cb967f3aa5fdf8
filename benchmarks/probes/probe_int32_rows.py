"""Why do int32 rows of 4 on the narrow kernels lose to Inductor's scatter, and which
block or route adds them fastest?

One GPU. The narrow kernels sum int32 narrow rows in int32
(``scatter_rule.int_narrow``); on rows of 4 they ran 1.4-2.4x Inductor's faster scatter
on uniform and skewed indices, where fp32 rows of 4 (four elements an atomic on Triton
3.6) matched it. On the grid's int32 cells (4M value elements, values -8..8): µs a call
in a CUDA graph of 20 calls (median of five rounds taken in turn; spread: the least and
most of the rounds) of the op as the pass calls it, the narrow kernels under other
``ROW_BLOCKS`` or ``VALUE_BLOCKS`` (value elements a block, blocks a program, warps) and
with one copy, ``scatter_ints``' plain atomics (a clone and one launch), and Inductor's
two compiled scatters (``index_put``); every column equal to torch's sum first. Then
each kernel's µs in the op's call and in Inductor's on rows of 4 into 65,536 rows,
uniform::

    python benchmarks/probes/probe_int32_rows.py [--out probe_int32_rows.json]

``--wide`` (at 337b45c, whose rule sent them there as ``int_wide``): int32 rows of 100
and 1024 on the narrow kernels with one copy, under ``ROW_BLOCKS`` of 512 to 8,192
elements, into ``probe_int32_rows_wide.json``.
"""

from __future__ import annotations

import os
import sys

import torch
from probe_narrow_costs import inductor_columns, kernel_us, rounds, run_cells, with_constants

from commrt.fx import scatter as pass_scatter
from commrt.fx import scatter_narrow as sn
from commrt.fx.scatter_ints import int_index_add

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench_scatter import grid_indices  # noqa: E402

ROUNDS = 5
# (row width, output rows, indices); 0: 1-D values
CELLS = [(4, rows, d) for rows in (65536, 1 << 20) for d in ("uniform", "skewed")] + \
    [(4, 65536, "hot"), (16, 65536, "uniform"), (16, 1 << 20, "skewed"),
     (0, 65536, "uniform"), (0, 65536, "skewed"), (0, 1 << 20, "uniform"),
     (0, 1 << 20, "skewed"), (0, 1 << 20, "hot")]
WIDE_CELLS = [(100, 1024, d) for d in ("uniform", "skewed", "hot")] + \
    [(100, 65536, "hot"), (1024, 1024, "hot"), (1024, 1024, "uniform")]
WIDE_BLOCKS = {"512x1 w8": (512, 1, 8), "2048x1 w8": (2048, 1, 8), "8192x1 w8": (8192, 1, 8),
               "1024x1 w4": (1024, 1, 4)}
# name: the block (value elements, blocks a program, warps) of ROW_BLOCKS (rows of
# ROW_BLOCKS_FROM or more) or VALUE_BLOCKS (narrower)
BLOCKS = {"2048x1 w4": (2048, 1, 4), "1024x1 w4": (1024, 1, 4), "512x1 w4": (512, 1, 4),
          "512x1 w8": (512, 1, 8), "1024x1 w8": (1024, 1, 8), "2048x1 w8": (2048, 1, 8),
          "1024x4 w8": (1024, 4, 8), "256x1 w2": (256, 1, 2)}


def cell_data(width: int, rows: int, dist: str, values: int = 4 << 20,
              dtype: torch.dtype = torch.int32):
    g = torch.Generator(device="cuda").manual_seed(0)
    n = values // max(1, width)
    shape = (rows,) if width == 0 else (rows, width)
    out = torch.randint(-1000, 1000, shape, device="cuda", generator=g, dtype=dtype)
    vals = torch.randint(-8, 9, (n, *shape[1:]), device="cuda", generator=g, dtype=dtype)
    return out, grid_indices(dist, rows, n, g), vals


def exact_row(calls: dict, ref: torch.Tensor, width: int, rows: int, dist: str,
              lenient: bool = False, **extra) -> dict:
    """An integer cell's row: every one of ``calls`` equal to ``ref`` first, then
    ``ROUNDS`` rounds of their times (``extra``: more of the row, after its cell; its
    ``dtype``, where not int32).
    ``lenient``: a call that differs or raises is listed under "wrong" and not timed."""
    wrong = []
    for name, fn in list(calls.items()):
        if not lenient:
            assert torch.equal(fn(), ref), (name, width, rows, dist)
            continue
        try:
            same = torch.equal(fn(), ref) or "sum differs"
        except Exception as e:  # a form the kernels refuse: named, not timed
            same = f"{type(e).__name__}: {e}"
        if same is not True:
            wrong.append([name, same])
            del calls[name]
    row = {"dtype": "int32", "width": width, "rows": rows, "dist": dist, **extra}
    if lenient:
        row["wrong"] = wrong
    row.update(rounds(calls, ROUNDS))
    return row


def base_cell(width: int, rows: int, dist: str, dtype: torch.dtype = torch.int32) -> tuple:
    """An integer cell's data, the copies the pass gives it, torch's sum and the op's and
    Inductor's two compiled scatters' calls: (out, idx, vals, copies, ref, calls)."""
    out, idx, vals = cell_data(width, rows, dist, dtype=dtype)
    P = pass_scatter.copies(rows, max(1, width), idx.numel(), dtype,
                            torch.cuda.get_device_properties(0).total_memory)
    ref = out.index_put((idx,), vals, accumulate=True)
    plain, parted = inductor_columns(out, idx, vals)
    return out, idx, vals, P, ref, {
        "op": lambda: torch.ops.commrt.partitioned_index_put(out, idx, vals, P),
        "inductor": lambda: plain(out, idx, vals),
        "inductor partitioned": lambda: parted(out, idx, vals)}


def cell(width: int, rows: int, dist: str) -> dict:
    out, idx, vals, P, ref, calls = base_cell(width, rows, dist)
    calls = {"op": calls.pop("op"),
             "op one copy": lambda: torch.ops.commrt.partitioned_index_put(out, idx, vals, 1),
             "int adds": lambda: int_index_add(out, idx, vals, 1), **calls}
    which = "ROW_BLOCKS" if width >= sn.ROW_BLOCKS_FROM else "VALUE_BLOCKS"
    for name, blocks in (WIDE_BLOCKS if width > 16 else BLOCKS).items():
        run = with_constants(sn, **{which: blocks})
        calls[name] = lambda run=run: run(out, idx, vals, P)
    row = exact_row(calls, ref, width, rows, dist, partitions=P)
    if (width, rows, dist) == (4, 65536, "uniform"):
        row["kernels"] = {name: {k: round(v, 2) for k, v in kernel_us(calls[name],
                                                                      names=None).items()}
                          for name in ("op", "int adds", "inductor")}
    return row


def main() -> None:
    wide = "--wide" in sys.argv
    if wide:
        sys.argv.remove("--wide")
    run_cells(__doc__, "probe_int32_rows_wide.json" if wide else "probe_int32_rows.json",
              WIDE_CELLS if wide else CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)",
              " --wide" if wide else "", "probe_int32_rows")


if __name__ == "__main__":
    main()
