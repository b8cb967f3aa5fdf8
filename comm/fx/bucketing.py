"""The first two steps of ``overlap_and_bucket``: merge all-reduces into buckets (when the
schedule they would get hides at least as much), then place every start right after
its inputs and every wait right before its first use, within the memory budget."""

from __future__ import annotations

import bisect
import itertools

import torch
import torch.fx as fx

from .cost import CostModel
from .graph_types import VIEWS, Coll
from .memory import peak_bytes
from .stalls import relink

c10d = torch.ops._c10d_functional
aten = torch.ops.aten


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


def bucket(graph: fx.Graph, colls: list[Coll], model: CostModel,
           cap: int) -> tuple[list[Coll], int]:
    """Merge runs of same-key collectives whose merged schedule exposes no more time."""
    order = list(graph.nodes)
    pos = {n: i for i, n in enumerate(order)}
    prefix = list(itertools.accumulate((model.compute_us(n) for n in order), initial=0.0))

    def exposed(nbytes, key, ready, use):
        cost = model.comm_us(key[0], nbytes, key[3], key[1])
        if key[0] == "commrt_all_reduce":
            return cost  # runs on the compute stream
        return max(0.0, cost - (prefix[use] - prefix[ready + 1]))

    buckets = []
    open_runs: dict[tuple, dict] = {}  # key -> members and running span / bytes / exposure
    # runs form in the order inputs become ready (a backward makes the last layer's
    # gradients first), ties in graph order: the same on every rank
    for c in sorted(colls, key=lambda c: (_span(c, pos)[0], pos[c.start])):
        src = c.start.args[0].meta.get("val") if isinstance(c.start.args[0], fx.Node) else None
        if src is None or not src.is_contiguous():
            buckets.append([c])
            continue
        ready, use = _span(c, pos)
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
    buckets += [r["members"] for r in open_runs.values()]
    buckets.sort(key=lambda b: pos[b[0].start])
    fake = _fake_mode(graph)
    out, merged = [], 0
    for b in buckets:
        if len(b) == 1:
            out.append(b[0])
            continue
        out.append(_merge(graph, b, pos, fake))
        merged += 1
    return out, merged


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
