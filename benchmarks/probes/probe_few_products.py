"""Do fp32 and bf16 rows of 16 and of 100 into 8 rows run faster as one-hot products on
larger blocks, on fewer or more programs an SM, with other pipeline depths, or (bf16) as
products in bf16 rather than in tf32?

One GPU. The grid's cells there need commrt 1.3x faster than Inductor's partitions (its
columns lie over 1.5x apart), and the few-rows kernels missed it by 2-12% at df45b10:
fp32 rows of 16 9.6 µs against 12.2, bf16 10.1 against 11.9 (selects, about 24
instructions a value element); rows of 100 9.9 against 10.4 and 7.7 against 8.3
(products in tf32 on 8 KB of values a step an SM, 2 programs an SM). For 4M value
elements, uniform indices (the kernels do not depend on them), µs a call in a CUDA graph
of 20 calls (median of five rounds taken in turn): ``few_rows_index_add`` as shipped; the
selects (fp16/bf16 rows of 16) or tf32 products (bf16 rows of 100) as before; the
products on 8, 16 and 32 KB of values a step an SM (``DOT_SM_BYTES``) on 1, 2, 4 and 8
programs an SM; as shipped with ``num_stages`` 2 and 4; Inductor's partitions.

    python benchmarks/probes/probe_few_products.py [--out probe.json] [--split|--fma|--parts]

``--split`` (at b945828, where ``scatter_few`` had ``SPLIT_PRODUCTS``): fp32 rows of 16 and
100 into 8 rows, the products with each value in three bf16 parts (rows of 16 forced to
the products, ``FEW_WIDTH`` 8) on 8, 16 and 32 KB a step an SM on 1, 2 and 4 programs an
SM, against the op as shipped (the selects, and tf32 products) and Inductor's partitions.

``--fma`` (at baa6a42, where ``scatter_few`` had ``FMA_SELECTS``): rows of up to 16 into 8
and 16 rows that take the selects, the selects as one multiply-add an element (the value
times 0 or 1; redone as selects where a partial is not finite) on the shipped tiles, on
4,096 and 8,192 accumulator elements and on 8 programs an SM, against the op as shipped
and Inductor's partitions. The run there stopped at bf16 1-D values, whose Inductor
partitions add in bf16 atomics on 8 addresses (minutes a call); they are left out here.

``--parts`` (at 8400188, where fp32 took three tf32 parts, each product exact; shipped
since): fp32 values as two tf32 parts (the second rounded to nearest: each value
within 2^-22 of itself) rather than three, in ``scatter_few``'s products (rows of
100 into 8 rows; rows of 16 forced to the products, ``FEW_WIDTH`` 8) on 8, 16 and 32 KB
a step an SM on 1, 2 and 4 programs an SM (rows of 16: 2, 4 and 8; rows of 100 also on
8 warps and with ``num_stages`` 2 and 4), and in the wide
kernels' combined rows (rows of 100 into 1,024 rows, the copies the pass gives), against
the op as shipped and both of Inductor's scatters.

(At b3f6ae6, the first form of this probe swept value elements a program's step and
programs an SM, the fp16/bf16 products an option.)
"""

from __future__ import annotations

import functools
import sys

import torch
from probe_narrow_costs import cell_data, cell_row, inductor_columns, run_cells, with_constants

import commrt.fx.scatter_few as few
import commrt.fx.scatter_kernels as wide
from commrt.fx import scatter as pass_scatter

ROUNDS = 5
F16, F32, BF16 = torch.float16, torch.float32, torch.bfloat16
CELLS = ((BF16, 16, 8, "uniform"), (F16, 16, 8, "uniform"), (BF16, 100, 8, "uniform"),
         (F32, 100, 8, "uniform"))
SM_BYTES, PROGRAMS, STAGES = (8192, 16384, 32768), (1, 2, 4, 8), (2, 4)


def _few(**values):
    """``few_rows_index_add`` with ``scatter_few``'s constants set to ``values``."""
    return with_constants(few, lambda out, idx, vals, P: few.few_rows_index_add(out, idx, vals),
                          **values)


def variants(dtype, width: int) -> dict:
    out = {"shipped": _few()}
    if dtype != F32:
        out["selects" if width <= few.FEW_WIDTH else "tf32"] = _few(HALF_PRODUCTS=False)
    for sm_bytes in SM_BYTES:
        for per in PROGRAMS:
            out[f"{sm_bytes // 1024} KB {per}/SM"] = _few(
                DOT_SM_BYTES=sm_bytes, DOT_NARROW_PROGRAMS=per, DOT_PROGRAMS=per)
    for stages in STAGES:
        out[f"stages {stages}"] = _few(DOT_STAGES=stages)
    return out


