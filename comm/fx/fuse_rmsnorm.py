"""FX pattern pass: all-reduce -> residual add -> RMSNorm becomes one fused commrt op.

Before (aten, as torch.compile traces it)::

    r = wait_tensor(_c10d_functional.all_reduce(x, "sum", g))   # or commrt.all_reduce(x, g)
    h = add(r, residual)                                          # same shape, no alpha
    f = convert_element_type(h, float32)                          # optional
    n = mul(f, rsqrt(add(mean(pow(f, 2), [-1], True), eps)))      # or mul(f, f)
    y = mul(convert_element_type(n, dtype), w)   |   convert_element_type(mul(n, w), dtype)

After::

    y, h = commrt.all_reduce_residual_rmsnorm(x, residual, w, eps, g)

Only exact matches are rewritten: eps must be a constant, the mean must run over the
last dim, the add must not broadcast, the all-reduce result and the norm's
intermediates must have no other users, and ``w`` must be ``[hidden]``.
"""

from __future__ import annotations

import dataclasses
import operator

import torch
import torch.fx as fx

from .graph_types import WAIT, node_val

aten = torch.ops.aten
_FUNC_AR = torch.ops._c10d_functional.all_reduce.default
_CONVERT = torch.ops.prims.convert_element_type.default
_ADDS = (aten.add.Tensor, aten.add.Scalar)
_MULS = (aten.mul.Tensor,)


@dataclasses.dataclass
class FusionReport:
    """What the pass saw: every all-reduce, and why each unfused one stayed."""

    all_reduces: int = 0
    fused: int = 0
    skipped: list[str] = dataclasses.field(default_factory=list)


def _cast_to(n: fx.Node):
    """The dtype ``n`` converts to, if it is a pure dtype conversion (either spelling)."""
    if n.target == _CONVERT:
        return n.args[1]
    if n.target != aten._to_copy.default or len(n.args) != 1 or "dtype" not in n.kwargs:
        return None
    src = node_val(n.args[0])
    same_place = set(n.kwargs) <= {"dtype", "layout", "device"} \
        and n.kwargs.get("layout", torch.strided) == torch.strided \
        and (src is None or torch.device(n.kwargs.get("device", src.device)) == src.device)
    return n.kwargs["dtype"] if same_place else None


def _only_user(n: fx.Node) -> fx.Node | None:
    users = list(n.users)
    return users[0] if len(users) == 1 else None


def _written_back(result: fx.Node) -> fx.Node:
    """aot graphs write an in-place all-reduce back with ``copy(dst, result)``: use that."""
    copy = _only_user(result)
    if copy is not None and copy.target == aten.copy.default and copy.args[1] is result:
        return copy
    return result


def _all_reduce_of(node: fx.Node):
    """(source, group, result node) for a summing all-reduce, else None."""
    if node.target == _FUNC_AR and node.args[1] == "sum":
        wait = _only_user(node)
        if wait is not None and wait.target == WAIT:
            return node.args[0], node.args[2], _written_back(wait)
    if node.target == torch.ops.commrt.all_reduce.default:
        return node.args[0], node.args[1], _written_back(node)
    return None


