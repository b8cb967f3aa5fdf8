"""Two steps of ``overlap_and_bucket``: merge collectives into buckets, then place every
start right after its inputs and every wait right before its first use, within the
memory budget.

Bucketing weighs whole plans, not pairs: the fine-grained runs that hide best one by one,
no buckets, one bucket of everything ready together, DDP's 25 MiB buckets and a few large
buckets. Each is simulated as the step would run (``stalls.simulate_plan``: the host's
launches, the compute stream slowed by running collectives, collectives one at a time on
their stream at their measured table time) and the fastest within the memory budget wins.
Per collective, launches and the tables' fixed latency make many small ones dearer than
one large one (1 MiB: 17.5 µs; 64 MiB: 250 µs, ``tuning_tables/sm90-h200_ws2.json``).
``commrt::all_gather`` and ``commrt::reduce_scatter`` are never bucketed: each stays a
collective of its own in every plan."""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import operator

import torch
import torch.fx as fx

from .comm_groups import COPY_ENGINE, copy_of
from .cost import CONTENTION, Bucket, CostModel
from .graph_types import SYNC_KINDS, UNBUCKETED, VIEWS, Coll
from .memory import live_bytes, peak_bytes
from .stalls import plan_dependencies, relink, simulate_plan

c10d = torch.ops._c10d_functional
aten = torch.ops.aten
DDP_BUCKET_BYTES = 25 << 20  # DistributedDataParallel's default bucket_cap_mb
SPLITS = (2, 4, 8, 16)  # the "few large buckets" candidates: this many of equal bytes
TIE = 0.002  # plans predicted within 0.2% of the best are ties: the fewest buckets wins


@dataclasses.dataclass
class Chosen:
    """The collectives after bucketing, how many buckets merged, which candidate."""

    colls: list[Coll]
    merged: int
    plan: str
    predicted_us: dict[str, float]  # each candidate's predicted step µs (none: over budget)


def _fake_mode(graph: fx.Graph):
    from torch._guards import detect_fake_mode

    try:
        return detect_fake_mode([n.meta["val"] for n in graph.nodes
                                 if isinstance(n.meta.get("val"), torch.Tensor)])
    except AssertionError:  # vals from several fake modes: leave new nodes without one
        return None


def _call(graph: fx.Graph, fake, target, args, like: torch.Tensor, shape) -> fx.Node:
    """A new node with a contiguous fake ``val`` of ``shape`` (and ``like``'s dtype and
    device), made from a meta tensor: running every new op in fake mode costs ~1 ms a node."""
    node = graph.call_function(target, args)
    if fake is not None:
        meta = torch.empty(shape, dtype=like.dtype, device="meta")
        node.meta["val"] = fake.fake_tensor_converter.from_meta_and_device(fake, meta,
                                                                          like.device)
    return node


def _span(c, pos) -> tuple[int, int]:
    """(position its input is ready, position of its first use)."""
    src = c.start.args[0]
    ready = pos[src] if isinstance(src, fx.Node) else 0
    users = [pos[u] for u in c.end.users]
    return ready, min(users) if users else len(pos)


def _fine(colls: list[Coll], model: CostModel, spans: dict, prefix: list,
          cap: int) -> list[list[Coll]]:
    """Runs of same-key collectives whose merged exposure (each alone against the compute
    between its input and its use) is no more than theirs apart."""

    def exposed(nbytes, key, ready, use):
        cost = model.comm_us(key[0], nbytes, key[3], key[1])
        if key[0] in SYNC_KINDS:
            return cost  # runs on the compute stream
        return max(0.0, cost - (prefix[use] - prefix[ready + 1]))

    buckets = []
    open_runs: dict[tuple, dict] = {}  # key -> members and running span / bytes / exposure
    for c in colls:
        ready, use = spans[id(c)]
        alone = exposed(c.nbytes, c.key, ready, use)
        r = open_runs.get(c.key)
        if r is not None:
            m_ready, m_use = max(r["ready"], ready), min(r["use"], use)
            total = r["bytes"] + c.nbytes
            if m_ready < m_use and total <= cap and \
                    exposed(total, c.key, m_ready, m_use) <= r["apart"] + alone:
                r["members"].append(c)
                r.update(ready=m_ready, use=m_use, bytes=total, apart=r["apart"] + alone)
                continue
            buckets.append(r["members"])
        open_runs[c.key] = dict(members=[c], ready=ready, use=use, bytes=c.nbytes, apart=alone)
    return buckets + [r["members"] for r in open_runs.values()]


