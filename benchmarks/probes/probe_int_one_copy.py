"""Do int32 rows of 99 and 100 into 65,536 rows run faster as flat adds on one copy
(``scatter_ints.int_flat_index_add``, no plan) than on the narrow kernels, on skewed
indices and with one hot row too?

One GPU. On uniform indices the flat adds took 34.0 and 34.1 µs against the narrow
kernels' 38.0 and 37.9 on one H100 (``probe_int_sum_NVIDIA_H100_80GB_HBM3.json``), where
Inductor's plain scatter took 32.6 and 36.4. One hot row takes half the indices, about 21,000
value rows into one output row: on one copy its adds queue on one address each. Columns
as ``probe_int_sum.py``'s 65,536-row cells: the op as the pass calls it ("op"), "flat one
copy", Inductor's two compiled scatters (``index_put``); µs a call in a CUDA graph of 20
calls (median of five rounds taken in turn), every column equal to torch's sum first::

    python benchmarks/probes/probe_int_one_copy.py [--out probe_int_one_copy.json]
"""

from __future__ import annotations

import torch
from probe_int_sum import cell
from probe_narrow_costs import run_cells

I32 = torch.int32
# (dtype, row width, output rows, index distribution)
CELLS = [(I32, w, 65536, d) for d in ("skewed", "hot", "uniform") for w in (99, 100)]


def main() -> None:
    run_cells(__doc__, "probe_int_one_copy.json", CELLS, cell,
              "µs a call (median of 5 rounds, each a CUDA graph of 20 calls)")


if __name__ == "__main__":
    main()
