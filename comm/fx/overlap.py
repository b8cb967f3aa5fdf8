"""FX pass: bucket collectives and move them so that their time hides behind compute.

Before::

    a = mm(...); ar1 = all_reduce(g1); w1 = wait(ar1); use(w1)
    b = mm(...); ar2 = all_reduce(g2); w2 = wait(ar2); use(w2)

After (each collective's input first computed as soon as its own inputs exist, within
the memory budget, see ``hoist``; bucketing by whole candidate plans, each simulated as
the step would run, see ``bucketing.bucket``; starts
raised to their inputs, waits sunk to their first use, and a wait that would still
stall moved after the work that does not need it, see ``stalls``)::

    ar = all_reduce(cat([g1, g2])) ... compute ... w = wait(ar); use(view(w[:n1])) ...

Handled: ``_c10d_functional.all_reduce`` / ``all_gather_into_tensor`` /
``reduce_scatter_tensor`` with ``wait_tensor`` (bucketed and moved), ``commrt::all_reduce``
(bucketed) and ``commrt::all_gather`` / ``commrt::reduce_scatter`` (left alone). commrt's
ops run on the compute stream and return a finished tensor: nothing hides them, so they
are not moved, but they count, priced, in the simulated step the others move around.
Collectives of one group keep their relative order, so every rank issues them alike.
Anything else (all_to_all, symbolic shapes) is left in place, with the reason in the
report. Costs: communication from commrt's measured tables (``cost``), compute from
FLOP and byte counts against the device profile. With copies of the groups
(``comm_groups``), the placed collectives then move to them; on the copy-engine group a
sum/avg all-reduce of two ranks becomes ``commrt::ce_exchange`` of its parts plus
``own + peer`` per part (``_as_exchange``).
"""

from __future__ import annotations

import dataclasses
import time

import torch
import torch.fx as fx

from . import cost as _cost
from . import hoist
from .bucketing import bucket, pin_for_inductor, place
from .comm_groups import COPY_ENGINE, EXCHANGE_WORLDS, copy_of, variant
from .graph_types import SYNC_KINDS, Coll, node_val, static_bytes
from .memory import peak_bytes
from .stalls import defer_stalls, relink

c10d = torch.ops._c10d_functional
aten = torch.ops.aten
_ASYNC = {c10d.all_reduce.default: "all_reduce",
          c10d.all_gather_into_tensor.default: "all_gather",
          c10d.reduce_scatter_tensor.default: "reduce_scatter"}
_UNHANDLED = ("all_to_all", "broadcast", "all_gather_into_tensor_coalesced",
              "reduce_scatter_tensor_coalesced", "all_reduce_coalesced")
BUCKET_CAP_BYTES = 64 << 20  # the commrt workspace default: one bucket, one piece
MEMORY_HEADROOM = 0.05  # default budget: in-flight bytes may add 5% to the graph's peak
LANDING_ALIGN = 256  # bytes: where each copy-engine exchange of a graph packs its data
# An all-reduce goes to the copy engines only with this many times its NCCL time of
# compute before its wait: alone, the copy-engine path is slower than NCCL (324 against
# 264 us at 64 MiB, before its pack, ``benchmarks/results``): it pays only where hidden.
CE_SLACK = 2.0


@dataclasses.dataclass
class OverlapReport:
    collectives_before: int = 0
    collectives_after: int = 0
    buckets: int = 0
    moved: int = 0
    exposed_us_before: float = 0.0
    exposed_us_after: float = 0.0
    comm_us: float = 0.0
    hidden_fraction: float = 0.0
    memory_budget_bytes: int = 0
    peak_in_flight_bytes: int = 0
    deferred: int = 0  # waits moved after work that does not need them (``stalls``)
    limited: int = 0  # collectives moved to a copy of their group (``comm_groups``)
    pinned: int = 0  # collectives whose placement Inductor is made to keep
    hoisted: int = 0  # collectives whose input is now computed as early as it can be
    plan: str = ""  # the bucketing chosen (``bucketing.bucket``)
    plan_us: dict = dataclasses.field(default_factory=dict)  # each candidate's predicted µs
    seconds: float = 0.0
    skipped: list[str] = dataclasses.field(default_factory=list)


