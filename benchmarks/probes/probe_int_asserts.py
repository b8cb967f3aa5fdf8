"""What does the device-side assert on an index out of range cost commrt's int32 scatters,
and do int32 rows of 100 and 1024 gain from copies on the narrow kernels?

One GPU. commrt's integer kernels compile with Triton's ``debug`` on, so that
``tl.device_assert`` stays (an index out of range is a device-side assert, as in torch's
op). On the grid's int32 cells (4M value elements, values -8..8): µs a call in a CUDA
graph of 20 calls (median of five rounds taken in turn; spread: the least and most of
the rounds) of Inductor's two compiled scatters (``index_put``), ``scatter_ints``' plain
atomics and the narrow kernels (one copy, and the copies the pass gives; on rows of 100
and 1024, 8 and 32), each with the assert (as shipped) and compiled without it. Every
column equal to torch's sum first::

    python benchmarks/probes/probe_int_asserts.py [--out probe_int_asserts.json]
"""

from __future__ import annotations

import torch
from probe_int32_rows import ROUNDS, cell_data, exact_row
from probe_narrow_costs import inductor_columns, run_cells

from commrt.fx import scatter as pass_scatter
from commrt.fx import scatter_ints as si
from commrt.fx import scatter_narrow as sn
from commrt.fx.scatter_rule import pair_sample
from commrt.symm_mem.launch import Launcher

# (row width, output rows, indices); 0: 1-D values
CELLS = [(100, 1024, d) for d in ("uniform", "skewed", "hot")] + \
    [(1024, 1024, d) for d in ("uniform", "skewed", "hot")] + \
    [(4, 65536, "uniform"), (16, 65536, "uniform"), (0, 1 << 20, "uniform"),
     (0, 1 << 20, "hot")]
UNCHECKED = {"adds": (si, "run_adds", Launcher(si._int_adds, sanitize_overflow=False)),
             "scatter": (sn, "run_int_scatter",
                         Launcher(sn._scatter, sanitize_overflow=False))}


def unchecked(fn, which: tuple):
    """``fn`` with the kernels ``which`` (keys of ``UNCHECKED``) compiled without the
    assert, the launch caches cleared before and after."""
    def clear():
        si._launch.cache_clear()
        sn._launches.cache_clear()
        pass_scatter.forget_shapes()

    def run():
        kept = [(mod, name, getattr(mod, name)) for mod, name, _ in
                (UNCHECKED[w] for w in which)]
        clear()
        for w in which:
            mod, name, launcher = UNCHECKED[w]
            setattr(mod, name, launcher)
        try:
            return fn()
        finally:
            for mod, name, launcher in kept:
                setattr(mod, name, launcher)
            clear()
    return run


def cell(width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(width, rows, dist)
    n = idx.numel()
    P = pass_scatter.copies(rows, max(1, width), n, torch.int32,
                            torch.cuda.get_device_properties(0).total_memory)
    ref = out.index_put((idx,), vals, accumulate=True)
    plain, parted = inductor_columns(out, idx, vals)
    pairs = pair_sample(rows)
    calls = {"inductor": lambda: plain(out, idx, vals),
             "inductor partitioned": lambda: parted(out, idx, vals),
             "adds": lambda: si.int_index_add(out, idx, vals, 1)}
    calls["adds unchecked"] = unchecked(calls["adds"], ("adds",))
    copies = (8, 32) if width > sn.NARROW_ROW else (P,)
    for p in (1, *copies):
        def narrow(p=p):
            return sn.narrow_index_add(out, idx, vals, p, pair_sample=pairs if p > 1 else 0)
        calls[f"narrow {p}"] = narrow
        calls[f"narrow {p} unchecked"] = unchecked(narrow, ("scatter",))
    return exact_row(calls, ref, width, rows, dist, partitions=P)


def main() -> None:
    run_cells(__doc__, "probe_int_asserts.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