def _runs(colls: list[Coll], spans: dict, cap: int, target) -> list[list[Coll]]:
    """Consecutive same-key collectives (in readiness order) in buckets of at least
    ``target(key)`` bytes (a bucket closes once it holds that many, as DDP's do), at most
    ``cap``, never over a collective that needs another's result."""
    out, runs = [], {}
    for c in colls:
        ready, use = spans[id(c)]
        r = runs.get(c.key)
        if r is not None and max(r[1], ready) < min(r[2], use) and \
                r[3] + c.nbytes <= cap and r[3] < target(c.key):
            r[0].append(c)
            runs[c.key] = (r[0], max(r[1], ready), min(r[2], use), r[3] + c.nbytes)
            continue
        if r is not None:
            out.append(r[0])
        runs[c.key] = ([c], ready, use, c.nbytes)
    return out + [r[0] for r in runs.values()]


def _plans(colls: list[Coll], model: CostModel, spans: dict, prefix: list,
           cap: int) -> dict[str, list[list[Coll]]]:
    """The candidate bucketings, by name: the fine-grained runs (``_fine``), none, as few
    buckets as the graph allows, DDP's (``DDP_BUCKET_BYTES``) and ``k`` buckets of equal
    bytes for each of ``SPLITS``. Non-contiguous inputs and the kinds never bucketed
    (``graph_types.UNBUCKETED``) stay alone in every one."""
    alone = [[c] for c in colls if c.kind in UNBUCKETED or not _contiguous(c)]
    ok = [c for c in colls if c.kind not in UNBUCKETED and _contiguous(c)]
    totals: dict[tuple, int] = {}
    for c in ok:
        totals[c.key] = totals.get(c.key, 0) + c.nbytes
    plans = {"fine": _fine(ok, model, spans, prefix, cap), "none": [[c] for c in ok],
             "one": _runs(ok, spans, cap, lambda k: float("inf")),
             "ddp": _runs(ok, spans, cap, lambda k: DDP_BUCKET_BYTES)}
    for k in SPLITS:
        plans[f"{k} buckets"] = _runs(ok, spans, cap, lambda key, k=k: totals[key] / k)
    return {name: alone + p for name, p in plans.items()}


def _contiguous(c: Coll) -> bool:
    src = c.start.args[0].meta.get("val") if isinstance(c.start.args[0], fx.Node) else None
    return src is not None and src.is_contiguous()


