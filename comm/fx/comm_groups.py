"""Copies of process groups for the collectives the overlap pass hides behind compute:
``ctasN``, an NCCL communicator that runs on at most N CTAs, or ``ce``, commrt's
copy-engine group (``commrt.copy_engine_group``: all-reduces whose data the copy engines
move, leaving the SMs to the compute).

A hidden collective costs no time of its own, but its kernel holds SMs that the matmuls
it overlaps would use: in ``bench_fx_overlap.py`` full-width NCCL stretched the compute of
a step from 37.5 to 40.3 ms. Fewer CTAs make the collective slower and the compute
faster (on that step, at 4, 8 and 16 CTAs, slower overall: hence off by default). The
copy engines take none of the SMs: at two ranks (exchanges, see ``overlap._as_exchange``)
that made the 16-layer training step 0.9-1.1 ms faster than NCCL, but the overlap grid's
gradient synchronisations 1.25-1.55x slower than one bucket on NCCL
(``benchmarks/results``): off by default, ``auto`` on where ``copy_engine_by_default``
says. The pass only moves collectives to a copy, never creates one, so that every
process (and a run that finds the compiled graph in the FX graph cache) makes the same
groups, in the same order, when it calls ``commrt.fx.install``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

_COPIES: dict[tuple[tuple[int, ...], str], str] = {}  # (ranks, variant) -> copy's name
_BY_NAME: dict[tuple[str, str], str] = {}  # (group name, variant) -> copy's name
COPY_ENGINE = "ce"
# group sizes whose copy-engine all-reduces become exchanges (own + peer: two ranks only)
EXCHANGE_WORLDS = (2,)


def variant(comm_ctas: int = 0, copy_engine: bool = False) -> str:
    """The copy the overlap pass moves collectives to ("" for none)."""
    if copy_engine and comm_ctas:
        raise ValueError("comm_ctas and copy_engine exclude each other: pick one")
    return COPY_ENGINE if copy_engine else f"ctas{comm_ctas}" if comm_ctas else ""


def _new_copy(g, kind: str):
    if kind == COPY_ENGINE:
        from commrt import copy_engine_group

        return copy_engine_group.make(g)
    opts = dist.ProcessGroupNCCL.Options()
    opts.config.min_ctas = 1
    opts.config.max_ctas = int(kind.removeprefix("ctas"))
    return dist.new_group(dist.get_process_group_ranks(g), backend="nccl", pg_options=opts,
                          group_desc=f"commrt_fx_max_{kind}")


def make_copies(kind: str, groups=None) -> list[str]:
    """Give each of ``groups`` (default: the world group) a copy of ``kind`` (see
    ``variant``); collective: every rank calls it, in the same order. Returns the reasons
    for groups left without one (not NCCL, no process group)."""
    if not dist.is_initialized():
        return [f"no default process group: no {kind} copies"]
    reasons = []
    for g in groups or [dist.group.WORLD]:
        backend = dist.get_backend(g)
        if backend != "nccl":
            reasons.append(f"group {g.group_name} runs on {backend}: {kind} copies are made "
                           "of NCCL groups only")
            continue
        key = (tuple(dist.get_process_group_ranks(g)), kind)
        if key not in _COPIES:
            _COPIES[key] = _new_copy(g, kind).group_name
        _BY_NAME[(g.group_name, kind)] = _COPIES[key]
    return reasons


def copy_engine_by_default(groups=None) -> tuple[bool, str]:
    """``COMMRT_FX_COPY_ENGINE=auto``: (whether ``install`` makes copy-engine copies of
    ``groups`` (default: the world group), why). Yes where each is two NCCL ranks on GPUs:
    there its hidden all-reduces become exchanges, measured faster than NCCL on the
    16-layer training step (``benchmarks/results``); beyond two ranks the
    copy-engine path is an all-gather, which was not."""
    if not dist.is_initialized():
        return False, "no default process group"
    if not torch.cuda.is_available():
        return False, "no GPU"
    for g in groups or [dist.group.WORLD]:
        if dist.get_backend(g) != "nccl":
            return False, f"group {g.group_name} runs on {dist.get_backend(g)}, not NCCL"
        if g.size() not in EXCHANGE_WORLDS:
            return False, (f"group {g.group_name} has {g.size()} ranks: the copy-engine path "
                           f"exchanges only between {' or '.join(map(str, EXCHANGE_WORLDS))}")
    return True, "two NCCL ranks on GPUs"


def copy_of(group: str, kind: str) -> str | None:
    """The name of ``group``'s copy of ``kind``, if ``make_copies`` made one."""
    return _BY_NAME.get((group, kind))


def known() -> list:
    """Every (group, variant, copy) made so far (part of the pass's cache key)."""
    return sorted((g, k, c) for (g, k), c in _BY_NAME.items())
