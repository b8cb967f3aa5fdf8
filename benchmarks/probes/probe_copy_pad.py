"""Do the narrow kernels' contended adds run faster with the extra copies a few cache
lines out of step (``COPY_PAD`` elements between one copy's end and the next copy)?

One GPU. The copies are planes of a power-of-two number of elements, so that one output
element's copies lie a power of two of bytes apart. On the grid's narrow cells where
copies are allowed (4M value elements a cell): µs a call in a CUDA graph of 20 calls
(median of five rounds taken in turn; spread: the least and most of the rounds) of
``narrow_index_add`` as the pass calls it, with ``COPY_PAD`` of 0 (shipped), 8, 32, 64
and 1,056 elements; the copies each plan chose; ``_scatter``'s µs without PDL
(profiler, median of 20 eager calls). Run at 1b6d4e8, the one commit with ``COPY_PAD``
(the next removed it: no pad was faster)::

    python benchmarks/probes/probe_copy_pad.py [--out probe_copy_pad.json]
"""

from __future__ import annotations

import probe_narrow_costs as narrow_costs
import torch
from probe_narrow_costs import cell_data, rounds, run_cells

from commrt.fx import scatter_narrow as sn
from commrt.fx.scatter_rule import pair_sample, partitions_for

DEV = torch.device("cuda")
ROUNDS = 5
PADS = (0, 8, 32, 64, 1056)
# (dtype, row width (0: 1-D values), output rows, indices)
CELLS = ((torch.float32, 0, 65536, "skewed"), (torch.float32, 4, 1024, "skewed"),
         (torch.float32, 4, 1024, "uniform"), (torch.float32, 16, 1024, "uniform"),
         (torch.float32, 16, 1024, "skewed"), (torch.float32, 16, 8, "uniform"),
         (torch.float32, 16, 8, "skewed"), (torch.bfloat16, 0, 65536, "skewed"),
         (torch.bfloat16, 4, 1024, "skewed"), (torch.bfloat16, 16, 1024, "skewed"))


def run(out, idx, vals, pad: int, kw: dict):
    sn.COPY_PAD = pad  # read at each call, captured with it
    return sn.narrow_index_add(out, idx, vals, **kw)


def cell(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    memory = torch.cuda.get_device_properties(DEV).total_memory
    P = partitions_for(rows, idx.numel(), 4 * max(1, width), memory, narrow=True)
    kw = dict(partitions=P, pair_sample=pair_sample(rows))
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    row = {"dtype": str(dtype)[6:], "width": width, "rows": rows, "dist": dist,
           "partitions": P, "copies": {}, "scatter no pdl": {}}
    for pad in PADS:
        state = torch.empty(sn.state_numel(), device=DEV, dtype=torch.int32)
        got = run(out, idx, vals, pad, dict(kw, state=state))
        err = float((got.double() - ref).norm() / ref.norm())
        assert err < tol, (pad, err)
        again = run(out, idx, vals, pad, kw)  # the copies were left zero
        assert float((again.double() - ref).norm() / ref.norm()) < tol, pad
        row["copies"][f"pad {pad}"] = int(state[0])
    row.update(rounds({f"pad {pad}": lambda pad=pad: run(out, idx, vals, pad, kw)
                       for pad in PADS}, ROUNDS))
    for pad in PADS:
        row["scatter no pdl"][f"pad {pad}"] = round(narrow_costs.kernel_us(
            lambda pad=pad: run(out, idx, vals, pad, dict(kw, pdl=False)),
            names=("_scatter",))["_scatter"], 2)
    sn.COPY_PAD = PADS[0]
    return row


def main() -> None:
    run_cells(__doc__, "probe_copy_pad.json", CELLS, cell,
              f"µs a call (median of {ROUNDS} rounds, each a CUDA graph of "
              "20 calls); scatter no pdl: median µs of _scatter over 20 "
              "eager calls without PDL (profiler)")


if __name__ == "__main__":
    main()
