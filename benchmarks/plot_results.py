"""Plot all-reduce results: latency against message size, one line per variant.

    python benchmarks/plot_results.py [benchmarks/results/allreduce_sm90-h200_ws2.json ...]

Reads the JSON that ``benchmarks/bench_allreduce.py`` writes (``commrt.bench.write_results``:
``meta`` plus one row per size and mode, ``row["us"][variant]`` the median µs) and writes
the PNG beside it (``allreduce_<generation>_ws<N>.png``): CUDA-graph mode in the first
panel, eager mode in a second where the file has it; both axes logarithmic. Without
arguments it plots every ``allreduce_*_ws*.json`` in ``benchmarks/results``. Needs
matplotlib (``pip install -e '.[plot]'``).
"""

from __future__ import annotations

import argparse
import glob
import json
import os

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

# Variant label -> (legend, style). Ours on an ordinary tensor (copies counted) are solid,
# the peers dashed; `auto` is drawn thick on top. Labels absent here are skipped
# (`@ws` variants of ours and auto: a `comm.empty` tensor, a different call).
STYLE = {
    "nccl": ("NCCL", dict(color="black", ls="--", marker="s")),
    "torch_one_shot@ws": ("PyTorch one_shot (in place on its buffer)",
                          dict(color="tab:gray", ls="--", marker="v")),
    "torch_two_shot@ws": ("PyTorch two_shot (in place on its buffer)",
                          dict(color="tab:brown", ls="--", marker="^")),
    "nccl_symm@ws": ("NCCL symmetric kernel (in place on its buffer)",
                     dict(color="tab:olive", ls="--", marker="D")),
    "one_shot_push": ("commrt one_shot_push", dict(color="tab:blue", marker=".")),
    "one_shot": ("commrt one_shot", dict(color="tab:orange", marker=".")),
    "two_shot": ("commrt two_shot", dict(color="tab:green", marker=".")),
    "two_shot_push": ("commrt two_shot_push", dict(color="tab:purple", marker=".")),
    "auto": ("commrt auto", dict(color="tab:red", lw=3, alpha=0.6, marker="o")),
}


def size_label(nbytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def series(rows: list, mode: str) -> dict[str, tuple[list[int], list[float]]]:
    """variant -> (sizes, µs) for one mode, in ascending size, variants in STYLE order."""
    out: dict[str, tuple[list[int], list[float]]] = {}
    for label in STYLE:
        pts = sorted((r["bytes"], r["us"][label]) for r in rows
                     if r["mode"] == mode and label in r["us"])
        if pts:
            out[label] = ([b for b, _ in pts], [us for _, us in pts])
    return out


def plot(path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(path) as f:
        data = json.load(f)
    meta, rows = data["meta"], data["results"]
    modes = [m for m in ("graph", "eager") if any(r["mode"] == m for r in rows)]
    fig, axes = plt.subplots(1, len(modes), figsize=(7.5 * len(modes), 5.8), squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        for label, (x, y) in series(rows, mode).items():
            name, style = STYLE[label]
            ax.plot(x, y, label=name, ms=4, **style)
        sizes = sorted({r["bytes"] for r in rows if r["mode"] == mode})
        ticks = sizes[::2]
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ticks, [size_label(b) for b in ticks], rotation=45)
        ax.minorticks_off()
        ax.set_xlabel(f"message size ({rows[0]['dtype']})")
        ax.set_ylabel("µs per all-reduce (median, slower rank)")
        what = "CUDA graph, 20 ops a graph" if mode == "graph" else "host time included"
        ax.set_title(f"{mode} mode ({what})")
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"all-reduce on {meta['world_size']} x {meta['device']} "
                 f"(torch {meta['torch']}, NCCL {meta['nccl']}, {meta['date']}, "
                 f"commit {meta.get('commit', 'unknown')})", fontsize=10)
    fig.tight_layout()
    out = path.rsplit(".", 1)[0] + ".png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*",
                    help="allreduce result JSON files (default: all in benchmarks/results)")
    args = ap.parse_args()
    files = args.files or sorted(glob.glob(os.path.join(RESULTS, "allreduce_*_ws*.json")))
    for path in files:
        print(f"wrote {plot(path)}")


if __name__ == "__main__":
    main()