def bucket(graph: fx.Graph, colls: list[Coll], model: CostModel, cap: int, *,
           memory_limit: int | None = None, ce_slack: float | None = None) -> Chosen:
    """Merge the collectives as the best candidate bucketing (``_plans``) says: the lowest
    predicted step time (``stalls.simulate_plan``; ties within ``TIE`` to fewer buckets)
    of those whose results, held until their bucket's last use, keep the graph's peak
    within ``memory_limit`` bytes (no bucketing always qualifies). ``ce_slack``: buckets
    with that many times their NCCL time of compute before their wait are priced on the
    copy-engine group, as ``overlap`` will move them."""
    order = list(graph.nodes)
    pos = {n: i for i, n in enumerate(order)}
    prefix = list(itertools.accumulate((model.compute_us(n) for n in order), initial=0.0))
    # readiness order (a backward makes the last layer's gradients first), ties in graph
    # order: the same on every rank
    colls = sorted(colls, key=lambda c: (_span(c, pos)[0], pos[c.start]))
    spans = {id(c): _span(c, pos) for c in colls}
    plans = _plans(colls, model, spans, prefix, cap)
    live = live_bytes(order) if memory_limit is not None else []
    priority = _placed_priority(colls, pos)
    deps = plan_dependencies(order, colls)
    seen, times = {}, {}
    for name, plan in plans.items():
        sig = tuple(sorted(tuple(sorted(pos[m.start] for m in b)) for b in plan))
        if sig in seen:  # the same buckets as an earlier candidate
            if seen[sig] in times:
                times[name] = times[seen[sig]]
            continue
        seen[sig] = name
        if name != "none" and live and _peak_with(plan, live, pos) > memory_limit:
            continue
        priced = [_priced(b, model, spans, prefix, ce_slack) for b in plan]
        times[name] = simulate_plan(order, priced, model, priority, deps)[0]
    best = min(times.values())
    name = min((n for n in times if times[n] <= best * (1 + TIE)),
               key=lambda n: (len(plans[n]), times[n], list(plans).index(n)))
    buckets = sorted(plans[name], key=lambda b: min(pos[m.start] for m in b))
    fake = _fake_mode(graph)
    out, merged = [], 0
    for b in buckets:
        if len(b) == 1:
            out.append(b[0])
            continue
        out.append(_merge(graph, b, pos, fake))
        merged += 1
    return Chosen(out, merged, name, times)


def _placed_priority(colls: list[Coll], pos: dict) -> dict:
    """Where ``place`` will put each start (after its input) and wait (before its first
    use), as list-schedule priorities over the unplaced graph."""
    prio = {}
    for c in colls:
        src = c.start.args[0]
        prio[c.start] = (pos[src] if isinstance(src, fx.Node) else 0) + 0.5
        if c.end is not c.start:
            prio[c.end] = min((pos[u] for u in c.end.users), default=len(pos)) - 0.5
    return prio


def _priced(members: list[Coll], model: CostModel, spans: dict, prefix: list,
            ce_slack: float | None) -> Bucket:
    c, nbytes = members[0], sum(m.nbytes for m in members)
    kind, group, op, dtype = c.key
    cat = model.copy_us(nbytes) if len(members) > 1 else 0.0
    if kind in SYNC_KINDS:
        return Bucket(members, group, model.comm_us(kind, nbytes, dtype, group), 0.0, cat,
                      sync=True)
    nccl = model.comm_us(kind, nbytes, dtype, group)
    ready = max(spans[id(m)][0] for m in members)
    use = min(spans[id(m)][1] for m in members)
    if ce_slack is not None and kind == "all_reduce" and op in ("sum", "avg") and \
            copy_of(group, COPY_ENGINE) is not None and \
            all(m.start.args[0].meta["val"].dim() > 0 for m in members) and \
            prefix[use] - prefix[ready + 1] >= ce_slack * nccl:
        return Bucket(members, f"{COPY_ENGINE}:{group}", model.ce_us(nbytes),
                      CONTENTION["ce"], model.copy_us(nbytes))
    return Bucket(members, group, nccl, CONTENTION["nccl"], cat)


def _peak_with(plan: list[list[Coll]], live: list[int], pos: dict) -> int:
    """The graph's peak bytes when each bucket's result lives until its last use (its
    members' results otherwise die at their own). The packed input adds nothing: Inductor
    reduces it in place (its all-reduce lowering, ``comm_lowering._all_reduce``)."""
    delta = [0] * (len(live) + 1)
    for b in plan:
        if len(b) < 2:
            continue
        last = [max((pos[u] for u in m.end.users), default=len(live) - 1) for m in b]
        end = max(last)
        for m, at in zip(b, last, strict=True):
            delta[at + 1] += m.nbytes
            delta[end + 1] -= m.nbytes
    return max(map(operator.add, live, itertools.accumulate(delta[:-1])), default=0)


