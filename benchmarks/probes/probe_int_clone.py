"""Where int64 rows go to ``int_index_add`` on one copy (a clone of ``self``, then native
64-bit atomics), does a large output's clone cost more than Inductor's copy of it?

One GPU. int64 rows of 1024 into 65,536 rows (4,096 indices, an output of 512 MiB) ran
1.09x Inductor's plain scatter on uniform and skewed indices on one H100 (0.480 against
0.439 ms, ``scatter_int_grid_NVIDIA_H100_80GB_HBM3.md``), where the adds are a 32 MiB read.
Columns: the op as the pass calls it; "op copy kernel" (where the adds go into one copy,
``self`` copied by a Triton kernel, ``COPY_BLOCK`` elements a program, not ``clone``d);
"clone" and "copy kernel" alone; Inductor's two compiled scatters (``index_put``); µs a
call in a CUDA graph of 20 calls (median of five rounds taken in turn), every scatter
column equal to torch's sum first::

    python benchmarks/probes/probe_int_clone.py [--out probe_int_clone.json]

Its result is at 1063176. The op has since made that copy with the same kernel
(``scatter_ints._int_copy``), so later "op" and "op copy kernel" are one form.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from probe_int32_rows import base_cell, exact_row
from probe_narrow_costs import run_cells

from commrt.fx import scatter as pass_scatter
from commrt.fx import scatter_ints as si

I64 = torch.int64
# (dtype, row width, output rows, index distribution)
CELLS = [(I64, 1024, 65536, "uniform"), (I64, 1024, 65536, "hot"),
         (I64, 4096, 1024, "uniform"), (I64, 100, 1 << 20, "uniform")]
COPY_BLOCK = 4096


@triton.jit
def _copy(src, dst, numel, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < numel
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


def copied(t: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(t)
    _copy[(triton.cdiv(t.numel(), COPY_BLOCK),)](t, out, t.numel(), BLOCK=COPY_BLOCK,
                                                 num_warps=8)
    return out


def with_copy_kernel(out, idx, vals, P):
    """The op as the pass calls it, a copy of ``self`` made by ``copied`` where its adds
    go into one (``_buffer``, ``_flat_buffers``; replays cleared)."""
    kept = si._buffer, si._flat_buffers

    def buffer(self, rows, p):
        return copied(self) if p == 1 else kept[0](self, rows, p)

    def flat_buffers(self, p, stride):
        if p > 1:
            return kept[1](self, p, stride)
        one = copied(self)
        return one, one

    pass_scatter.forget_shapes()
    si._buffer, si._flat_buffers = buffer, flat_buffers
    try:
        return torch.ops.commrt.partitioned_index_put(out, idx, vals, P)
    finally:
        si._buffer, si._flat_buffers = kept
        pass_scatter.forget_shapes()


def cell(dtype: torch.dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals, P, ref, calls = base_cell(width, rows, dist, dtype)
    calls["op copy kernel"] = lambda: with_copy_kernel(out, idx, vals, P)
    assert torch.equal(copied(out), out)
    row = exact_row(calls, ref, width, rows, dist, dtype="int64", partitions=P)
    alone = exact_row({"clone": out.clone, "copy kernel": lambda: copied(out)}, out, width,
                      rows, dist)
    row.update({k: v for k, v in alone.items() if k in ("clone", "copy kernel")})
    row["spread"].update(alone["spread"])
    return row


def main() -> None:
    run_cells(__doc__, "probe_int_clone.json", CELLS, cell,
              "µs a call (median of 5 rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
