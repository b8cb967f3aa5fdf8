"""Does where the output lies in memory move an atomic scatter's time?

One GPU. The same compiled scatter graph ran 17.1 µs in one process and 20.3 in another
with the same kernel configs (``probe_compiles_NVIDIA_H200.json``), and Inductor's bf16
scatter kernel took 5.3 µs in one run and 9.7 in another
(``probe_wide_blocks_NVIDIA_H200.json``, ``probe_flat_adds_NVIDIA_H200.json``). Here one
kernel, an accumulating ``index_put`` over the flattened values (``XBLOCK`` values a
program, plain atomics, Inductor's two 1-D pointwise configs), adds the grid's values into
output views at several byte offsets into one large buffer: rows of 100 into 1,024 rows,
uniform, fp32 and bf16. (Inductor's own kernel for rows of 100 tiles rows and columns in
2-D, ``YBLOCK`` by ``XBLOCK``. In this 1-D form bf16 ran 71-106 µs, over ten times
Inductor's kernel; its PTX moves the values through shared memory before the atomics, the
cause is not known. So only the fp32 rows speak to placement.)

µs a call in a CUDA graph of 20 calls (median of five rounds taken in turn)::

    python benchmarks/probes/probe_out_placement.py [--out probe_out_placement.json]
"""

from __future__ import annotations

import statistics

import torch
import triton
import triton.language as tl
from probe_narrow_costs import cell_data, graph_us, run_cells

ROUNDS = 5
F32, B16 = torch.float32, torch.bfloat16
CELLS = [(t, 100, 1024, "uniform") for t in (B16, F32)]
OFFSETS = (0, 4 << 10, 64 << 10, 1 << 20, (2 << 20) - (100 << 10), 2 << 20, 3 << 20,
           (32 << 20) + (512 << 10))  # bytes
CONFIGS = ((512, 8), (1024, 4))  # Inductor's two pointwise configs: XBLOCK, warps


@triton.jit
def _scatter(out, idx, vals, N, rows, D: tl.constexpr, XBLOCK: tl.constexpr):
    x = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    m = x < N
    r = x // D
    i = tl.load(idx + r, m, eviction_policy="evict_last")
    i = tl.where(i < 0, i + rows, i)
    v = tl.load(vals + x, m)
    tl.atomic_add(out + (x - r * D + D * i), v, m, sem="relaxed")


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    N = vals.numel()
    size = out.element_size()
    pool = torch.zeros((64 << 20) // size, device="cuda", dtype=dtype)
    row = {"dtype": str(dtype)[6:], "width": width, "rows": rows, "dist": dist,
           "pool_address_mod_2MiB": pool.data_ptr() % (2 << 20), "us": {}}
    times = {}
    for xb, w in CONFIGS:
        for off in OFFSETS:
            view = pool[off // size: off // size + out.numel()]

            def call(view=view, xb=xb, w=w):
                _scatter[(triton.cdiv(N, xb),)](view, idx, vals, N, rows, D=width, XBLOCK=xb,
                                                num_warps=w)
            times[f"XBLOCK {xb} w{w} offset {off}"] = call
    # the kernel against float64 (into zeros) at each offset, before timing
    ref = torch.zeros_like(out, dtype=torch.float64).index_put((idx,), vals.double(),
                                                               accumulate=True)
    for off in OFFSETS:
        view = pool[off // size: off // size + out.numel()].zero_()
        _scatter[(triton.cdiv(N, 1024),)](view, idx, vals, N, rows, D=width, XBLOCK=1024)
        err = float((view.view_as(out).double() - ref).norm() / ref.norm())
        assert err < (1e-5 if dtype == F32 else 2e-2), (off, err)
    got = {k: [] for k in times}
    for _ in range(ROUNDS):
        for k, fn in times.items():
            got[k].append(graph_us(fn))
    row["us"] = {k: round(statistics.median(v), 2) for k, v in got.items()}
    row["spread"] = {k: [round(min(v), 2), round(max(v), 2)] for k, v in got.items()}
    return row


def main() -> None:
    run_cells(__doc__, "probe_out_placement.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