def _match_norm(h: fx.Node):
    """(eps, weight, output node, pattern nodes) for an RMSNorm of ``h``, else a reason."""
    users = list(h.users)
    base = next((u for u in users if _cast_to(u) == torch.float32), h)
    sq = next((u for u in base.users if (u.target == aten.pow.Tensor_Scalar and u.args[1] == 2)
               or (u.target in _MULS and u.args == (base, base))), None)
    mean = _only_user(sq) if sq is not None else None
    if mean is None or mean.target != aten.mean.dim:
        return "no mean of squares"
    dims, keep = mean.args[1], (mean.args[2] if len(mean.args) > 2 else False)
    ndim = node_val(h).dim()
    if not keep or list(dims) not in ([-1], [ndim - 1]):
        return "the mean is not over the last dim"
    add_eps = _only_user(mean)
    if add_eps is None or add_eps.target not in _ADDS or not isinstance(add_eps.args[1], float):
        return "eps is not a constant"
    rs = _only_user(add_eps)
    if rs is None or rs.target != aten.rsqrt.default:
        return "no rsqrt"
    scaled = _only_user(rs)
    if scaled is None or scaled.target not in _MULS or base not in scaled.args:
        return "rsqrt is not applied to the input"
    nxt = _only_user(scaled)
    nodes = [base, sq, mean, add_eps, rs, scaled]
    if nxt is not None and _cast_to(nxt) is not None:  # convert, then * weight
        out = _only_user(nxt)
        nodes.append(nxt)
        weight = out.args[1] if out is not None and out.target in _MULS and \
            out.args[0] is nxt else None
    elif nxt is not None and nxt.target in _MULS:  # * weight, then convert (F.rms_norm)
        weight = nxt.args[1] if nxt.args[0] is scaled else nxt.args[0]
        conv = _only_user(nxt)
        out = conv if conv is not None and _cast_to(conv) is not None else nxt
        if out is conv:
            nodes.append(nxt)
    else:
        return "no weight multiply"
    wv = node_val(weight)
    if wv is None or tuple(wv.shape) != (node_val(h).shape[-1],):
        return "the weight is not [hidden]"
    if node_val(out).dtype != node_val(h).dtype:
        return "the norm's output dtype differs from the residual's"
    return add_eps.args[1], weight, out, nodes


def _try_fuse(graph: fx.Graph, node: fx.Node, order: dict) -> str | None:
    found = _all_reduce_of(node)
    if found is None:
        return None
    src, group, result = found
    add = _only_user(result)
    if add is None or add.target != aten.add.Tensor or len(add.args) != 2 or add.kwargs:
        return "the all-reduce result is not used by exactly one add"
    residual = add.args[1] if add.args[0] is result else add.args[0]
    rv, resv, xv = node_val(result), node_val(residual), node_val(src)
    if rv is None or resv is None or xv is None or tuple(resv.shape) != tuple(rv.shape) \
            or resv.dtype != rv.dtype or xv.dtype != rv.dtype:
        return "the residual add broadcasts or changes dtype"
    match = _match_norm(add)
    if isinstance(match, str):
        return match
    eps, weight, out, nodes = match
    if order[weight] > order[add]:
        return "the weight is defined after the add"
    with graph.inserting_after(add):
        fused = graph.call_function(torch.ops.commrt.all_reduce_residual_rmsnorm.default,
                                    (src, residual, weight, eps, group))
    with graph.inserting_after(fused):
        normed = graph.call_function(operator.getitem, (fused, 0))
    with graph.inserting_after(normed):
        new_res = graph.call_function(operator.getitem, (fused, 1))
    fused.meta["val"] = (node_val(out), node_val(add))
    normed.meta.update(out.meta)
    new_res.meta.update(add.meta)
    out.replace_all_uses_with(normed)
    add.replace_all_uses_with(new_res)
    inner = result.args[1] if result.target == aten.copy.default else None
    for dead in [out, *reversed(nodes), add, result, inner, node]:
        if dead is not None and dead in graph.nodes and not dead.users:
            graph.erase_node(dead)
    return ""


def fuse_allreduce_rmsnorm(gm: fx.GraphModule | fx.Graph) -> FusionReport:
    """Rewrite every exact all-reduce -> add -> RMSNorm in place; see the module docstring."""
    graph = gm.graph if isinstance(gm, fx.GraphModule) else gm
    report = FusionReport()
    order = {n: i for i, n in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        if node.graph is not graph or node not in order:
            continue
        if node.target not in (_FUNC_AR, torch.ops.commrt.all_reduce.default):
            continue
        report.all_reduces += 1
        why = _try_fuse(graph, node, order)
        if why == "":
            report.fused += 1
        elif why:
            report.skipped.append(f"{node.name}: {why}")
    graph.lint()
    if isinstance(gm, fx.GraphModule):
        gm.recompile()
    return report