def _commrt_ops() -> dict:
    """commrt's collective ops (``commrt.ops``) -> their kind (``graph_types.SYNC_KINDS``)."""
    ops = torch.ops.commrt
    return {ops.all_reduce.default: "commrt_all_reduce",
            ops.all_gather.default: "commrt_all_gather",
            ops.reduce_scatter.default: "commrt_reduce_scatter"}


def _find(graph: fx.Graph, report: OverlapReport) -> list[Coll]:
    colls, commrt_ops = [], _commrt_ops()
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        name = getattr(n.target, "__name__", "")
        if n.target in _ASYNC:
            users = list(n.users)
            waits = [u for u in users if u.target == c10d.wait_tensor.default]
            nbytes = static_bytes(node_val(n))
            if len(waits) != 1 or len(users) != 1:
                report.skipped.append(f"{n.name}: result used without exactly one wait")
            elif nbytes is None:
                report.skipped.append(f"{n.name}: dynamic shape")
            else:
                kind = _ASYNC[n.target]
                group = n.args[-1]
                op = n.args[1] if kind in ("all_reduce", "reduce_scatter") else ""
                colls.append(Coll(n, waits[0], kind, group, (kind, group, op, node_val(n).dtype),
                                   nbytes))
        elif n.target in commrt_ops:
            nbytes = static_bytes(node_val(n))
            if nbytes is None:
                report.skipped.append(f"{n.name}: dynamic shape")
            else:
                kind, group = commrt_ops[n.target], n.args[-1]
                op = n.args[1] if kind == "commrt_reduce_scatter" else \
                    "sum" if kind == "commrt_all_reduce" else ""
                colls.append(Coll(n, n, kind, group, (kind, group, op, node_val(n).dtype),
                                   nbytes))
        elif any(u in name for u in _UNHANDLED) and "c10d" in str(n.target):
            report.skipped.append(f"{n.name}: {name} is not handled")
    return colls


def _simulate(order: list[fx.Node], colls: list[Coll], model: _cost.CostModel):
    """(exposed µs, total comm µs): one compute stream, one comm stream per group."""
    by_start = {c.start: c for c in colls}
    by_end = {c.end: c for c in colls if c.end is not c.start}
    clock, exposed, total = 0.0, 0.0, 0.0
    comm_free: dict[str, float] = {}
    done: dict[int, float] = {}
    for n in order:
        c = by_start.get(n)
        if c is not None:
            us = model.comm_us(c.kind, c.nbytes, c.key[3], c.group)
            total += us
            if c.end is c.start:  # synchronous on the compute stream
                clock += us
                exposed += us
                continue
            begin = max(clock, comm_free.get(c.group, 0.0))
            comm_free[c.group] = done[id(c)] = begin + us
            continue
        c = by_end.get(n)
        if c is not None:
            end = done.get(id(c), clock)
            if end > clock:
                exposed += end - clock
                clock = end
            continue
        clock += model.compute_us(n)
    return exposed, total


def _as_gather(graph: fx.Graph, c: Coll, copy: str) -> None:
    """Replace the all-reduce ``c`` by an all-gather on ``copy`` and a sum over the ranks in
    rank order (every rank adds the same values alike: bitwise the same result), which
    Inductor fuses into the consumers. ``c`` then names the all-gather and its wait."""
    world = _cost.group_size(copy) or _cost.group_size(c.group)
    x = c.start.args[0]
    xv = node_val(x)
    with graph.inserting_before(c.start):
        start = graph.call_function(c10d.all_gather_into_tensor.default, (x, world, copy))
    start.meta["val"] = xv.new_empty((world * xv.shape[0], *xv.shape[1:]))
    with graph.inserting_before(c.end):
        wait = graph.call_function(c10d.wait_tensor.default, (start,))
        view = graph.call_function(aten.view.default, (wait, [world, *xv.shape]))
        total = graph.call_function(aten.sum.dim_IntList, (view, [0]))
        out = total
        if c.key[2] == "avg":
            out = graph.call_function(aten.div.Tensor, (total, world))
    wait.meta["val"] = start.meta["val"]
    view.meta["val"] = wait.meta["val"].view(world, *xv.shape)
    total.meta["val"] = view.meta["val"].sum(0)
    out.meta["val"] = total.meta["val"] / world if out is not total else total.meta["val"]
    c.end.replace_all_uses_with(out)
    graph.erase_node(c.end)
    graph.erase_node(c.start)
    c.start, c.end, c.kind = start, wait, "all_gather"


