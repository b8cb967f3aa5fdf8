"""All-reduce, all-gather and reduce-scatter benchmark and tuner: every eligible variant,
checked against the process group's result, then timed in CUDA-graph and eager mode (see
``commrt.timing``). The all-gather and the reduce-scatter (``run_collective_bench``,
``tune_collective``) are sized by their output's bytes, as the tables key them.

Variants are labelled ``<algorithm>`` (called as a user calls commrt: on an ordinary
tensor, any copy into the workspace counted), ``<algorithm>@ws`` (on a ``comm.empty``
tensor: no copy in), ``torch_<op>@ws`` (PyTorch's op in place on its symmetric buffer,
as BASELINE.md measures it) and ``auto`` (what the dispatcher picks); the process group's
own all-reduce (algorithm ``nccl``) is labelled after its backend: ``gloo``, ``nccl`` or
``rccl`` (``process_group_label``). ``nccl_symm`` is NCCL's symmetric kernel, the process
group's all-reduce on the NCCL-registered workspace (only where PyTorch's symmetric-memory
backend is NCCL: ``COMMRT_SYMM_BACKEND=nccl``).

The bench calls a forced algorithm as a user forces one (``COMMRT_ALGO``): through
``comm.all_reduce``, the same host path as ``auto``, so ``auto / best`` in eager mode
compares choices, not call paths. The tuner, which only ranks our variants against each
other, calls ``run_algorithm`` with each launch config.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable

import torch
import torch.distributed as dist

from commrt import __version__
from commrt.communicator import Communicator
from commrt.dispatch.dispatcher import ALGORITHMS, BY_KIND, Dispatcher, Query, why_not
from commrt.dispatch.profile import has_pdl
from commrt.timing import agree_median, busbw_factor, time_eager, time_graph, time_pair

OURS = ("one_shot_push", "one_shot", "two_shot", "two_shot_push")
# Launch configs the tuner tries per algorithm (block = elements per tile).
# pdl=1 (programmatic dependent launch) is tried only where the GPU has it (sm90+).
# two_shot_push: SM multiples and powers of two of programs (the latter split the
# power-of-two tile counts of power-of-two messages evenly).
CONFIG_GRID = {
    "one_shot_push": [dict(block=b, warps=w, blocks=g, pdl=p)
                      for b, w in ((256, 2), (512, 4), (1024, 4), (2048, 8))
                      for g in (8, 32, 132) for p in (0, 1)],
    "one_shot": [dict(block=b, warps=w, blocks=g) for b, w in ((2048, 8), (4096, 16))
                 for g in (32, 132, 264)],
    "two_shot": [dict(block=b, warps=w, blocks=g) for b, w in ((2048, 8), (4096, 16))
                 for g in (66, 132, 264, 528)],
    "two_shot_push": [dict(block=b, warps=w, blocks=g, round_tiles=r, pdl=p)
                      for b, w in ((2048, 8), (4096, 8), (4096, 16), (8192, 16))
                      for g in (132, 264, 512, 528, 1024, 1056)
                      for r, p in ((0, 0), (2, 0), (0, 1))],
    "ag_push": [dict(block=b, warps=w, blocks=g) for b, w in ((512, 4), (1024, 4), (2048, 8))
                for g in (8, 32, 132)],
    "ag_bw": [dict(block=b, warps=w, blocks=g) for b, w in ((2048, 8), (4096, 16))
              for g in (32, 66, 132, 264)],
    "rs_pull": [dict(block=b, warps=w, blocks=g) for b, w in ((2048, 8), (4096, 16))
                for g in (32, 64, 132, 264)],
    "rs_push": [dict(block=b, warps=w, blocks=g, round_tiles=r)
                for b, w in ((2048, 8), (4096, 16)) for g in (66, 132, 264) for r in (0, 2)],
}
COLLECTIVES = ("all_gather", "reduce_scatter")


def _same_as_one_round(comm: Communicator, name: str, cfg: dict | None, nbytes: int,
                       dtype) -> bool:
    """A two_shot_push config whose rounds hold all of a program's tiles at this size: it
    runs exactly as its one-round twin, so the tuner skips it."""
    if name != "two_shot_push" or not cfg or not cfg.get("round_tiles"):
        return False
    from commrt.symm_mem.two_shot_push import piece_elems, program_tiles

    elt = torch.empty((), dtype=dtype).element_size()
    ws = comm.workspace
    n = min(nbytes // elt, piece_elems(ws.data_bytes // elt, ws.world))
    return cfg["round_tiles"] >= program_tiles(n, ws.world, **cfg)


# Eager timings are host-bound and drift with the host's load: the tuner times all
# algorithms of a size in this many interleaved rounds and takes each one's fastest.
EAGER_ROUNDS = 5
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def sizes_between(lo: int, hi: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 2
    return out


@dataclasses.dataclass
class Variant:
    label: str
    algorithm: str  # dispatcher name, or "auto"
    on_workspace: bool = False
    torch_op: str = ""  # call PyTorch's op directly on the workspace tensor
    config: dict | None = None
    as_user: bool = False  # through comm.all_reduce with the algorithm forced (COMMRT_ALGO)


def process_group_label(comm: Communicator) -> str:
    """The process group's column: its backend for the bench's device (``gloo`` on CPU,
    ``nccl`` on CUDA, ``rccl`` on ROCm, whose torch backend is also named nccl)."""
    per_device = dict(p.split(":", 1) for p in comm.backend.split(",") if ":" in p)
    name = per_device.get(comm.device.type, comm.backend)
    return "rccl" if name == "nccl" and torch.version.hip else name


def standard_variants(comm: Communicator, include_ws: bool = True) -> list[Variant]:
    out = [Variant(process_group_label(comm), "nccl")]
    out += [Variant(a, a, as_user=True) for a in OURS]
    out += [Variant(a, a, as_user=True) for a in ("symm_one_shot", "symm_two_shot", "nccl_symm")]
    if include_ws:
        out += [Variant(f"{a}@ws", a, on_workspace=True, as_user=True)
                for a in ("one_shot", "two_shot", "two_shot_push", "nccl_symm")]
        out += [Variant("torch_one_shot@ws", "symm_one_shot", True, "one_shot_all_reduce"),
                Variant("torch_two_shot@ws", "symm_two_shot", True, "two_shot_all_reduce_")]
    out.append(Variant("auto", "auto"))
    if include_ws:
        out.append(Variant("auto@ws", "auto", on_workspace=True))
    return out


def _eligible(comm: Communicator, v: Variant, nbytes: int, dtype, mode: str) -> bool:
    if v.on_workspace and (comm.workspace is None or nbytes > comm.workspace.data_bytes):
        return False
    if v.algorithm == "auto":
        return True
    q = Query(nbytes, dtype, "sum", mode, comm.device.type)
    return why_not(v.algorithm, q, comm.facts) is None


def _make_call(comm: Communicator, v: Variant, x: torch.Tensor) -> Callable[[], None]:
    if v.torch_op:
        op = getattr(torch.ops.symm_mem, v.torch_op)
        return lambda: op(x, "sum", comm.group_name)
    if v.algorithm == "auto":
        return lambda: comm.all_reduce(x)
    if v.algorithm == "nccl":
        return lambda: dist.all_reduce(x, group=comm.group)
    if v.as_user or v.config:
        # the tuner's configs run on the user's path too: an eager call is timed with the
        # host cost a user pays (the replayed launch), not the bench's own way in
        view = forced_view(comm, v.algorithm, config=v.config or None)
        return lambda: view.all_reduce(x)
    return lambda: comm.run_algorithm(v.algorithm, x, v.config)


class _Pinned(Dispatcher):
    """A forced dispatcher whose every decision carries one launch config."""

    def __init__(self, facts, config: dict):
        super().__init__(facts)
        self._config = dict(config)
        self._pinned: dict = {}

    def decide(self, *args, **kwargs):
        key = (args, tuple(kwargs.items()))
        d = self._pinned.get(key)
        if d is None:
            d = self._pinned[key] = dataclasses.replace(super().decide(*args, **kwargs),
                                                        config=dict(self._config))
        return d


def forced_view(comm: Communicator, algorithm: str, op: str = "all_reduce",
                config: dict | None = None) -> Communicator:
    """``comm`` as a user who sets ``COMMRT_ALGO=op:algorithm`` sees it: the same group,
    workspace and state, a dispatcher that forces ``algorithm`` for ``op`` with the table's
    launch config for it, or with ``config`` (the tuner's)."""
    view = copy.copy(comm)
    view.config = dataclasses.replace(comm.config, forced=((op, algorithm),))
    view.facts = dataclasses.replace(comm.facts, config=view.config)
    view.dispatcher = Dispatcher(view.facts) if config is None else _Pinned(view.facts, config)
    return view


_SHIFT_BYTES = 128  # a round's input starts this much further into its allocation


def _input(comm: Communicator, v: Variant, numel: int, dtype, seed: int,
           shift: int = 0) -> torch.Tensor:
    """This rank's input for ``seed``: drawn on the device (a CPU draw of a 256 MiB input
    takes about a second, and the tuner draws a few per variant). An ordinary tensor
    starts ``shift * _SHIFT_BYTES`` into its allocation (16-byte aligned)."""
    g = torch.Generator(device=comm.device).manual_seed(seed * 1009 + comm.rank)
    src = torch.randn(numel, generator=g, dtype=torch.float32, device=comm.device)
    pad = shift * _SHIFT_BYTES // torch.empty((), dtype=dtype).element_size()
    x = comm.empty(numel, dtype) if v.on_workspace else \
        torch.empty(numel + pad, dtype=dtype, device=comm.device)[pad:]
    x.copy_(src)
    return x


def sum_bound(abs_sum: torch.Tensor, dtype, terms: int) -> torch.Tensor:
    """How far any order of summing ``terms`` values of ``dtype`` may land from the exact
    sum, per element, given the sum of their magnitudes: a ring (NCCL) rounds every partial
    sum, our kernels round once, and both stay within ``terms * eps * abs_sum``."""
    return terms * torch.finfo(dtype).eps * abs_sum + torch.finfo(dtype).tiny


_REFERENCE: dict = {}  # the last (group, numel, dtype, seed) -> (float64 sum, bound)


def _reference(comm: Communicator, numel: int, dtype, seed: int):
    """The float64 sum of every rank's input and its rounding bound; kept for the next
    variant of the same size (only the last one: 2 GiB at 256 MiB of bf16)."""
    key = (comm.group_name, numel, dtype, seed)
    if key not in _REFERENCE:
        _REFERENCE.clear()
        src = _input(comm, Variant("nccl", "nccl"), numel, dtype, seed)
        ref, mag = src.double(), src.double().abs()
        del src
        dist.all_reduce(ref, group=comm.group)
        dist.all_reduce(mag, group=comm.group)
        _REFERENCE[key] = (ref, sum_bound(mag, dtype, comm.world_size))
    return _REFERENCE[key]


def _wrong(comm: Communicator, v: Variant, numel: int, dtype, seed: int) -> int:
    """Elements where one call of ``v`` is off the float64 sum by more than rounding allows
    (``sum_bound``); NaN counts as wrong."""
    ref, bound = _reference(comm, numel, dtype, seed)
    x = _input(comm, v, numel, dtype, seed)
    res = _make_call(comm, v, x)()
    got = res if isinstance(res, torch.Tensor) and v.torch_op == "one_shot_all_reduce" else x
    ok = (got.double() - ref).abs() <= bound
    n = (~ok).sum().reshape(1)
    dist.all_reduce(n, group=comm.group)
    return int(n.item())


def _time(comm: Communicator, fn: Callable[[], object], mode: str) -> float:
    """Median µs of ``fn`` in ``mode``, the slower rank's."""
    dist.barrier(comm.group)
    us = time_graph(fn, comm.device, group=comm.group) if mode == "graph" else \
        time_eager(fn, comm.device, group=comm.group)
    return agree_median(us, comm.group, comm.device)


def measure(comm: Communicator, v: Variant, nbytes: int, dtype, mode: str,
            seed: int = 0, repeats: int = 1) -> tuple[float, int]:
    """(median µs agreed across ranks, wrong elements) for one variant at one size;
    with ``repeats`` the median of that many timings."""
    numel = nbytes // torch.empty((), dtype=dtype).element_size()
    wrong = _wrong(comm, v, numel, dtype, seed)
    fn = _make_call(comm, v, _input(comm, v, numel, dtype, seed))
    return statistics.median(_time(comm, fn, mode) for _ in range(repeats)), wrong


def _round_order(labels: list[str], r: int) -> list[str]:
    """Round ``r``'s order of the variants: as given in round 0, then a fixed shuffle per
    round (the same on every rank), so that no variant always follows the same one."""
    if r:
        random.Random(r).shuffle(labels)
    return labels


def run_bench(comm: Communicator, sizes: Iterable[int], dtype, modes: Iterable[str],
              variants: list[Variant], progress: Callable[[str], None] | None = None,
              rounds: int = 3, pairs: int = 100) -> list:
    """Every eligible variant per size and mode, checked, then timed in ``rounds`` rounds
    (each round times the variants once, in ``_round_order``, on fresh inputs: an
    ordinary tensor at another offset into its allocation, so that no column keeps one
    placement). Graph mode: a size's rounds back to back, the median over rounds. Eager
    mode: rounds over all sizes, so that a phase of slow host lasting seconds falls on one
    round of a few sizes rather than on every round of them, and the fastest round
    (host-bound bursts only ever get slower from outside interference). On 2 x H200
    (``benchmarks/results``) ``auto`` and the algorithm it runs, timed as two columns,
    differed by up to 77% in eager mode with a size's rounds back to back and by up to 7%
    with rounds over all sizes, and by up to 7% either way in graph mode; with replays
    back to back (``time_graph``), by at most 0.5% in graph mode, and still by up to 8% in
    eager mode.

    Then, where ``auto`` is not the fastest variant callable on an ordinary tensor, the
    two are timed side by side (``time_pair``, ``pairs`` alternating bursts): the row's
    ``paired`` entry holds that variant and the median of auto's time over its."""
    rows = []
    for mode in modes:
        todo = []
        for nbytes in sizes:
            numel = nbytes // torch.empty((), dtype=dtype).element_size()
            row = {"bytes": nbytes, "count": numel, "dtype": str(dtype).replace("torch.", ""),
                   "mode": mode, "us": {}, "wrong": {}, "rounds": rounds}
            chosen = {}
            for v in variants:
                if not _eligible(comm, v, nbytes, dtype, mode):
                    continue
                row["wrong"][v.label] = _wrong(comm, v, numel, dtype, 0)
                chosen[v.label] = v
            todo.append((row, chosen, {label: [] for label in chosen}))
        _REFERENCE.clear()  # not held while timing
        steps = [(r, i) for i in range(len(todo)) for r in range(rounds)] if mode == "graph" \
            else [(r, i) for r in range(rounds) for i in range(len(todo))]
        for r, i in steps:
            row, chosen, samples = todo[i]
            for label in _round_order(list(chosen), r):
                x = _input(comm, chosen[label], row["count"], dtype, 0, shift=r)
                samples[label].append(_time(comm, _make_call(comm, chosen[label], x), mode))
            if progress:
                progress(f"{mode} {row['bytes']} B, round {r + 1} of {rounds}")
        pick = statistics.median if mode == "graph" else min
        for row, chosen, samples in todo:
            row["us"] = {label: round(pick(t), 3) for label, t in samples.items()}
            row["auto_algorithm"] = comm.dispatcher.decide(row["bytes"], dtype, "sum", mode,
                                                           comm.device.type).algorithm
            row["paired"] = _paired(comm, row, chosen, dtype, mode, pairs, rounds)
            rows.append(row)
    return rows


def _paired(comm: Communicator, row: dict, chosen: dict, dtype, mode: str, pairs: int,
            shift: int) -> dict | None:
    """``auto`` timed beside the fastest other variant callable on an ordinary tensor,
    or None where ``auto`` is that fastest (or absent). Bursts of about 2 ms, at most
    100 calls."""
    plain = {k: v for k, v in row["us"].items() if "@ws" not in k and k != "auto"}
    if "auto" not in row["us"] or not plain or min(plain.values()) >= row["us"]["auto"]:
        return None
    best = min(plain, key=plain.get)
    burst = max(1, min(100, round(2000 / plain[best])))
    fa, fb = (_make_call(comm, chosen[k], _input(comm, chosen[k], row["count"], dtype, 0,
                                                 shift=shift)) for k in ("auto", best))
    dist.barrier(comm.group)
    ratio = agree_median(time_pair(fa, fb, comm.device, mode, burst, pairs, comm.group),
                         comm.group, comm.device)
    return {"against": best, "auto_over": round(ratio, 4), "pairs": pairs, "burst": burst}


def auto_paired(row: dict) -> str:
    """The paired ratio as the tables print it (``-`` where auto was the fastest)."""
    p = row.get("paired")
    return f"{p['auto_over']:.3f} ({p['against']})" if p else "-"


def init_torchrun() -> tuple[Communicator, torch.device]:
    """Under torchrun: NCCL on this process's GPU, initialised eagerly, and its communicator."""
    import commrt
    from commrt.config import torchrun_env

    env = torchrun_env()
    if env is None:
        raise SystemExit("run this under torchrun (RANK, WORLD_SIZE and MASTER_ADDR unset)")
    local = env["local_rank"]
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    return commrt.init(), torch.device("cuda", local)


def commit() -> str:
    """The commit measured: ``GIT_COMMIT`` where the runner names it (a copy of a working
    tree may carry another checkout's git), else git's HEAD here, else "unknown"."""
    if os.environ.get("GIT_COMMIT"):
        return os.environ["GIT_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, timeout=10,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def meta(comm: Communicator, command: str) -> dict:
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
    try:
        import triton

        triton_version = triton.__version__
    except Exception:
        triton_version = None
    return {
        "device": comm.profile.name, "generation": comm.profile.generation,
        "world_size": comm.world_size, "link": comm.profile.link,
        "backend": comm.backend, "torch": torch.__version__, "triton": triton_version,
        "nccl": nccl, "commrt": __version__, "python": platform.python_version(),
        "date": datetime.date.today().isoformat(), "commit": commit(), "command": command,
        "config": comm.config.describe(),
        "multicast_ptr": comm.facts.multicast_ptr,
    }


def format_table(rows: list, world: int, op: str = "all_reduce") -> str:
    """nccl-tests-like lines: size, count, type, mode, then time/algbw/busbw per variant,
    and auto timed beside the fastest other variant where that is not auto (``paired``:
    on a busy host, separate columns of one call differ more than the variants do)."""
    labels: list[str] = []
    for r in rows:
        labels += [k for k in r["us"] if k not in labels]
    head = f"{'size(B)':>11} {'count':>10} {'type':>8} {'mode':>5} {'auto-pick':>13} " + \
        " ".join(f"{lb[:14]:>14}" for lb in labels) + \
        f" {'best algbw':>10} {'busbw':>7} #wrong  auto/paired"
    lines = [head, "(times in µs; algbw/busbw in GB/s for the fastest variant; auto/paired: "
                   "auto's time over the fastest other variant's, timed side by side)"]
    for r in rows:
        cells = " ".join(f"{r['us'][lb]:>14.2f}" if lb in r["us"] else f"{'-':>14}"
                         for lb in labels)
        best = min(r["us"].values()) if r["us"] else float("nan")
        moved = r["bytes"] * (world if op == "reduce_scatter" else 1)  # nccl-tests' size
        algbw = moved / best / 1e3 if best else 0.0
        lines.append(f"{r['bytes']:>11} {r['count']:>10} {r['dtype']:>8} {r['mode']:>5} "
                     f"{r.get('auto_algorithm', ''):>13} {cells} {algbw:>10.2f} "
                     f"{algbw * busbw_factor(world, op):>7.2f} {sum(r['wrong'].values()):>6}  "
                     f"{auto_paired(r)}")
    return "\n".join(lines)


def auto_ratio(row: dict) -> float:
    """auto over the fastest variant callable on an ordinary tensor (the user's case)."""
    plain = [v for k, v in row["us"].items() if "@ws" not in k and k != "auto"]
    return row["us"].get("auto", float("nan")) / min(plain) if plain else float("nan")


def write_results(path: str, meta_: dict, rows: list, op: str = "all_reduce") -> None:
    with open(path, "w") as f:
        json.dump({"meta": meta_, "op": op, "results": rows}, f, indent=1)
    md = path.rsplit(".", 1)[0] + ".md"
    with open(md, "w") as f:
        f.write(f"# {op.replace('_', '-')} on {meta_['world_size']}x {meta_['device']}\n\n")
        f.write("\n".join(f"- {k}: `{v}`" for k, v in meta_.items() if k != "config"))
        f.write(f"\n- config: `{json.dumps(meta_['config'])}`\n\n")
        for mode in ("graph", "eager"):
            sub = [r for r in rows if r["mode"] == mode]
            if not sub:
                continue
            labels: list[str] = []
            for r in sub:
                labels += [k for k in r["us"] if k not in labels]
            f.write(f"## {mode} mode, median µs per {op.replace('_', '-')}\n\n")
            f.write("auto / best: auto on an ordinary tensor against the fastest variant a user "
                    "can call on one (no `@ws`). paired: where that variant is not auto, the "
                    "median of auto over it timed side by side in alternating bursts.\n\n")
            f.write("| bytes | " + " | ".join(labels)
                    + " | auto picks | auto / best | paired |\n")
            f.write("|" + "---:|" * (len(labels) + 4) + "\n")
            for r in sub:
                f.write(f"| {r['bytes']} | " + " | ".join(
                    f"{r['us'][lb]:.1f}" if lb in r["us"] else "-" for lb in labels)
                    + f" | {r.get('auto_algorithm', '')} | {auto_ratio(r):.3f} | "
                    f"{auto_paired(r)} |\n")
            f.write("\n")


# ----- tuner -------------------------------------------------------------------------
def tune(comm: Communicator, sizes: list[int], dtype, progress=None) -> tuple[dict, list, list]:
    """Time every eligible algorithm per size and mode and rank them, fastest first.

    Graph mode tries each of our algorithms over ``CONFIG_GRID``; the others (PyTorch's
    ops, ``nccl_symm``, ``nccl``) have no launch config and are timed once. Eager mode
    reuses the graph-mode best config (the host dominates there). One config per size for
    every rank: a rank reducing a ``comm.empty`` tensor in place runs the same tiling as one
    that does not (the barriers pair programs across ranks). A variant that sums wrong is left
    out of the table and reported, never ranked. Returns the table's ``ops.all_reduce``
    section, every measurement, and what was excluded.
    """
    section: dict[str, list] = {}
    raw, excluded = [], []
    best_cfg: dict[tuple[str, int], dict | None] = {}
    for mode in ("graph", "eager"):
        rows = []
        if mode == "eager":
            section[mode] = _tune_eager(comm, sizes, dtype, best_cfg, raw, excluded, progress)
            continue
        for nbytes in sizes:
            ranking = []
            for name, _ in ALGORITHMS:
                v = Variant(name, name)
                if not _eligible(comm, v, nbytes, dtype, mode):
                    continue
                grid = [c for c in CONFIG_GRID.get(name, [None])
                        if not (c and c.get("pdl")) or has_pdl(comm.device)]
                best = None
                for cfg in grid:
                    if _same_as_one_round(comm, name, cfg, nbytes, dtype):
                        continue
                    v.config = cfg if cfg is not None else ({} if name in OURS else None)
                    us, wrong = measure(comm, v, nbytes, dtype, mode)
                    raw.append({"mode": mode, "bytes": nbytes, "algorithm": name, "config": cfg,
                                "us": us, "wrong": wrong})
                    if wrong:
                        excluded.append(f"{name} {cfg} {mode} {nbytes} B: {wrong} wrong")
                        continue
                    if best is None or us < best[0]:
                        best = (us, cfg)
                if best is None:
                    continue
                best_cfg[(name, nbytes)] = best[1]
                ranking.append(_choice(name, best))
            rows.append(_row(nbytes, ranking, progress, f"tune {mode} {nbytes} B"))
        section[mode] = rows
    _REFERENCE.clear()
    return section, raw, excluded


def _tune_eager(comm: Communicator, sizes: list[int], dtype, best_cfg: dict, raw: list,
                excluded: list, progress) -> list:
    """The eager rows: every size timed in two passes, ascending then descending, each
    algorithm ranked by the faster of its two medians. A host slowdown that lasts a few
    seconds (seen in the tuner: every algorithm 1.5x slower at two neighbouring sizes,
    their order shuffled) then hits a size in one pass only."""
    first = {n: _eager_times(comm, n, dtype, best_cfg, raw, excluded) for n in sizes}
    rows = []
    for nbytes in reversed(sizes):
        again = _eager_times(comm, nbytes, dtype, best_cfg, raw, excluded)
        ranking = [_choice(name, (min(us, again[name][0]), cfg))  # wrong in either: out
                   for name, (us, cfg) in first[nbytes].items() if name in again]
        rows.append(_row(nbytes, ranking, progress, f"tune eager {nbytes} B"))
    return rows[::-1]


def _eager_times(comm: Communicator, nbytes: int, dtype, best_cfg: dict, raw: list,
                 excluded: list) -> dict:
    """{algorithm: (µs, config)} in eager mode at this size, each with its graph-mode best
    config, checked, then timed by ``run_bench`` in ``EAGER_ROUNDS`` interleaved rounds
    (a drift of the host's speed then moves all of them alike); wrong ones left out."""
    cfgs = {name: best_cfg.get((name, nbytes)) for name, _ in ALGORITHMS}
    variants = [Variant(name, name, config=c if c is not None else ({} if name in OURS else None))
                for name, c in cfgs.items()]
    row = run_bench(comm, [nbytes], dtype, ["eager"], variants, rounds=EAGER_ROUNDS)[0]
    times = {}
    for name, wrong in row["wrong"].items():
        us = row["us"][name]
        raw.append({"mode": "eager", "bytes": nbytes, "algorithm": name, "config": cfgs[name],
                    "us": us, "wrong": wrong})
        if wrong:
            excluded.append(f"{name} {cfgs[name]} eager {nbytes} B: {wrong} wrong")
        else:
            times[name] = (us, cfgs[name])
    return times


def _choice(name: str, best: tuple) -> dict:
    return {"algorithm": name, "config": best[1] or {}, "us": round(best[0], 3)}


def _row(nbytes: int, ranking: list, progress, label: str) -> dict:
    """A table row, fastest first, with a progress tick."""
    ranking.sort(key=lambda c: c["us"])
    if progress:
        progress(f"{label}: {ranking[0]['algorithm']}")
    return {"max_bytes": nbytes, "ranking": ranking}


# ----- all-gather and reduce-scatter ------------------------------------------------------
def collective_call(comm: Communicator, op: str, algorithm: str, nbytes: int, dtype,
                    config: dict | None = None, seed: int = 0):
    """(call, wrong) for one ``op`` whose output has ``nbytes``, run by ``algorithm``:
    ``auto`` (the dispatcher's choice), else forced as ``COMMRT_ALGO=op:algorithm`` forces
    it, with the table's launch config or ``config`` (the tuner). ``wrong()`` runs one
    call and counts elements off the float64 result of the process group on all ranks."""
    elt = torch.empty((), dtype=dtype).element_size()
    n_out = nbytes // elt
    n_in = n_out // comm.world_size if op == "all_gather" else n_out * comm.world_size
    g = torch.Generator(device=comm.device).manual_seed(seed * 1009 + comm.rank)
    x = torch.randn(n_in, generator=g, dtype=torch.float32, device=comm.device).to(dtype)
    out = torch.empty(n_out, dtype=dtype, device=comm.device)
    # the user's path, with the tuner's config where given
    view = comm if algorithm == "auto" else forced_view(comm, algorithm, op, config)
    fn = view.all_gather_into_tensor if op == "all_gather" else view.reduce_scatter_tensor

    def call():
        fn(out, x)

    def wrong() -> int:
        call()
        ref = torch.empty(n_out, dtype=torch.float64, device=comm.device)
        if op == "all_gather":  # bit for bit (ag_push: -0.0 arrives as +0.0, still ==)
            dist.all_gather_into_tensor(ref, x.double(), group=comm.group)
            ok = out.double() == ref
        else:
            dist.reduce_scatter_tensor(ref, x.double(), group=comm.group)
            mag = torch.empty_like(ref)
            dist.reduce_scatter_tensor(mag, x.double().abs(), group=comm.group)
            ok = (out.double() - ref).abs() <= sum_bound(mag, dtype, comm.world_size)
        n = (~ok).sum().reshape(1)
        dist.all_reduce(n, group=comm.group)
        return int(n.item())
    return call, wrong


def collective_variants(comm: Communicator, op: str, include_all: bool) -> list[tuple[str, str]]:
    """(label, algorithm) pairs: the process group's and ``auto``; with ``include_all``
    every algorithm of ``op``."""
    pairs = [(process_group_label(comm), "nccl")]
    if include_all:
        pairs += [(name, name) for name, _ in BY_KIND[op] if name != "nccl"]
    return pairs + [("auto", "auto")]


def run_collective_bench(comm: Communicator, op: str, sizes: Iterable[int], dtype,
                         modes: Iterable[str], variants: list[tuple[str, str]],
                         progress: Callable[[str], None] | None = None,
                         rounds: int = 3) -> list:
    """Every eligible variant of ``op`` per output size and mode: checked, then timed in
    ``rounds`` rounds (each in ``_round_order``): graph mode the median over rounds, eager
    mode the fastest round, as ``run_bench`` times the all-reduce."""
    rows = []
    for mode in modes:
        for nbytes in sizes:
            elt = torch.empty((), dtype=dtype).element_size()
            row = {"bytes": nbytes, "count": nbytes // elt, "op": op,
                   "dtype": str(dtype).replace("torch.", ""), "mode": mode, "us": {},
                   "wrong": {}, "rounds": rounds}
            q = Query(nbytes, dtype, "sum", mode, comm.device.type, op)
            calls = {}
            for label, algo in variants:
                if algo != "auto" and why_not(algo, q, comm.facts) is not None:
                    continue
                calls[label], wrong = collective_call(comm, op, algo, nbytes, dtype)
                row["wrong"][label] = wrong()
            times: dict[str, list] = {label: [] for label in calls}
            for r in range(rounds):
                for label in _round_order(list(calls), r):
                    times[label].append(_time(comm, calls[label], mode))
            pick = statistics.median if mode == "graph" else min
            row["us"] = {label: round(pick(t), 3) for label, t in times.items()}
            row["auto_algorithm"] = comm.dispatcher.decide(nbytes, dtype, "sum", mode,
                                                           comm.device.type, op).algorithm
            rows.append(row)
            if progress:
                progress(f"{op} {mode} {nbytes} B")
    return rows


def tune_collective(comm: Communicator, op: str, sizes: list[int], dtype,
                    progress=None) -> tuple[dict, list]:
    """The table's ``ops.<op>`` section: per output size and mode, every eligible algorithm
    ranked, fastest first. Graph mode tries our kernels over ``CONFIG_GRID``; eager mode
    reuses each one's graph-mode best config, every size timed in two passes (ascending,
    then descending) and ranked by the faster, as the all-reduce's eager rows are. Wrong
    ones are left out (in the raw list)."""
    raw: list = []
    best_cfg: dict[tuple[str, int], dict | None] = {}

    def times(nbytes: int, mode: str) -> dict:
        """{algorithm: (µs, config)} at this size: each one's best config in graph mode,
        its graph-mode best in eager mode."""
        q = Query(nbytes, dtype, "sum", mode, comm.device.type, op)
        found = {}
        for name, _ in BY_KIND[op]:
            if why_not(name, q, comm.facts):
                continue
            grid = CONFIG_GRID.get(name, [None]) if mode == "graph" else \
                [best_cfg.get((name, nbytes))]
            for cfg in grid:
                call, wrong = collective_call(comm, op, name, nbytes, dtype,
                                              None if name == "nccl" else dict(cfg or {}))
                bad = wrong()
                us = _time(comm, call, mode)
                raw.append({"op": op, "mode": mode, "bytes": nbytes, "algorithm": name,
                            "config": cfg, "us": us, "wrong": bad})
                if not bad and (name not in found or us < found[name][0]):
                    found[name] = (us, cfg)
        return found

    section: dict[str, list] = {"graph": [], "eager": []}
    for nbytes in sizes:
        found = times(nbytes, "graph")
        for name, (_, cfg) in found.items():
            best_cfg[(name, nbytes)] = cfg
        if found:
            section["graph"].append(_row(nbytes, [_choice(k, t) for k, t in found.items()],
                                         progress, f"{op} graph {nbytes} B"))
    first = {nbytes: times(nbytes, "eager") for nbytes in sizes}
    for nbytes in reversed(sizes):
        again = times(nbytes, "eager")  # wrong in either pass: out
        ranking = [_choice(name, (min(us, again[name][0]), cfg))
                   for name, (us, cfg) in first[nbytes].items() if name in again]
        if ranking:
            section["eager"].append(_row(nbytes, ranking, progress, f"{op} eager {nbytes} B"))
    section["eager"].reverse()
    return section, raw


FUSED_KIND = "all_reduce_residual_rmsnorm"
FUSED_CONFIGS = {"one_shot_push": [dict(warps=w, blocks=g, split=s) for w in (4, 8)
                                   for g in (32, 132) for s in (1, 4, 8)],
                 "one_shot": [dict(warps=w, blocks=g) for w in (8, 16) for g in (32, 132)],
                 "two_shot_push": [dict(warps=w, blocks=g) for w in (8, 16) for g in (32, 132)]}


def fused_call(comm: Communicator, algorithm: str, rows: int, hidden: int, dtype,
               config: dict | None = None, seed: int = 0):
    """(call, wrong) for the fused op run by ``algorithm`` ("nccl": the unfused path).

    With ``config`` our kernel runs with that launch config, else with the table's; either
    way through ``all_reduce_residual_rmsnorm``, the user's path. ``wrong()`` runs one
    call and counts elements off the float64 reference on all ranks.
    """
    from commrt.symm_mem.fused_rmsnorm import reference

    g = torch.Generator(device="cpu").manual_seed(seed)
    res = torch.randn(rows, hidden, generator=g).to(dtype).to(comm.device)
    w = torch.randn(hidden, generator=g).to(dtype).to(comm.device)
    xs = [torch.randn(rows, hidden, generator=g).to(dtype) for _ in range(comm.world_size)]
    x = xs[comm.rank].to(comm.device)
    if config is None or algorithm == "nccl":
        def call():
            return comm.all_reduce_residual_rmsnorm(x, res, w, 1e-5, algorithm=algorithm)
    else:
        view = forced_view(comm, algorithm, "all_reduce", config)  # the fused op follows it

        def call():
            return view.all_reduce_residual_rmsnorm(x, res, w, 1e-5)

    def wrong() -> int:
        got_y, got_z = call()
        ry, rz = reference(sum(t.double() for t in xs).to(comm.device), res, w, 1e-5)
        # z = sum + residual within rounding of world + 1 terms; y = rmsnorm(z) moves by
        # rstd * |w| times that, on top of the norm's own rounding
        mag = sum(t.double().abs() for t in xs).to(comm.device) + res.double().abs()
        bz = sum_bound(mag, dtype, comm.world_size + 1)
        rstd = torch.rsqrt(rz.double().pow(2).mean(-1, keepdim=True) + 1e-5)
        tol = 2e-2 if dtype != torch.float32 else 1e-4
        by = tol + tol * ry.abs() + rstd * w.double().abs() * bz
        bad = (~((got_z.double() - rz.double()).abs() <= bz)).sum() + \
            (~((got_y.double() - ry).abs() <= by)).sum()
        n = bad.reshape(1).to(comm.device)
        dist.all_reduce(n, group=comm.group)
        return int(n.item())
    return call, wrong


def tune_fused(comm: Communicator, rows_list: list[int], hidden: int, dtype,
               progress=None) -> tuple[dict, list]:
    """Rank the fused kernels against the unfused path ("nccl") per message size."""
    section: dict[str, list] = {}
    raw = []
    for mode in ("graph", "eager"):
        rows_out = []
        for rows in rows_list:
            nbytes = rows * hidden * torch.empty((), dtype=dtype).element_size()
            q = Query(nbytes, dtype, "sum", mode, comm.device.type, FUSED_KIND, hidden)
            ranking = []
            for name in ("one_shot_push", "one_shot", "two_shot_push", "nccl"):
                if why_not(name, q, comm.facts):
                    continue
                best = None
                for cfg in FUSED_CONFIGS.get(name, [None]):
                    call, wrong = fused_call(comm, name, rows, hidden, dtype, cfg)
                    bad = wrong()
                    us = _time(comm, call, mode)
                    raw.append({"mode": mode, "rows": rows, "hidden": hidden, "algorithm": name,
                                "config": cfg, "us": us, "wrong": bad})
                    if not bad and (best is None or us < best[0]):
                        best = (us, cfg)
                if best is not None:
                    ranking.append(_choice(name, best))
            rows_out.append(_row(nbytes, ranking, progress, f"fused {mode} {rows}x{hidden}"))
        section[mode] = rows_out
    return section, raw


def progress_printer(rank: int, total: int) -> Callable[[str], None]:
    """A one-line progress bar on rank 0's stderr, with the seconds since it started."""
    state = {"done": 0, "t0": time.monotonic()}

    def show(msg: str) -> None:
        state["done"] += 1
        if rank == 0:
            width = 30
            filled = int(width * state["done"] / max(total, 1))
            end = "\n" if state["done"] >= total or not sys.stderr.isatty() else ""
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] "
                             f"{state['done']}/{total} {time.monotonic() - state['t0']:.0f} s "
                             f"{msg:<40}{end}")
            sys.stderr.flush()
    return show
