"""Contended accumulating scatters: eager, compiled, Inductor's partitioned scatter, commrt.

    python benchmarks/bench_scatter.py [--out-dir benchmarks/results]

The anchor's setup (ISSUE 7): three index_add into three buffers, values float32
[1,000,000 x 100], int64 indices drawn uniformly from 0..k, output [501 x 100];
median ms of ``triton.testing.do_bench``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import sys

import torch
import triton

KS = (0, 1, 3, 7, 15, 31, 63, 127, 255, 500)


def three_scatters(o1, o2, o3, idx, v1, v2, v3):
    return o1.index_add(0, idx, v1), o2.index_add(0, idx, v2), o3.index_add(0, idx, v3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=100)
    ap.add_argument("--rows", type=int, default=501)
    ap.add_argument("--out-dir", default="benchmarks/results")
    args = ap.parse_args()
    import torch._inductor.config as ic

    import commrt.fx

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    vals = [torch.randn(args.n, args.d, device=dev, generator=g) for _ in range(3)]
    outs = [torch.zeros(args.rows, args.d, device=dev) for _ in range(3)]
    variants = {
        "eager": lambda: three_scatters,
        "compiled": lambda: torch.compile(three_scatters),
        "inductor partitioned": lambda: torch.compile(three_scatters),
        "commrt": lambda: torch.compile(three_scatters),
    }
    idxs = {k: torch.randint(0, k + 1, (args.n,), device=dev, generator=g) for k in KS}
    refs = {k: three_scatters(*outs, idxs[k], *vals) for k in KS}
    rows = {k: {"k": k, "ms": {}, "max_rel_err": {}} for k in KS}
    for name, make in variants.items():  # one compile per variant: shapes never change
        torch._dynamo.reset()
        patches = {"fx_graph_cache": False}
        if name == "inductor partitioned":
            patches["partitioned_scatter_enabled"] = True
        with ic.patch(patches), (commrt.fx.installed(fuse_rmsnorm=False, overlap=False,
                                                     partitioned_scatter=True)
                                 if name == "commrt" else contextlib.nullcontext()):
            fn = make()
            for k in KS:
                got = fn(*outs, idxs[k], *vals)
                rows[k]["max_rel_err"][name] = max(float((a - b).norm() / b.norm())
                                                   for a, b in zip(got, refs[k], strict=True))
                rows[k]["ms"][name] = triton.testing.do_bench(
                    lambda fn=fn, idx=idxs[k]: fn(*outs, idx, *vals), return_mode="median")
        if name == "commrt":
            report = [r.__dict__ for n, r in commrt.fx.last_reports if n == "partitioned_scatter"]
            print(f"commrt pass: {report}", flush=True)
    rows = [rows[k] for k in KS]
    for row in rows:
        best_compiled = min(row["ms"]["compiled"], row["ms"]["inductor partitioned"])
        row["commrt_over_best_compiled"] = row["ms"]["commrt"] / best_compiled
        print(f"k={row['k']:>3} " + "  ".join(f"{n} {v:.3f}" for n, v in row["ms"].items())
              + f"  commrt/best {row['commrt_over_best_compiled']:.2f}  max err "
              + f"{max(row['max_rel_err'].values()):.1e}", flush=True)
        assert max(row["max_rel_err"].values()) < 1e-4, row
    name = torch.cuda.get_device_name().replace(" ", "_")
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"scatter_{name}.json")
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "date": datetime.date.today().isoformat(),
            "command": "python " + " ".join(sys.argv), **vars(args)}
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": rows, "commrt_pass": report}, f, indent=1)
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
