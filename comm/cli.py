"""``commrt info | bench | tune``.

Under torchrun each process runs the command itself; otherwise the command spawns one
process per local GPU (NCCL), or two gloo processes on a machine without GPUs.

A user error (a bad flag, ``COMMRT_*`` value or table file), in this process or in a
spawned one, ends the command with one ``commrt: error: ...`` line and exit status 2;
a traceback means a bug in commrt.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import socket
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from commrt import config as _config
from commrt.dispatch import table as _table
from commrt.errors import CommrtError

USAGE_ERROR = 2  # exit status of a user error, as argparse's own


class CliError(CommrtError):
    """A command this machine cannot run as asked (a flag, a missing GPU, a file)."""


class _Parser(argparse.ArgumentParser):
    """argparse, its subcommands' errors also as ``commrt: error: ...`` (after the usage)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(USAGE_ERROR, f"commrt: error: {message}\n")


def _size(text: str) -> int:
    try:
        return _config.parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def _modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    if not modes or set(modes) - {"graph", "eager"}:
        raise argparse.ArgumentTypeError(f"{text!r}: expected graph, eager or graph,eager")
    return modes


def _count(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of processes >= 1")
    return int(text)


# ``--only`` sections measured on their own, the rest of the table in use kept
_KEPT = ("fused", "all_gather", "reduce_scatter")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="commrt", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="device, group, config, and the decision for a range of sizes")
    b = sub.add_parser("bench", help="collective latency and bandwidth per size (nccl-tests-like)")
    b.add_argument("--op", choices=["all_reduce", "all_gather", "reduce_scatter"],
                   default="all_reduce",
                   help="the collective (all_gather / reduce_scatter: sizes are the output's)")
    b.add_argument("--min-bytes", type=_size, default="4KiB")
    b.add_argument("--max-bytes", type=_size, default=None,
                   help="default 256MiB on GPUs, 4MiB on CPU")
    b.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default=None,
                   help="default bf16 on GPUs, fp32 on CPU")
    b.add_argument("--modes", type=_modes, default=None,
                   help="graph,eager (GPU default); eager on CPU")
    b.add_argument("--all", action="store_true",
                   help="every variant (ours, PyTorch's symm ops, NCCL); default auto and nccl")
    b.add_argument("--out", default=None, help="write JSON (and a Markdown table) here")
    t = sub.add_parser("tune", help="measure every algorithm and write a tuning table")
    t.add_argument("--min-bytes", type=_size, default="4KiB")
    t.add_argument("--max-bytes", type=_size, default="256MiB")
    t.add_argument("--out", default=None, help="table path (default <generation>_ws<N>.json)")
    t.add_argument("--raw", default=None, help="also write every measurement as JSON here")
    t.add_argument("--plot", default=None, help="write a log-log PNG of latency per algorithm")
    t.add_argument("--only", choices=["all_reduce", *_KEPT], default=None,
                   help="all_reduce: measure only that section (the table then has no other); "
                        "fused (the all-reduce + RMSNorm), all_gather, reduce_scatter: "
                        "re-measure only that section, keeping the others of the table in use "
                        "(COMMRT_TABLE or shipped)")
    for q in (b, t):
        q.add_argument("--nproc", type=_count, default=None, help="processes to spawn")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run ``commrt <command>``; a user error exits with one ``commrt: error:`` line."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        _run(args)
    except CommrtError as exc:
        parser.exit(USAGE_ERROR, f"commrt: error: {exc}\n")
    return 0


def _run(args) -> None:
    cfg = _config.get()  # a bad COMMRT_* value fails here, before any process starts
    if cfg.table:
        _table.load_override(cfg.table)  # and so does a table file that cannot serve
    tr = _config.torchrun_env()
    if tr is not None:
        _worker(tr["rank"], tr["world_size"], tr["local_rank"], args, None)
        return
    nproc = getattr(args, "nproc", None) or (torch.cuda.device_count()
                                             if torch.cuda.is_available() else 2)
    _spawn(nproc, args)


