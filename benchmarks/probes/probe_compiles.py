"""Do two compiles of the same scatter graph run at different speeds, and is Inductor's
autotuning of its pointwise kernels the cause?

One GPU. In the grid, two columns holding the same kind of graph have lain up to 1.19x
apart in one run and alike in the next (fp32 rows of 4 into 1,024 rows, ``index_put``:
Inductor's partitioned scatter 19.8 or 23.0 µs, commrt's partitioned graph 23.2, on one
H100), while the five graphs that time one column agree within 2%. Here each column of a
grid group is compiled again and again, each time in a fresh process with a fresh
Inductor cache (no autotuning result carried over), one process at a time (the GPU to
itself), with Inductor's pointwise autotuning on (its default) and off. Each process
times its column as the grid does (``time_call``) and records, for every kernel that
Inductor autotuned, each config's benchmarked ms and the one it chose
(``bench_scatter.autotune_log``; the results at 11c5bc7 and 114ab69 name those ms
``configs``).

    python benchmarks/probes/probe_compiles.py [--out probe_compiles.json] [--reps 3] [--groups 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GROUPS = (  # (group, columns, autotuning on / off)
    (("index_put", "float32", 4, 1024), ("inductor partitioned", "commrt"), (True, False)),
    (("index_put", "float32", 16, 1024), ("compiled",), (True,)))


def one(group: tuple, column: str, tune: bool) -> dict:
    """In this process: the column compiled, its autotuning recorded, each dist timed."""
    import torch
    import torch._inductor.config as ic

    sys.path.insert(0, os.path.dirname(HERE))
    import bench_scatter as bs

    out, vals, idxs = bs.group_data(group)
    f = bs._column(column, bs.OPS[group[0]])
    res = {"group": list(group), "column": column, "autotune_pointwise": tune, "ms": {},
           "graphs_ms": {}}
    with ic.patch({"triton.autotune_pointwise": tune}), bs._context(column), \
            bs.autotune_log() as tuned:
        f(out, idxs["uniform"], vals)
        torch.cuda.synchronize()
        for d in bs.DISTS:
            ms, _, each = bs.time_call(lambda d=d: f(out, idxs[d], vals))
            res["ms"][d], res["graphs_ms"][d] = round(ms * 1e3, 2), [round(x * 1e3, 2)
                                                                    for x in each]
    res["tuned"] = tuned
    return res


def run_fresh(script: str, one: list) -> dict | None:
    """``script --one <one as json>`` in a fresh process with a fresh Inductor cache: the
    dict it prints after ``RESULT ``, or None (its output's tail printed)."""
    env = dict(os.environ)  # the multicast-off variables stay as they are
    env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="probe_ic_")
    env["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
    p = subprocess.run([sys.executable, script, "--one", json.dumps(one)], env=env,
                       capture_output=True, text=True, timeout=300)
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    if not line:
        print(p.stdout[-2000:], p.stderr[-3000:], flush=True)
        return None
    return json.loads(line[0][7:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="probe_compiles.json")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--groups", type=int, default=len(GROUPS), help="the first N groups")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        group, column, tune = json.loads(args.one)
        print("RESULT " + json.dumps(one(tuple(group), column, tune)), flush=True)
        return
    import datetime

    import torch
    import triton

    results = {"date": datetime.date.today().isoformat(),
               "device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "triton": triton.__version__, "commit": os.environ.get("GIT_COMMIT", ""),
               "command": "python " + " ".join(sys.argv), "runs": []}
    for group, columns, tunes in GROUPS[:args.groups]:
        for tune in tunes:
            for column in columns:
                for rep in range(args.reps):
                    r = run_fresh(__file__, [group, column, tune])
                    if r is None:
                        continue
                    r["rep"] = rep
                    results["runs"].append(r)
                    print(group, column, "tune" if tune else "no-tune", rep, r["ms"],
                          [(t["kernel"], (t["chose"] or "")[:60]) for t in r["tuned"]], flush=True)
                    with open(args.out, "w") as f:
                        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
