"""Do the int32 narrow kernels add faster on one value element a thread, and do int32
rows of 100 and 1024 on them then beat Inductor's scatters?

One GPU. At 7e9d88d (``probe_int_blocks_NVIDIA_H100_80GB_HBM3.json``) the op took every
int32 row on 256 elements on 8 warps and int32 rows of up to 1,024 elements to the
narrow kernels, on the copies the pass gave; since, only rows of 2 to 8 elements and
wider rows with few values a row. A flat run of value
elements a program added int32 rows of 100 into 1,024 rows, uniform, in 13.2 µs on 256
elements on 8 warps (one a thread) against 30.0 on 512 on 4 and Inductor's plain
scatter's 29.9 (``probe_int_flat.py``); the narrow kernels added int32 narrow rows on
512 elements on 8 warps (two a thread) before, and wider int32 rows stayed with
Inductor. On the grid's int32 cells (4M value elements, values -8..8): µs a call in a
CUDA graph of 20 calls (median of five rounds taken in turn; spread: the least and most
of the rounds) of Inductor's two compiled scatters (``index_put``), the op as the pass
calls it (``op``, on the copies the pass gives) and

- narrow rows (16 elements or fewer): the op with every int32 row on one block of
  (value elements, blocks a program, warps) ``512x1 w8`` or ``256x1 w8``;
- wider rows: ``probe_int_flat``'s flat adds on 256 elements on 8 warps (one copy), and
  the narrow kernels on one copy with the hot rows of ``scatter_rule.wide_on_one_copy``
  and blocks of 16 columns on 256x1 w8 (``c16``), and on up to 8 and 32
  copies (``c16 P8``, ``c16 P32``: the same hot rows, the copies chosen by the plan).

A column whose sum is not torch's is listed under ``wrong`` and not timed::

    python benchmarks/probes/probe_int_blocks.py [--out probe_int_blocks.json]
"""

from __future__ import annotations

from probe_int32_rows import ROUNDS, base_cell, exact_row
from probe_int_flat import flat
from probe_narrow_costs import run_cells, with_constants

from commrt.fx import scatter_narrow as sn
from commrt.fx.scatter_rule import NARROW_ROW, ONE_COPY_HOT, ONE_COPY_HOT_MIN, pair_sample

# (row width, output rows, indices); 0: 1-D values
NARROW = [(4, 65536, d) for d in ("uniform", "skewed", "hot")] + \
    [(16, 65536, "uniform"), (16, 65536, "skewed"), (16, 1024, "uniform"), (16, 1024, "hot"),
     (0, 1 << 20, "uniform"), (0, 1 << 20, "hot"), (0, 65536, "skewed")]
WIDE = [(w, 1024, d) for w in (100, 1024) for d in ("uniform", "skewed", "hot")] + \
    [(100, 65536, d) for d in ("uniform", "skewed", "hot")] + \
    [(1024, 65536, "uniform"), (1024, 8, "uniform"), (1024, 8, "hot")]
# every int32 row on one block (INT_BLOCKS and INT_THREAD_BLOCKS)
INT_BLOCKS = {"512x1 w8": (512, 1, 8), "256x1 w8": (256, 1, 8)}
# name: (INT_THREAD_BLOCKS, columns, copies)
WIDE_FORMS = {"c16": ((256, 1, 8), 16, 1), "c16 P8": ((256, 1, 8), 16, 8),
              "c16 P32": ((256, 1, 8), 16, 32)}


def one_copy(columns: int):
    def op(out, idx, vals, P):
        return sn.narrow_index_add(out, idx, vals, P, hot=ONE_COPY_HOT,
                                   hot_min=ONE_COPY_HOT_MIN, columns=columns,
                                   pair_sample=pair_sample(out.shape[0]) if P > 1 else 0)
    return op


def cell(width: int, rows: int, dist: str) -> dict:
    out, idx, vals, P, ref, calls = base_cell(width, rows, dist)
    if width <= NARROW_ROW:
        for name, blocks in INT_BLOCKS.items():
            run = with_constants(sn, INT_BLOCKS=blocks, INT_THREAD_BLOCKS=blocks)
            calls[name] = lambda run=run: run(out, idx, vals, P)
    else:
        go = flat(256, 8, 1)
        calls["flat 256 w8"] = lambda: go(out, idx, vals)
        for name, (blocks, columns, p) in WIDE_FORMS.items():
            run = with_constants(sn, one_copy(columns), INT_THREAD_BLOCKS=blocks)
            calls[name] = lambda run=run, p=p: run(out, idx, vals, p)
    return exact_row(calls, ref, width, rows, dist, lenient=True, partitions=P)


def main() -> None:
    run_cells(__doc__, "probe_int_blocks.json", NARROW + WIDE, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