def _merge(graph: fx.Graph, members: list[Coll], pos: dict, fake) -> Coll:
    """One collective over the members' inputs packed into a flat buffer; views of its
    result replace theirs. All-gather results come back rank-major, so each member's
    part is a strided slice copied out; reduce-scatter inputs are packed rank-major."""
    anchor = _after_placeholders(max((m.start.args[0] for m in members), key=lambda n: pos[n]))
    first_use = min((u for m in members for u in m.end.users), key=lambda u: pos[u])
    key, kind = members[0].key, members[0].kind
    like = members[0].start.args[0].meta["val"]
    world = members[0].start.args[2] if kind == "reduce_scatter" else \
        members[0].start.args[1] if kind == "all_gather" else 1
    # elements each member contributes per rank (a reduce-scatter input holds all ranks')
    sizes = [m.start.args[0].meta["val"].numel() // (world if kind == "reduce_scatter" else 1)
             for m in members]
    total = sum(sizes)
    parts, last = [], anchor
    for m, n in zip(members, sizes, strict=True):
        shape = [world, n] if kind == "reduce_scatter" else [n]
        with graph.inserting_after(last):
            last = _call(graph, fake, aten.view.default, (m.start.args[0], shape), like, shape)
        parts.append(last)
    with graph.inserting_after(last):
        if kind == "reduce_scatter":  # [world, total] rank-major, then flat
            last = _call(graph, fake, aten.cat.default, (parts, 1), like, [world, total])
            with graph.inserting_after(last):
                last = _call(graph, fake, aten.view.default, (last, [-1]), like,
                             [world * total])
        else:
            last = _call(graph, fake, aten.cat.default, (parts, 0), like, [total])
    out_numel = world * total if kind == "all_gather" else total
    with graph.inserting_after(last):
        args = {"commrt_all_reduce": (last, key[1]), "all_reduce": (last, key[2], key[1]),
                "all_gather": (last, world, key[1]),
                "reduce_scatter": (last, key[2], world, key[1])}[kind]
        start = _call(graph, fake, members[0].start.target, args, like, [out_numel])
    if kind == "commrt_all_reduce":
        end = start
    else:
        with graph.inserting_before(first_use):
            end = _call(graph, fake, c10d.wait_tensor.default, (start,), like, [out_numel])
    last = end
    if kind == "all_gather":
        with graph.inserting_after(last):
            last = grid = _call(graph, fake, aten.view.default, (end, [world, total]), like,
                                [world, total])
    views, off = [], 0
    for m, n in zip(members, sizes, strict=True):
        shape = list(m.end.meta["val"].shape)
        with graph.inserting_after(last):
            if kind == "all_gather":
                sl = _call(graph, fake, aten.slice.Tensor, (grid, 1, off, off + n), like,
                           [world, n])
                with graph.inserting_after(sl):
                    sl = _call(graph, fake, aten.clone.default, (sl,), like, [world, n])
                    sl.kwargs = {"memory_format": torch.contiguous_format}
            else:
                sl = _call(graph, fake, aten.slice.Tensor, (end, 0, off, off + n), like, [n])
        with graph.inserting_after(sl):
            v = _call(graph, fake, aten.view.default, (sl, shape), like, shape)
        views.append(v)
        last, off = v, off + n
    for m, v in zip(members, views, strict=True):
        m.end.replace_all_uses_with(v)
        if m.end is not m.start:
            graph.erase_node(m.end)
        graph.erase_node(m.start)
    return Coll(start, end, kind, key[1], key, sum(m.nbytes for m in members))


def place(graph: fx.Graph, colls: list[Coll], budget: int) -> tuple[list, int, int]:
    """Starts right after their inputs, waits right before their first use; while the
    graph's peak memory (``memory.peak_bytes``) grows by more than ``budget``, undo the
    largest moves first (in batches of 1, 2, 4, ...). Collectives of a group are issued in
    the order their inputs become ready (ties in graph order): a function of the graph
    alone, so every rank issues alike. Returns (order, moves kept, peak bytes in flight)."""
    order = list(graph.nodes)
    pos = {n: i for i, n in enumerate(order)}
    movable = [c for c in colls if c.end is not c.start]
    base = peak_bytes(order)
    undo = sorted(movable, key=lambda c: (-c.nbytes, pos[c.start]))  # largest first
    kept, batch = len(undo), 1
    while True:
        moved = undo[len(undo) - kept:]
        new_order = _arrange(order, pos, sorted(moved, key=lambda c: pos[c.start]))
        if kept == 0 or peak_bytes(new_order) - base <= budget:
            break
        kept, batch = max(0, kept - batch), batch * 2
    relink(graph, new_order)
    return new_order, kept, _in_flight(new_order, movable)


