"""The narrow-row scatter kernels alone, at the plan they make and at forced plans.

    python benchmarks/scatter_narrow_sweep.py [--out-dir benchmarks/results]

For the grid's narrow cells (1-D values and rows of 4 and 16; 8 to 1M output rows;
uniform, skewed and hot indices; fp32 and bf16), median ms of one
``narrow_index_add`` in a CUDA graph: ``shipped`` (the plan made on the GPU; its copies and
hot rows are recorded), ``plain`` (one copy, no hot rows), ``hot`` (hot rows, one copy),
``no pdl`` (as shipped, ``_scatter`` not launched as a programmatic dependent of
``_init``), ``copies N`` (N copies, no hot rows), the shipped copies with ``pa N``
(copies where an address expects over N adds), ``no hot`` (no hot rows) and ``hot
first`` (every row the sample finds frequent is hot, whatever the copies could take),
and eager ``index_add`` for scale. The narrow constants of ``commrt.fx.scatter_rule``
(HOT_ADDS, HOT_SHARE, NARROW_PER_ADDRESS, NARROW_COPIES_PER_ROW) are read from this
table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(__file__))
from bench_scatter import DISTS, MAX_OUT, ROWS, VALUES, grid_indices, time_call  # noqa: E402

from commrt.bench import commit  # noqa: E402
from commrt.fx.scatter_narrow import narrow_index_add, state_numel  # noqa: E402
from commrt.fx.scatter_rule import partitions_for  # noqa: E402

WIDTHS = (0, 4, 16)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# name: (copies, arguments); None copies: as shipped
VARIANTS = {"shipped": (None, {}),
            "no pdl": (None, dict(pdl=False)),
            "plain": (1, dict(per_address=256, hot=0, min_copies=1)),
            "hot": (1, dict(per_address=256, hot=16, min_copies=1)),
            "copies 16": (16, dict(per_address=1, hot=0, min_copies=16)),
            "copies 128": (128, dict(per_address=1, hot=0, min_copies=128)),
            "pa 256": (None, dict(per_address=256)), "pa 1024": (None, dict(per_address=1024)),
            "no hot": (None, dict(hot=0)), "hot first": (None, dict(hot_adds=1))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default="benchmarks/results")
    args = ap.parse_args()
    dev = torch.device("cuda")
    memory = torch.cuda.get_device_properties(dev).total_memory
    rows_out = []
    for dt, dtype in DTYPES.items():
        for width in WIDTHS:
            for rows in ROWS:
                if rows * max(1, width) > MAX_OUT:
                    continue
                n = VALUES // max(1, width)
                g = torch.Generator(device=dev).manual_seed(rows + width)
                shape = (rows,) if width == 0 else (rows, width)
                base = torch.randn(shape, device=dev, generator=g).to(dtype)
                vals = torch.randn((n, *shape[1:]), device=dev, generator=g).to(dtype)
                shipped = partitions_for(rows, n, 4 * max(1, width), memory, narrow=True)
                for dist in DISTS:
                    idx = grid_indices(dist, rows, n, g)
                    ref = base.double().index_add(0, idx, vals.double())
                    row = {"dtype": dt, "width": width, "rows": rows, "dist": dist, "n": n,
                           "partitions": shipped, "ms": {}, "err": {}}
                    for name, (p, kw) in VARIANTS.items():
                        p = p or shipped
                        state = torch.empty(state_numel(), device=dev, dtype=torch.int32)

                        def call(p=p, kw=kw, state=state, idx=idx, base=base, vals=vals):
                            return narrow_index_add(base, idx, vals, p, state=state, **kw)
                        got = call()
                        row["err"][name] = float((got.double() - ref).norm() / ref.norm())
                        if name == "shipped":
                            p_run, _, nhot = state[:3].tolist()
                            row["plan"] = {"copies": p_run, "hot": nhot}
                        row["ms"][name] = time_call(call)[0]
                    row["ms"]["eager index_add"] = time_call(
                        lambda idx=idx, b=base, v=vals: b.index_add(0, idx, v))[0]
                    rows_out.append(row)
                    print(f"{dt} w{width or '1-D'} r{rows} {dist}: plan {row['plan']} "
                          + " ".join(f"{k} {t:.4f}" for k, t in row["ms"].items())
                          + f" err {max(row['err'].values()):.1e}", flush=True)
    name = torch.cuda.get_device_name().replace(" ", "_")
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "date": datetime.date.today().isoformat(),
            "commit": commit(),
            "command": "python " + " ".join(sys.argv), "variants": VARIANTS}
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"scatter_narrow_sweep_{name}")
    with open(path + ".json", "w") as f:
        json.dump({"meta": meta, "cells": rows_out}, f, indent=1)
    cols = [*VARIANTS, "eager index_add"]
    lines = [f"# Narrow-row scatter kernels: {meta['device']}", "",
             f"torch {meta['torch']}, Triton {meta['triton']}, {meta['date']}, commit "
             f"{meta['commit']}, `{meta['command']}`. Median ms of a call in a CUDA graph; "
             "plan: the copies and hot rows the shipped plan chose on the GPU.", "",
             "| dtype | width | rows | dist | plan (copies/hot) | " + " | ".join(cols) + " |",
             "|" + "---|" * 5 + "---:|" * len(cols)]
    for r in rows_out:
        lines.append(f"| {r['dtype']} | {r['width'] or '1-D'} | {r['rows']} | {r['dist']} | "
                     f"{r['plan']['copies']}/{r['plan']['hot']} | "
                     + " | ".join(f"{r['ms'][k]:.4f}" for k in cols) + " |")
    with open(path + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {path}.json", flush=True)


if __name__ == "__main__":
    main()