SPLIT_CELLS = ((F32, 16, 8, "uniform"), (F32, 100, 8, "uniform"))


def split_variants(dtype, width: int) -> dict:
    out = {"shipped": _few()}
    force = dict(FEW_WIDTH=8) if width <= few.FEW_WIDTH else {}
    for sm_bytes in SM_BYTES:
        for per in PROGRAMS[:3]:
            out[f"bf16 parts {sm_bytes // 1024} KB {per}/SM"] = _few(
                SPLIT_PRODUCTS=True, DOT_SM_BYTES=sm_bytes, DOT_NARROW_PROGRAMS=per,
                DOT_PROGRAMS=per, **force)
    return out


FMA_CELLS = ((F32, 16, 8, "uniform"), (F32, 4, 8, "uniform"), (F32, 0, 8, "uniform"),
             (BF16, 4, 8, "uniform"), (F32, 4, 16, "uniform"),
             (F32, 8, 8, "uniform"))


def fma_variants(dtype, width: int) -> dict:
    return {"shipped": _few(), "fma": _few(FMA_SELECTS=True),
            "fma 4096": _few(FMA_SELECTS=True, TILE=4096, FP32_TILE=4096),
            "fma 8192": _few(FMA_SELECTS=True, TILE=8192, FP32_TILE=8192),
            "fma 8/SM": _few(FMA_SELECTS=True, PROGRAMS_PER_SM=8)}


PARTS_CELLS = ((F32, 100, 8, "uniform"), (F32, 100, 8, "hot"), (F32, 16, 8, "uniform"),
               (F32, 100, 1024, "skewed"), (F32, 100, 1024, "hot"),
               (F32, 100, 1024, "uniform"))


def parts_variants(dtype, width: int, rows: int) -> dict:
    two = {**few.PARTS, F32: 2}
    if rows > few.FEW_ROWS:  # the wide kernels, as the pass calls them
        return {"shipped": with_constants(wide), "2 parts": with_constants(wide, PARTS=two)}
    force = dict(FEW_WIDTH=8) if width <= few.FEW_WIDTH else {}
    out = {"shipped": _few()}
    if force:
        out["products"] = _few(**force)
    per_sm = PROGRAMS[1:] if force else PROGRAMS[:3]
    for sm_bytes in SM_BYTES:
        for per in per_sm:
            out[f"2 parts {sm_bytes // 1024} KB {per}/SM"] = _few(
                PARTS=two, DOT_SM_BYTES=sm_bytes, DOT_NARROW_PROGRAMS=per,
                DOT_PROGRAMS=per, **force)
    if not force:  # the shipped step on 8 warps, and with other pipeline depths
        out["2 parts 8 warps"] = _few(PARTS=two, WARPS=8)
        for stages in STAGES:
            out[f"2 parts stages {stages}"] = _few(PARTS=two, DOT_STAGES=stages)
    return out


def cell(dtype, width: int, rows: int, dist: str, mode: str = "") -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    plain, parted = inductor_columns(out, idx, vals)
    if mode == "parts":
        ours = parts_variants(dtype, width, rows)
    else:
        ours = {"split": split_variants, "fma": fma_variants}.get(mode, variants)(dtype, width)
    P = pass_scatter.copies(rows, max(1, width), idx.numel(), dtype,
                            torch.cuda.get_device_properties(0).total_memory)
    calls = {name: (lambda fn=fn: fn(out, idx, vals, P)) for name, fn in ours.items()}
    calls["inductor partitioned"] = lambda: parted(out, idx, vals)
    if mode == "parts":
        calls["inductor"] = lambda: plain(out, idx, vals)
    # the wide kernels add with atomics: not the same bits every call
    return cell_row(dtype, width, rows, dist, calls, ref, lambda name: name in ours, ROUNDS,
                    rows <= few.FEW_ROWS)


def main() -> None:
    mode = next((m for m in ("split", "fma", "parts") if f"--{m}" in sys.argv), "")
    if mode:
        sys.argv.remove(f"--{mode}")
    run_cells(__doc__, f"probe_few_products{'_' + mode if mode else ''}.json",
              {"split": SPLIT_CELLS, "fma": FMA_CELLS, "parts": PARTS_CELLS}.get(mode, CELLS),
              functools.partial(cell, mode=mode),
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls); "
              "spread: the least and most of the rounds; err: relative error against "
              "float64", f" --{mode}" if mode else "", "probe_few_products")


if __name__ == "__main__":
    main()