def _as_exchange(graph: fx.Graph, c: Coll, copy: str, offset: int) -> fx.Node:
    """Replace the all-reduce ``c`` (of two ranks) by ``commrt::ce_exchange`` of its input's
    parts on ``copy`` (the peer's values, packed at ``offset`` of the landing buffers) and
    ``own + peer`` per part (the same two values added on both ranks: bitwise alike), which
    Inductor fuses into the consumers. No bucket is materialised: the exchange packs the
    parts itself. ``c`` then names the exchange and its wait; returns the exchange (its
    ``total`` argument is set once every offset is known)."""
    x = c.start.args[0]
    xv = node_val(x)
    bucketed = x.op == "call_function" and x.target is aten.cat.default and \
        (len(x.args) < 2 or x.args[1] == 0) and xv.dim() == 1
    parts = list(x.args[0]) if bucketed else [x]
    own, lo = {}, 0
    for p in parts:
        own[(lo, lo + node_val(p).numel())] = p
        lo += node_val(p).numel()
    world = 2
    avg = c.key[2] == "avg"

    def call(target, args, val):
        node = graph.call_function(target, args)
        node.meta["val"] = val
        return node

    with graph.inserting_before(c.start):
        start = call(torch.ops.commrt.ce_exchange.default, (parts, copy, offset, 0),
                     xv.new_empty((xv.numel(),)))
    with graph.inserting_before(c.end):
        wait = call(c10d.wait_tensor.default, (start,), start.meta["val"])

    def summed(mine, peer):
        total = call(aten.add.Tensor, (mine, peer), node_val(mine) + node_val(peer))
        return call(aten.div.Tensor, (total, world), node_val(total) / world) if avg else total

    for u in list(c.end.users):
        rng = (u.args[2], u.args[3]) if u.target is aten.slice.Tensor and \
            u.args[1] == 0 and len(u.args) == 4 else None
        if rng is None:
            continue
        with graph.inserting_before(c.end):
            mine = own.get(rng)
            if mine is None:
                mine = call(aten.slice.Tensor, (x, 0, *rng), node_val(u))
            peer = call(aten.slice.Tensor, (wait, 0, *rng), node_val(u))
            v = summed(mine, peer)
        u.replace_all_uses_with(v)
        graph.erase_node(u)
    if c.end.users:
        with graph.inserting_before(c.end):
            peer = call(aten.view.default, (wait, list(xv.shape)), node_val(c.end))
            v = summed(x, peer)
        c.end.replace_all_uses_with(v)
    graph.erase_node(c.end)
    graph.erase_node(c.start)
    if bucketed and not x.users:
        graph.erase_node(x)
    c.start, c.end, c.kind = start, wait, "exchange"
    return start


def _windows(graph: fx.Graph, colls: list[Coll], model: _cost.CostModel) -> dict:
    """Predicted compute µs between each collective's start and its wait, in graph order."""
    before, clock = {}, 0.0
    for n in graph.nodes:
        before[n] = clock
        clock += model.compute_us(n)
    return {id(c): before[c.end] - before[c.start] - model.compute_us(c.start) for c in colls}


