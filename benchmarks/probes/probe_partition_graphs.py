"""Why did commrt's graph of Inductor's partitioned scatter read 55 µs a call on
``index_add`` of fp32 rows of 32 into 8 rows, skewed, where Inductor's own partitions read
11.2, and commrt's own kernels 41.6 on bf16 rows of 32 there, uniform, where the same
kernels read 17.9 in the ``--force`` column? (one H100,
``scatter_grid_w32_50_NVIDIA_H100_80GB_HBM3.json``, 6b9fa1e)

One GPU. Each (group, column) compiles in a fresh process with a fresh Inductor cache, as
the grid's columns do (``bench_scatter._column``, ``_context``), times each distribution
as the grid does (``time_call``) and writes the code Inductor generated
(``run_and_get_code``) to ``--code-dir``, so that the two columns' kernels can be read side
by side; ``--reps`` compiles of each::

    python benchmarks/probes/probe_partition_graphs.py [--out probe_partition_graphs.json]
        [--code-dir partition_graphs_code] [--reps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from probe_compiles import run_fresh

HERE = os.path.dirname(os.path.abspath(__file__))
GROUPS = (  # (group, columns)
    (("index_add", "float32", 32, 8), ("inductor partitioned", "commrt")),
    (("index_put", "float32", 32, 8), ("inductor partitioned", "commrt")),
    (("index_add", "bfloat16", 32, 8), ("commrt", "commrt kernels")))


def one(group: tuple, column: str, code_file: str) -> dict:
    """In this process: the column compiled (its code written), each dist timed."""
    import torch
    from torch._inductor.utils import run_and_get_code

    sys.path.insert(0, os.path.dirname(HERE))
    import bench_scatter as bs

    out, vals, idxs = bs.group_data(group)
    f = bs._column(column, bs.column_fn(group[0], column))
    res = {"group": list(group), "column": column, "us": {}, "graphs_us": {}, "err": {}}
    with bs._context(column), bs.autotune_log() as tuned:
        got, codes = run_and_get_code(f, out, idxs["uniform"], vals)
        torch.cuda.synchronize()
        with open(code_file, "w") as fh:
            fh.write("\n\n# ---- next code ----\n\n".join(codes))
        for d in bs.DISTS:
            ref = out.double().index_add(0, idxs[d], vals.double())
            res["err"][d] = bs._rel_err(f(out, idxs[d], vals), ref)
            ms, _, each = bs.time_call(lambda d=d: f(out, idxs[d], vals))
            res["us"][d] = round(ms * 1e3, 2)
            res["graphs_us"][d] = [round(x * 1e3, 2) for x in each]
    res["tuned"] = tuned
    res["code"] = os.path.basename(code_file)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="probe_partition_graphs.json")
    ap.add_argument("--code-dir", default="partition_graphs_code")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        group, column, code_file = json.loads(args.one)
        print("RESULT " + json.dumps(one(tuple(group), column, code_file)), flush=True)
        return
    import datetime

    import torch
    import triton

    os.makedirs(args.code_dir, exist_ok=True)
    results = {"date": datetime.date.today().isoformat(),
               "device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "triton": triton.__version__, "commit": os.environ.get("GIT_COMMIT", ""),
               "command": "python " + " ".join(sys.argv), "runs": []}
    for group, columns in GROUPS:
        for rep in range(args.reps):
            for column in columns:
                name = f"{'_'.join(map(str, group))}_{column.replace(' ', '_')}_{rep}.py"
                r = run_fresh(__file__, [group, column, os.path.join(args.code_dir, name)])
                if r is None:
                    continue
                r["rep"] = rep
                results["runs"].append(r)
                print(group, column, rep, r["us"], flush=True)
                with open(args.out, "w") as fh:
                    json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