def _spawn(nproc: int, args) -> None:
    """Run the command in ``nproc`` new processes; a user error in one is raised here."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    level = spawn_log.level
    spawn_log.setLevel(logging.ERROR)  # not "terminating process ...": we say why
    with tempfile.TemporaryDirectory(prefix="commrt-") as reports:
        try:
            torch.multiprocessing.spawn(_spawned, args=(nproc, args, port, reports),
                                        nprocs=nproc, join=True)
        except (torch.multiprocessing.ProcessRaisedException,
                torch.multiprocessing.ProcessExitedException):
            said = sorted(Path(reports).iterdir())  # rank 0's first
            if not said:
                raise
            raise CommrtError(said[0].read_text()) from None
        finally:
            spawn_log.setLevel(level)


def _spawned(rank: int, world: int, args, port: int, reports: str) -> None:
    """A spawned rank: a user error goes back to the parent as its message, not raised
    (the parent prints it once); the process exits with ``USAGE_ERROR``."""
    try:
        _worker(rank, world, None, args, port)
    except CommrtError as exc:
        Path(reports, f"rank{rank:05d}").write_text(str(exc))
        sys.exit(USAGE_ERROR)
    # Done, and the process group is destroyed: leave without the interpreter's teardown,
    # where a gloo rank of torch 2.15 was once seen to abort ("terminate called without an
    # active exception") after its work had finished.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _worker(rank: int, world: int, local_rank: int | None, args, port: int | None) -> None:
    if port is not None:  # spawned by us, not torchrun
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(world))
        local_rank = rank
    use_cuda = torch.cuda.is_available() and torch.cuda.device_count() > local_rank
    if use_cuda:
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    else:
        dist.init_process_group("gloo")
    import commrt

    try:
        comm = commrt.init()
        {"info": _info, "bench": _bench, "tune": _tune}[args.cmd](comm, args)
    except BaseException:  # no barrier: the other ranks may not get this far
        dist.destroy_process_group()
        raise
    dist.barrier()
    dist.destroy_process_group()


def _say(comm, text: str) -> None:
    if comm.rank == 0:
        print(text, flush=True)


def _info(comm, args) -> None:
    from commrt.dispatch.dispatcher import BY_KIND, Query, why_not

    f = comm.facts
    lines = [f"commrt {commrt_version()}  torch {torch.__version__}",
             f"group: {comm.group_name}  world size {comm.world_size}  backend {comm.backend}  "
             f"device {comm.device}",
             "profile: " + json.dumps(dict(comm.profile.__dict__)),
             "config: " + json.dumps(comm.config.describe()),
             ("tuning table: " + f.table.source + " (" + json.dumps(dict(f.table.provenance)) + ")")
             if f.table else f"tuning table: none for {comm.profile.generation}/ws"
             f"{comm.world_size}: untuned, conservative rule",
             f"custom kernels: {'available' if not f.custom_blocked else f.custom_blocked}",
             "algorithms in dispatch order (bf16, 64 KiB):"]
    for op, algos in BY_KIND.items():
        if op == "all_reduce_residual_rmsnorm":
            continue
        q = Query(65536, torch.bfloat16, device_type=comm.device.type, kind=op)
        lines.append(f" {op}:")
        for name, _ in algos:
            why = why_not(name, q, f)
            lines.append(f"  {name:<14} {'enabled' if why is None else 'off: ' + why}")
    dtype = torch.bfloat16 if comm.device.type == "cuda" else torch.float32
    lines.append(f"decisions ({str(dtype).replace('torch.', '')}):")
    for mode in ("graph", "eager"):
        for nbytes in [1 << k for k in range(10, 29, 2)]:
            d = comm.dispatcher.decide(nbytes, dtype, "sum", mode, comm.device.type)
            lines.append(f"  {mode:<5} {nbytes:>10} B  {d}")
    for op in ("all_gather", "reduce_scatter"):
        lines.append(f"{op} decisions (output bytes, {str(dtype).replace('torch.', '')}):")
        for mode in ("graph", "eager"):
            for nbytes in [1 << k for k in range(10, 29, 3)]:
                d = comm.dispatcher.decide(nbytes, dtype, "sum", mode, comm.device.type, op)
                lines.append(f"  {mode:<5} {nbytes:>10} B  {d}")
    lines.append("fused all-reduce + residual + RMSNorm decisions (hidden 4096):")
    for mode in ("graph", "eager"):
        for rows in (1, 8, 32, 128, 512, 2048):
            nbytes = rows * 4096 * torch.empty((), dtype=dtype).element_size()
            d = comm.dispatcher.decide(nbytes, dtype, "sum", mode, comm.device.type,
                                       "all_reduce_residual_rmsnorm", 4096)
            lines.append(f"  {mode:<5} {rows:>5} rows  {d}")
    _say(comm, "\n".join(lines))


def commrt_version() -> str:
    from commrt import __version__

    return __version__


def _bench(comm, args) -> None:
    from commrt import bench

    on_gpu = comm.device.type == "cuda"
    dtype = bench.DTYPES[args.dtype or ("bf16" if on_gpu else "fp32")]
    hi = args.max_bytes or ((256 if on_gpu else 4) << 20)
    modes = args.modes or (["graph", "eager"] if on_gpu else ["eager"])
    if not on_gpu and "graph" in modes:
        raise CliError("--modes graph needs CUDA GPUs; use --modes eager here")
    sizes = bench.sizes_between(args.min_bytes, hi)
    if args.op != "all_reduce":
        show = bench.progress_printer(comm.rank, len(sizes) * len(modes))
        rows = bench.run_collective_bench(comm, args.op, sizes, dtype, modes,
                                          bench.collective_variants(comm, args.op, args.all),
                                          show)
        _say(comm, bench.format_table(rows, comm.world_size, args.op))
        _write_bench(comm, args, rows)
        return
    variants = bench.standard_variants(comm) if args.all else [
        bench.Variant(bench.process_group_label(comm), "nccl"), bench.Variant("auto", "auto")]
    rounds = 3
    show = bench.progress_printer(comm.rank, len(sizes) * len(modes) * rounds)
    rows = bench.run_bench(comm, sizes, dtype, modes, variants, show, rounds=rounds)
    _say(comm, bench.format_table(rows, comm.world_size))
    _write_bench(comm, args, rows)


def _write_bench(comm, args, rows: list) -> None:
    from commrt import bench

    if args.out and comm.rank == 0:
        with _writing("--out", args.out):
            bench.write_results(args.out, bench.meta(comm, "commrt " + " ".join(sys.argv[1:])),
                                rows, args.op)


@contextlib.contextmanager
def _writing(flag: str, path: str):
    """A file the user named that cannot be written: one line naming the flag and file."""
    try:
        yield
    except OSError as exc:
        raise CliError(f"{flag} {path}: cannot write it ({exc.strerror or exc})") from None


def _tune(comm, args) -> None:
    from commrt import bench

    if comm.device.type != "cuda":
        raise CliError("commrt tune needs CUDA GPUs (there is nothing to tune on gloo)")
    sizes = bench.sizes_between(args.min_bytes, args.max_bytes)
    only = args.only
    todo = {only} if only else {"all_reduce", *_KEPT}
    # 1..2048 rows of hidden 4096
    fused_rows = [1 << k for k in range(0, 12)] if "fused" in todo else []
    base = _base_table(comm) if only in _KEPT else None
    collectives = [op for op in bench.COLLECTIVES if op in todo]
    show = bench.progress_printer(comm.rank, 2 * len(sizes) * (("all_reduce" in todo)
                                                               + len(collectives))
                                  + 2 * len(fused_rows))
    raw, excluded, sections = [], [], {}
    if "all_reduce" in todo:
        sections["all_reduce"], raw, excluded = bench.tune(comm, sizes, torch.bfloat16, show)
    if fused_rows:
        sections[bench.FUSED_KIND], fused_raw = bench.tune_fused(comm, fused_rows, 4096,
                                                                 torch.bfloat16, show)
        raw += fused_raw
    for op in collectives:
        sections[op], op_raw = bench.tune_collective(comm, op, sizes, torch.bfloat16, show)
        raw += op_raw
    for line in excluded:
        _say(comm, f"commrt tune: left out (wrong results): {line}")
    m = bench.meta(comm, "commrt " + " ".join(sys.argv[1:]))
    if base is not None:  # the other sections and their provenance stay as measured
        table = dict(base)
        table["ops"] = {**base["ops"], **sections}
        extra = {"rows_of": 4096} if only == "fused" else {"sized_by": "output bytes"}
        table["provenance"] = {**base["provenance"], f"{only}_section": {**m, **extra}}
    else:
        table = {"schema": _table.SCHEMA, "generation": comm.profile.generation,
                 "world_size": comm.world_size,
                 "provenance": {**m, "measured_by": "commrt tune", "dtype": "bf16",
                                "excluded": excluded,
                                "note": "bf16 timings rank algorithms for every dtype by bytes; "
                                        "all_gather / reduce_scatter rows by output bytes"},
                 "ops": sections}
    _table.parse(table, "<tuner output>")  # never write a table the loader would refuse
    if comm.rank != 0:
        return
    out = args.out or _table.shipped_name(comm.profile.generation, comm.world_size)
    with _writing("--out", out), open(out, "w") as f:
        json.dump(table, f, indent=1)
    if args.raw:
        with _writing("--raw", args.raw), open(args.raw, "w") as f:
            json.dump({"meta": m, "measurements": raw}, f, indent=1)
    if args.plot:
        with _writing("--plot", args.plot):
            plot_table(table, args.plot)
    print(f"wrote {out}", flush=True)


def _base_table(comm) -> dict:
    """The JSON of the table this group uses now (``--only`` keeps part of it)."""
    import importlib.resources

    t = comm.facts.table
    if t is None:
        raise CliError("--only: no table to keep the other sections of (set "
                       "COMMRT_TABLE, or run without --only)")
    if t.source.startswith("commrt/tuning_tables/"):
        res = importlib.resources.files("commrt.tuning_tables").joinpath(
            _table.shipped_name(t.generation, t.world_size))
        return json.loads(res.read_text())
    with open(t.source) as f:
        return json.load(f)


def plot_table(table: dict, path: str) -> None:
    """Log-log latency against size per algorithm, the chosen one marked, per mode."""
    try:
        import matplotlib
    except ImportError:
        raise CliError("--plot needs matplotlib: pip install 'commrt[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(table["ops"]["all_reduce"])
    fig, axes = plt.subplots(1, len(modes), figsize=(7 * len(modes), 5), squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        rows = table["ops"]["all_reduce"][mode]
        algos = sorted({c["algorithm"] for r in rows for c in r["ranking"]})
        for a in algos:
            pts = [(r["max_bytes"], c["us"]) for r in rows for c in r["ranking"]
                   if c["algorithm"] == a]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=a)
        best = [(r["max_bytes"], r["ranking"][0]["us"]) for r in rows]
        ax.scatter([b[0] for b in best], [b[1] for b in best], s=80, facecolors="none",
                   edgecolors="black", label="chosen", zorder=5)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message bytes")
        ax.set_ylabel("µs per all-reduce")
        ax.set_title(f"{table['generation']} ws{table['world_size']} {mode}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