def _after_placeholders(node: fx.Node) -> fx.Node:
    """``node``, or the last placeholder when ``node`` is one: inputs stay first."""
    while node.op == "placeholder" and node.next.op == "placeholder":
        node = node.next
    return node


def _arrange(order: list, pos: dict, colls: list) -> list:
    after: dict[int, list] = {}
    before: dict[int, list] = {}
    skip = set()
    first_use = {c.end: min((pos[u] for u in c.end.users), default=len(order) - 1)
                 for c in colls}
    anchors = []
    for c in colls:
        src = c.start.args[0]
        if src in first_use:  # its input is a wait that moves down to its first use
            anchor = first_use[src]
        else:
            anchor = pos[_after_placeholders(src)] if isinstance(src, fx.Node) else 0
        anchors.append((anchor, pos[c.start], c))
    for anchor, _, c in sorted(anchors, key=lambda a: a[:2]):
        after.setdefault(anchor, []).append(c.start)
        before.setdefault(first_use[c.end], []).append(c.end)
        skip.update((c.start, c.end))
    out = []
    for i, n in enumerate(order):
        out += before.get(i, [])
        if n not in skip:
            out.append(n)
        out += after.get(i, [])
    return out


def _in_flight(order: list, colls: list) -> int:
    pos = {n: i for i, n in enumerate(order)}
    delta = [0] * (len(order) + 1)
    for c in colls:
        delta[pos[c.start]] += c.nbytes
        delta[pos[c.end] + 1] -= c.nbytes
    return max(itertools.accumulate(delta), default=0)


# Compute nodes Inductor emits as their own kernels (never fused away): safe to pin to.
_ANCHORS = (aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
            aten.convolution.default)


def pin_for_inductor(graph: fx.Graph, colls: list[Coll]) -> int:
    """Make Inductor's scheduler keep the placement (its memory-driven reordering would
    otherwise sink starts back to their waits): the first matmul after a moved start
    depends on the start, and the wait depends on the last matmul or graph result before
    it (a node Inductor computes on its own anyway), through Inductor's ``control_deps``.
    Returns how many collectives were pinned."""
    try:
        from torch._inductor.fx_passes.control_dependencies import preserve_node_ordering
        from torch.utils._ordered_set import OrderedSet
    except ImportError:  # an Inductor without control_deps: placement only
        return 0
    order = list(graph.nodes)
    pos = {n: i for i, n in enumerate(order)}
    mms = [i for i, n in enumerate(order) if n.op == "call_function" and n.target in _ANCHORS]
    results = {a for o in order if o.op == "output" for a in o.all_input_nodes
               if a.op == "call_function" and a.target not in VIEWS}
    mm_set = set(mms)
    anchors = [i for i, n in enumerate(order) if i in mm_set or n in results]
    deps: dict = {}
    pinned = 0
    for c in colls:
        if c.end is c.start:
            continue
        k = bisect.bisect_right(mms, pos[c.start])
        j = bisect.bisect_left(anchors, pos[c.end]) - 1
        if j < 0 or anchors[j] <= pos[c.start]:  # nothing between start and wait
            continue
        if k < len(mms) and mms[k] < pos[c.end]:
            deps.setdefault(order[mms[k]], OrderedSet()).add(c.start)
        deps.setdefault(c.end, OrderedSet()).add(order[anchors[j]])
        pinned += 1
    preserve_node_ordering(graph, deps)
    return pinned
