"""Copies of process groups whose NCCL communicator runs on at most N CTAs, for the
collectives the overlap pass hides behind compute.

A hidden collective costs no time of its own, but its kernel holds SMs that the matmuls
it overlaps would use: in ``bench_fx_overlap.py`` full-width NCCL stretched the compute of
a step from 37.5 to 40.3 ms. Fewer CTAs make the collective slower and the compute
faster (on that step, at 4, 8 and 16 CTAs, slower overall: hence off by default). The
pass only moves collectives to a copy, never creates one, so that every process (and a
run that finds the compiled graph in the FX graph cache) makes the same groups, in the
same order, when it calls ``commrt.fx.install``.
"""

from __future__ import annotations

import torch.distributed as dist

_COPIES: dict[tuple[tuple[int, ...], int], str] = {}  # (ranks, max CTAs) -> copy's name
_BY_NAME: dict[tuple[str, int], str] = {}  # (group name, max CTAs) -> copy's name


def make_copies(max_ctas: int, groups=None) -> list[str]:
    """Give each of ``groups`` (default: the world group) an NCCL copy limited to
    ``max_ctas`` CTAs; collective: every rank calls it, in the same order. Returns the
    reasons for groups left without one (not NCCL, no process group)."""
    if not dist.is_initialized():
        return ["no default process group: no CTA-limited copies"]
    reasons = []
    for g in groups or [dist.group.WORLD]:
        backend = dist.get_backend(g)
        if backend != "nccl":
            reasons.append(f"group {g.group_name} runs on {backend}: a CTA limit applies to "
                           "NCCL groups only")
            continue
        ranks = tuple(dist.get_process_group_ranks(g))
        key = (ranks, max_ctas)
        if key not in _COPIES:
            opts = dist.ProcessGroupNCCL.Options()
            opts.config.min_ctas = 1
            opts.config.max_ctas = max_ctas
            copy = dist.new_group(list(ranks), backend="nccl", pg_options=opts,
                                  group_desc=f"commrt_fx_max_ctas_{max_ctas}")
            _COPIES[key] = copy.group_name
        _BY_NAME[(g.group_name, max_ctas)] = _COPIES[key]
    return reasons


def copy_of(group: str, max_ctas: int) -> str | None:
    """The name of ``group``'s copy limited to ``max_ctas`` CTAs, if ``make_copies`` made one."""
    return _BY_NAME.get((group, max_ctas))


def known() -> list:
    """Every (group, max CTAs, copy) made so far (part of the pass's cache key)."""
    return sorted((g, n, c) for (g, n), c in _BY_NAME.items())
