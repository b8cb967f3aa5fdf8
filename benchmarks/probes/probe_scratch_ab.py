"""The scatter kernels of this checkout against an earlier commit's, and what the narrow
plan costs.

One GPU. First asked of the extra copies that stay zero between calls (c654509's kernels:
every ``_init`` / ``_prepare`` program planned and zeroed its share of the copies), then
of the narrow plan's elementwise compares on 4 warps (e375ab8's kernels: a 64 x 64
matrix on 8 warps). On the grid's data (4M value elements a cell), with Inductor's
compiled ``index_put`` in the same run:

1. ab: µs a call in a CUDA graph of 20 calls, median of three rounds taken in turn, and
   each kernel's µs (profiler, median of 20 eager calls).
2. plan: the narrow ``_init``'s µs with the plan as shipped, without the second sample,
   without hot rows, and without both.

The earlier kernels are read from ``--old DIR``, which holds ``scatter_narrow.py`` and
``scatter_kernels.py`` of that commit with their relative imports made absolute::

    mkdir old && for m in scatter_narrow scatter_kernels; do
      git show e375ab8:comm/fx/$m.py | sed 's/^from \\.scatter_/from commrt.fx.scatter_/' \\
        > old/$m.py; done
    python benchmarks/probes/probe_scratch_ab.py --old old --old-commit e375ab8 --out r.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics

import probe_narrow_costs as narrow_costs
import torch
from probe_narrow_costs import cell_data, graph_us, meta

from commrt.fx.scatter_kernels import partitioned_index_add
from commrt.fx.scatter_narrow import narrow_index_add
from commrt.fx.scatter_rule import half_adds, partitions_for

DEV = torch.device("cuda")
KERNELS = ("_init", "_prepare", "_scatter", "_sum")
# (dtype, row width (0: 1-D values), output rows, indices, kernels)
CELLS = ((torch.float32, 0, 65536, "uniform", "narrow"),
         (torch.float32, 0, 65536, "skewed", "narrow"),
         (torch.float32, 16, 1024, "uniform", "narrow"),
         (torch.float32, 16, 1024, "skewed", "narrow"),
         (torch.float32, 0, 1 << 20, "skewed", "narrow"),
         (torch.bfloat16, 0, 65536, "skewed", "narrow"),
         (torch.float32, 4, 1024, "skewed", "narrow"),
         (torch.float32, 100, 1024, "uniform", "wide"),
         (torch.float32, 100, 1024, "skewed", "wide"),
         (torch.float32, 100, 1024, "hot", "wide"),
         (torch.bfloat16, 100, 1024, "uniform", "wide"),
         (torch.float32, 1024, 1024, "uniform", "wide"),
         (torch.float32, 1024, 1024, "hot", "wide"),
         (torch.float32, 4, 65536, "uniform", "narrow"),
         (torch.float32, 16, 65536, "uniform", "narrow"),
         (torch.float32, 16, 65536, "skewed", "narrow"),
         (torch.bfloat16, 4, 65536, "uniform", "narrow"),
         (torch.bfloat16, 16, 65536, "uniform", "narrow"),
         (torch.float32, 16, 1 << 20, "uniform", "narrow"),
         (torch.bfloat16, 4, 1 << 20, "uniform", "narrow"))


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(f"old_{name}", os.path.join(path, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def kernel_us(fn) -> dict:
    """Median µs of each of ``KERNELS`` that ran, over 20 eager calls."""
    return {k: round(v, 2) for k, v in narrow_costs.kernel_us(fn, names=KERNELS).items() if v}


def ab(old_narrow, old_wide, dtype, width: int, rows: int, dist: str, kind: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    w, n = max(1, width), idx.numel()
    memory = torch.cuda.get_device_properties(DEV).total_memory
    P = partitions_for(rows, n, 4 * w, memory, narrow=kind == "narrow")
    if kind == "narrow":  # as the pass calls them
        own = half_adds(rows, w, n, P, dtype)
        new = lambda: narrow_index_add(out, idx, vals, P, half_adds=own)  # noqa: E731
        old = lambda: old_narrow.narrow_index_add(out, idx, vals, P, half_adds=own)  # noqa: E731
    else:
        new = lambda: partitioned_index_add(out, idx, vals, P)  # noqa: E731
        old = lambda: old_wide.partitioned_index_add(out, idx, vals, P)  # noqa: E731
    torch._dynamo.reset()
    f = torch.compile(lambda o, i, v: torch.index_put(o, (i,), v, accumulate=True),
                      dynamic=False)
    ref = out.double().index_put((idx,), vals.double(), accumulate=True)
    for fn in (new, old):  # both right before either is timed
        err = float((fn().double() - ref).norm() / ref.norm())
        assert err < (1e-5 if dtype == torch.float32 else 2e-2), (kind, err)
    times = {"now": [], "before": [], "inductor": []}
    for _ in range(3):
        times["now"].append(graph_us(new))
        times["before"].append(graph_us(old))
        times["inductor"].append(graph_us(lambda: f(out, idx, vals)))
    row = {"dtype": str(dtype)[6:], "width": width, "rows": rows, "dist": dist,
           "kernels": kind, "partitions": P}
    row.update({k: round(statistics.median(v), 2) for k, v in times.items()})
    row["kernels now"], row["kernels before"] = kernel_us(new), kernel_us(old)
    return row


def plan(dtype, width: int, rows: int, dist: str) -> dict:
    out, idx, vals = cell_data(dtype, width, rows, dist)
    memory = torch.cuda.get_device_properties(DEV).total_memory
    P = partitions_for(rows, idx.numel(), 4 * max(1, width), memory, narrow=True)
    row = {"dtype": str(dtype)[6:], "width": width, "rows": rows, "dist": dist,
           "partitions": P}
    for name, kw in (("shipped", {}), ("no second sample", {"pair_sample": 0}),
                     ("no hot rows", {"hot": 0}),
                     ("neither", {"pair_sample": 0, "hot": 0})):
        row[name] = kernel_us(lambda kw=kw: narrow_index_add(out, idx, vals, P, **kw))["_init"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="the earlier commit's kernel modules")
    ap.add_argument("--old-commit", required=True, help="that commit, for the record")
    ap.add_argument("--out", default="probe_scratch_ab.json")
    args = ap.parse_args()
    old_narrow, old_wide = load(args.old, "scatter_narrow"), load(args.old, "scatter_kernels")
    result = {"meta": dict(meta("python benchmarks/probes/probe_scratch_ab.py --old old "
                                f"--old-commit {args.old_commit}",
                                "µs a call (median of 3 rounds, each a CUDA graph of 20 calls); "
                                "kernels: median µs of each over 20 eager calls (profiler)"),
                           before=args.old_commit),
              "ab": [], "plan": []}
    for cell in CELLS:
        result["ab"].append(ab(old_narrow, old_wide, *cell))
        print(json.dumps(result["ab"][-1]), flush=True)
    for cell in CELLS[:4]:
        result["plan"].append(plan(*cell[:4]))
        print(json.dumps(result["plan"][-1]), flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