def _to_copies(graph: fx.Graph, colls: list[Coll], kind: str, report: OverlapReport,
               model: _cost.CostModel) -> int:
    """Move the functional collectives to their group's copy of ``kind`` (``comm_groups``).
    The copy-engine group takes the sum and avg all-reduces (of at least one dimension)
    with compute enough to hide behind (``CE_SLACK`` times their NCCL time): of two ranks
    as exchanges (``_as_exchange``), of more as all-gathers (``_as_gather``), whose sum the
    compute does."""
    moved, missing, exposed = 0, set(), 0
    exchanges, landing = [], 0
    window = _windows(graph, colls, model) if kind == COPY_ENGINE else {}
    for c in colls:
        if c.kind in SYNC_KINDS:  # commrt's communicator runs it, on its own group
            continue
        if kind == COPY_ENGINE and (c.kind != "all_reduce" or c.key[2] not in ("sum", "avg")
                                    or node_val(c.start.args[0]).dim() == 0):
            continue
        if kind == COPY_ENGINE and window[id(c)] < CE_SLACK * model.comm_us(
                c.kind, c.nbytes, c.key[3], c.group):
            exposed += 1
            continue
        copy = copy_of(c.group, kind)
        world = copy and (_cost.group_size(copy) or _cost.group_size(c.group))
        if copy is None or (kind == COPY_ENGINE and not world):
            missing.add(c.group)
            continue
        if kind == COPY_ENGINE and world in EXCHANGE_WORLDS:
            exchanges.append(_as_exchange(graph, c, copy, landing))
            landing += -(-c.nbytes // LANDING_ALIGN) * LANDING_ALIGN
        elif kind == COPY_ENGINE:
            _as_gather(graph, c, copy)
        else:
            c.start.update_arg(len(c.start.args) - 1, copy)
        moved += 1
    for start in exchanges:  # every exchange of the graph has a landing place of its own
        start.update_arg(3, landing)
    report.skipped += [f"group {g}: no {kind} copy (commrt.fx.install(...) makes one for "
                       "the groups in comm_groups=[...])" for g in sorted(missing)]
    if exposed:
        report.skipped.append(f"{exposed} all-reduces left on their group: too little compute "
                              f"before their wait to hide the copy-engine path "
                              f"(< {CE_SLACK:g}x their NCCL time)")
    return moved


def overlap_and_bucket(gm: fx.GraphModule | fx.Graph, *, profile=None,
                       memory_budget: int | None = None, bucket_cap: int = BUCKET_CAP_BYTES,
                       for_inductor: bool = False, comm_ctas: int = 0,
                       copy_engine: bool = False) -> OverlapReport:
    """Bucket and reorder the collectives of ``gm`` in place; see the module docstring.

    ``for_inductor`` (set by ``commrt.fx.install()``) also pins the placement with
    Inductor's control dependencies, which only Inductor can run. ``comm_ctas`` moves the
    functional collectives to their group's copy limited to that many CTAs, and
    ``copy_engine`` the sum/avg all-reduces to its copy-engine group (both made by
    ``install``, see ``comm_groups``).
    """
    t0 = time.perf_counter()
    graph = gm.graph if isinstance(gm, fx.GraphModule) else gm
    report = OverlapReport()
    model = _cost.CostModel(profile)
    colls = _find(graph, report)
    report.collectives_before = len(colls)
    order = list(graph.nodes)
    report.exposed_us_before, _ = _simulate(order, colls, model)
    if colls:
        peak = peak_bytes(order)
        budget = int(peak * MEMORY_HEADROOM) if memory_budget is None else memory_budget
        report.memory_budget_bytes = budget
        report.hoisted, kept = hoist.hoist_producers(graph, colls, budget)
        if kept:
            report.skipped.append(f"{kept} collectives' inputs left where the graph makes "
                                  "them: computing them sooner would exceed the memory budget")
        left = max(0, peak + budget - peak_bytes(list(graph.nodes)))
        kind = variant(comm_ctas, copy_engine)
        chosen = bucket(graph, colls, model, bucket_cap, memory_limit=peak + budget,
                        ce_slack=CE_SLACK if kind == COPY_ENGINE else None)
        colls, report.buckets = chosen.colls, chosen.merged
        report.plan, report.plan_us = chosen.plan, chosen.predicted_us
        order, report.moved, report.peak_in_flight_bytes = place(graph, colls, left)
        deferred, report.deferred = defer_stalls(graph, colls, model)
        if report.deferred and peak_bytes(deferred) > peak_bytes(order) + budget:
            report.skipped.append(f"{report.deferred} stalled waits left in place: running "
                                  "other work first would exceed the memory budget")
            report.deferred = 0
        elif report.deferred:
            relink(graph, deferred)
            order = deferred
        # simulated before pinning, which replaces the nodes that ``colls`` names
        report.exposed_us_after, report.comm_us = _simulate(order, colls, model)
        if kind:
            report.limited = _to_copies(graph, colls, kind, report, model)
        if for_inductor:
            report.pinned = pin_for_inductor(graph, colls)
        graph.lint()
        if isinstance(gm, fx.GraphModule):
            gm.recompile()
    else:
        report.exposed_us_after, report.comm_us = _simulate(order, colls, model)
    report.collectives_after = len(colls)
    if report.comm_us > 0:
        report.hidden_fraction = 1.0 - report.exposed_us_after / report.comm_us
    report.seconds = time.perf_counter() - t0
    return report
