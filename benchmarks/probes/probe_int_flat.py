"""Do commrt's int32 plain atomics match Inductor's once a program takes a flat run of
value elements (Inductor's form) rather than ``[SUB, DP]`` blocks of whole rows?

One GPU. ``scatter_ints._int_adds`` adds a block of value rows, ``DP`` (the next power of
two of the row) columns at a time; Inductor's scatter takes ``XBLOCK`` consecutive value
elements a program, each element's row and column from its position. On the grid's int32
cells (4M value elements, values -8..8): µs a call in a CUDA graph of 20 calls (median of
five rounds taken in turn; spread: the least and most of the rounds) of Inductor's two
compiled scatters (``index_put``), ``int_index_add`` as shipped, and flat runs under several
(``XBLOCK``, warps), on one copy and, on rows of 100 and 1024, on 8 and 32 copies. Every
column equal to torch's sum first. Its results are of 169c3fd, whose flat kernel (this
probe's own then) had its copies summed by torch as ``int_index_add`` sums them; it now
times ``int_flat_index_add``, whose ``_int_sum`` sums them::

    python benchmarks/probes/probe_int_flat.py [--out probe_int_flat.json]
"""

from __future__ import annotations

from probe_int32_rows import ROUNDS, cell_data, exact_row
from probe_narrow_costs import inductor_columns, run_cells

from commrt.fx import scatter_ints as si

# (row width, output rows, indices); 0: 1-D values
CELLS = [(100, 1024, d) for d in ("uniform", "skewed", "hot")] + \
    [(1024, 1024, d) for d in ("uniform", "skewed", "hot")] + \
    [(100, 65536, "hot"), (4, 65536, "uniform"), (16, 65536, "uniform"),
     (0, 1 << 20, "uniform")]
FORMS = {"1024 w4": (1024, 4), "512 w4": (512, 4), "512 w8": (512, 8), "256 w4": (256, 4),
         "256 w8": (256, 8), "128 w4": (128, 4)}


def flat(xblock: int, warps: int, P: int):
    def run(out, idx, vals):
        return si.int_flat_index_add(out, idx, vals, P, block=xblock, warps=warps)
    return run


def cell(width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(width, rows, dist)
    ref = out.index_put((idx,), vals, accumulate=True)
    plain, parted = inductor_columns(out, idx, vals)
    calls = {"inductor": lambda: plain(out, idx, vals),
             "inductor partitioned": lambda: parted(out, idx, vals),
             "adds": lambda: si.int_index_add(out, idx, vals, 1)}
    for p in (1, 8, 32) if width > 16 else (1,):
        for name, (xblock, warps) in FORMS.items():
            run = flat(xblock, warps, p)
            calls[f"flat {name} P{p}"] = lambda run=run: run(out, idx, vals)
        if p > 1:
            calls[f"adds P{p}"] = lambda p=p: si.int_index_add(out, idx, vals, p)
    return exact_row(calls, ref, width, rows, dist)


def main() -> None:
    run_cells(__doc__, "probe_int_flat.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
