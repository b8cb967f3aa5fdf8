"""A step of ``overlap_and_bucket``: matmuls write their results straight into the bucket.

A merged collective packs its members with ``cat``: one more read and write of every
byte on the compute stream (for data-parallel gradients, the size of the model each
step). Where a member is a matmul whose result goes to the bucket and nowhere else
(through reshapes only), the matmul becomes ``commrt::mm_into_(a, b, bucket, offset)``:
the same ``torch.mm`` with ``out=`` a slice of the bucket, so the bits do not change.
The other members are packed as before and copied in with one ``commrt::copy_into_``.
Inductor then lowers the functional all-reduce of the bucket in place (its reinplacing
pass), so the bucket is reduced where the matmuls wrote it.

Each written member starts on a ``ALIGN_BYTES`` boundary, as a fresh allocation would
(cuBLAS picks its kernels by the output's alignment). The bucket is allocated before its
first matmul instead of at the ``cat``; a bucket whose earlier allocation would raise the
graph's peak beyond the memory budget keeps its ``cat``.
"""

from __future__ import annotations

import itertools

import torch
import torch.fx as fx

from . import memory

aten = torch.ops.aten
ALIGN_BYTES = 256
_RESHAPES = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)

lib = torch.library.Library("commrt", "FRAGMENT")
lib.define("mm_into_(Tensor a, Tensor b, Tensor(a!) out, int offset) -> ()")
lib.define("copy_into_(Tensor src, Tensor(a!) out, int offset) -> ()")


def _mm_into(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, offset: int) -> None:
    rows, cols = a.shape[0], b.shape[1]
    torch.mm(a, b, out=out[offset:offset + rows * cols].view(rows, cols))


def _copy_into(src: torch.Tensor, out: torch.Tensor, offset: int) -> None:
    out[offset:offset + src.numel()].view(src.shape).copy_(src)


def _fake(*args) -> None:
    # writes into ``out`` in place; returns nothing
    return None


lib.impl("mm_into_", _mm_into, "CompositeExplicitAutograd")
lib.impl("copy_into_", _copy_into, "CompositeExplicitAutograd")
torch.library.register_fake("commrt::mm_into_", _fake, lib=lib)
torch.library.register_fake("commrt::copy_into_", _fake, lib=lib)


def _matmul_of(part: fx.Node) -> tuple[fx.Node, list[fx.Node]] | None:
    """(the ``mm`` whose result ``part`` is, the reshapes between), when each of them has
    no other user and the result is contiguous; else None."""
    chain, n = [], part.args[0]
    while isinstance(n, fx.Node) and len(n.users) == 1 and n.op == "call_function":
        if n.target == aten.mm.default:
            v = n.meta.get("val")
            ok = isinstance(v, torch.Tensor) and v.is_contiguous() and \
                all(isinstance(a, fx.Node) for a in n.args[:2])
            return (n, chain) if ok else None
        if n.target not in _RESHAPES:
            return None
        chain.append(n)
        n = n.args[0]
    return None


def _align(elems: int, itemsize: int) -> int:
    step = max(1, ALIGN_BYTES // itemsize)
    return -(-elems // step) * step


def write_into_buckets(graph: fx.Graph, colls: list, budget: int) -> int:
    """Rewrite the merged all-reduces of ``colls`` (see the module docstring) while the
    graph's peak stays within ``budget`` bytes of what it is now. Returns how many
    members' matmuls now write into their bucket."""
    from .bucketing import _fake_mode

    fake = _fake_mode(graph)
    if fake is None:  # new nodes need fake values of the padded size
        return 0
    order = list(graph.nodes)
    pos = {n: i for i, n in enumerate(order)}
    live = memory.live_bytes(order)
    limit = max(live, default=0) + budget
    written = 0
    for c in colls:
        pk = c.packing
        if pk is None or c.kind not in ("all_reduce", "commrt_all_reduce"):
            continue
        found = [_matmul_of(p) for p in pk["parts"]]
        direct = [i for i, f in enumerate(found) if f is not None]
        if not direct:
            continue
        like = pk["cat"].meta["val"]
        first = min(pos[found[i][0]] for i in direct)
        stop = pos[pk["cat"]]
        offsets, total = {}, 0
        for i in direct:
            offsets[i] = total
            total = _align(total + pk["sizes"][i], like.element_size())
        rest = [i for i in range(len(found)) if found[i] is None]
        for i in rest:
            offsets[i] = total
            total += pk["sizes"][i]
        # the bucket now lives from the first matmul, its members' results no longer
        # apart until the cat; the other members' cat is a new temporary at the cat
        delta = [0] * (stop + 1 - first)
        delta[0] = total * like.element_size()
        for i in direct:
            delta[pos[found[i][0]] - first] -= pk["sizes"][i] * like.element_size()
        delta[-1] += sum(pk["sizes"][i] for i in rest) * like.element_size()
        grown = list(itertools.accumulate(delta))
        if any(live[first + k] + d > limit for k, d in enumerate(grown)):
            continue
        for k, d in enumerate(grown):
            live[first + k] += d
        _rewrite(graph, fake, c, found, offsets, total, order[first])
        written += len(direct)
    return written


def _rewrite(graph, fake, c, found, offsets, total, first_mm) -> None:
    from .bucketing import _call, _fake_val

    pk = c.packing
    like = pk["cat"].meta["val"]
    with graph.inserting_before(first_mm):
        bucket = _call(graph, fake, aten.empty.memory_format, ([total],), like, [total])
    bucket.kwargs = {"dtype": like.dtype, "device": like.device}
    cat, parts = pk["cat"], pk["parts"]
    rest = [p for p, f in zip(parts, found, strict=True) if f is None]
    for i, f in enumerate(found):
        if f is None:
            continue
        mm, chain = f
        with graph.inserting_before(mm):
            graph.call_function(torch.ops.commrt.mm_into_.default,
                                (mm.args[0], mm.args[1], bucket, offsets[i]))
    if rest:
        with graph.inserting_before(cat):
            src = rest[0] if len(rest) == 1 else _call(
                graph, fake, aten.cat.default, (rest, 0), like,
                [sum(pk["sizes"][i] for i, f in enumerate(found) if f is None)])
            graph.call_function(torch.ops.commrt.copy_into_.default,
                                (src, bucket, offsets[found.index(None)]))
    c.start.update_arg(0, bucket)
    graph.erase_node(cat)
    for f, part in zip(found, parts, strict=True):
        if f is not None:
            graph.erase_node(part)
            for n in f[1]:
                graph.erase_node(n)
            graph.erase_node(f[0])
    for i, sl in enumerate(pk["outs"]):
        sl.update_arg(2, offsets[i])
        sl.update_arg(3, offsets[i] + pk["sizes"][i])
    for n in dict.fromkeys((c.start, c.end)):  # fresh storage each, as before
        n.meta["val"] = _fake_val(fake, like, [total])
    c.nbytes = total * like.element_size()
    c.packing = None
