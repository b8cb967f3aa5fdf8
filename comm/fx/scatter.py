"""FX pass: accumulating scatters to commrt's kernels, Inductor's partitions, or Inductor.

Before::

    out = index_put(self, [idx], values, accumulate=True)     # index_add(self, 0, idx, v)

(``scatter_add(self, 0, idx.view(-1, 1).expand_as(values), values)``, and with 1-D
values, is the same sum.)

After, where ``scatter_rule.decide`` answers ``commrt`` (narrow rows; wide or
half-precision rows that contend; rows with few values a row)::

    out = commrt.partitioned_index_put(self, idx, values, partitions)

where it answers ``inductor_partitioned`` (narrow rows, many values a row), the graph of
Inductor's partitioned scatter (``p`` copies along dim 0, ``index_put`` at
``idx + (arange(n) & (p - 1)) * rows``, summed, added to ``self``); elsewhere the node stays.

``partitioned_index_put`` spreads colliding writes over at most ``partitions`` fp32 copies
of the output and sums them. How many copies is chosen on the GPU from the indices, with
no host sync: equal pairs in a strided sample of the indices estimate the atomic adds an
address takes; one copy (plain atomics) while that stays under ``PER_ADDRESS``, else the
power of two (``MIN_COPIES`` to ``partitions``) that brings it under. On CUDA (floating
values) the Triton kernels of ``scatter_kernels`` also sum the rows of a program that share
an index before adding them, those of ``scatter_narrow`` (narrow rows, and wider rows
with one copy) add a hot row's values once a block (fp32 rows on a smaller output: the
rows of a block that share an index, with no plan), and those of ``scatter_few`` (narrow
rows into a few output rows) sum every output row a program, no copies, and those of
``scatter_shared`` (single values into up to ``SHARED_PLANE`` rows, fp32 ones into up to
``SHARED_WINDOWS`` times that in windows) sum every output element a program in shared
memory, and those of ``scatter_spread`` (fp32 narrow rows with many values a row,
fp16/bf16 rows of 4 of a scatter that Inductor would not partition: ``spread``) add value ``j`` to
copy ``j % partitions``, a block's hot rows summed first (rows of 4 on sm90+: a block that
contends sums each warp's values of one row before one atomic, ``warp_sums``). Integer
values: into few rows ``scatter_few`` in their dtype, rows of 64 or more ``scatter_ints``'
flat adds, int32 narrow rows ``scatter_narrow`` in int32, other int64 ``scatter_ints``'
native atomics; elsewhere (and off CUDA) the copies are torch ops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

import torch
import torch.fx as fx

from commrt.symm_mem import launch

from .scatter_rule import (
    COMMRT,
    HALF,
    INDUCTOR,
    INDUCTOR_PARTITIONED,
    INT_COPIES_PER_ROW,
    MEMORY_FRACTION,
    MIN_COPIES,
    NARROW_COPIES_PER_ROW,
    NARROW_ROW,
    ONE_COPY_HOT,
    ONE_COPY_HOT_MIN,
    PER_ADDRESS,
    SAMPLE,
    SHARED_PLANE,
    SHIFTS,
    SPREAD_BUSY_HOT_MIN,
    SPREAD_HOT,
    SPREAD_HOT_MIN,
    decide,
    few_ints,
    few_products,
    few_rows,
    half_adds,
    inductor_partitions,
    int_adds,
    int_flat,
    int_narrow,
    local_blocks,
    local_sums,
    narrow_copies,
    own_adds,
    pair_sample,
    partitions_for,
    shared_sums,
    spread,
    spread_busy,
    spread_copies,
    wide_hot,
    wide_on_one_copy,
    wide_own_adds,
)

aten = torch.ops.aten
__all__ = ["ScatterReport", "partitioned_scatter", "partitions_for"]

lib = torch.library.Library("commrt", "FRAGMENT")
lib.define("partitioned_index_put(Tensor self, Tensor index, Tensor values, int partitions) "
           "-> Tensor")


def _partitioned_index_put(self: torch.Tensor, index: torch.Tensor, values: torch.Tensor,
                           partitions: int) -> torch.Tensor:
    if self.is_cuda:
        args = (self.contiguous(), index.contiguous(), values.contiguous(), partitions)
        key = _replay_key(*args)
        again = _replays.get(key)
        if again is not None and launch.FAST and launch._recording is None:
            global replayed
            replayed += 1
            return again(*args[:3])
        rows = self.shape[0] if self.dim() else 0
        routes = _routes(rows, self.numel() // max(1, rows), index.numel(), values.dtype,
                         self.dtype, partitions)
        if routes:
            from .scatter_shared import Unusable

            for route in routes:
                replay: list = []
                try:
                    out = route(*args, replay=replay)
                except Unusable:  # then the next route
                    continue
                if replay:
                    if len(_replays) >= REPLAYS:
                        _replays.clear()
                    _replays[key] = replay[0]
                return out
    return _partitioned_index_put_torch(self, index, values, partitions)


# A CUDA call of a shape seen before (its launches all direct, symm_mem.launch.Prepared)
# replays the route's allocations and launches (its ``replay``) without the rule, the checks
# or the launch keys. On one H200's host an eager call of the op took 20-52 µs so against
# 38-89 with every launch keyed a call
# (docs/decisions/2026-12-03-scatter-op-replays-shape-has-seen.md;
# benchmarks/results/probe_grid_gap_host_NVIDIA_H200.json, bcb97b9, and at ea6f585 in git)
REPLAYS = 1024  # shapes kept; more clear them all
_replays: dict = {}
replayed = 0  # calls replayed (tests read it)


def forget_shapes() -> None:
    """Drop the op's replays, for code that changes what its routes launch (a probe's
    variant of a kernel module, a test that patches one): the next call of each shape takes
    the full path."""
    _replays.clear()


def _replay_key(self: torch.Tensor, index: torch.Tensor, values: torch.Tensor,
                partitions: int) -> tuple:
    """What a route's launches depend on: shapes, dtypes, 16-byte alignment, the tensors'
    device and the current one."""
    return (self.shape, self.dtype, index.shape, index.dtype, values.shape, values.dtype,
            partitions, self.data_ptr() % 16 == 0, index.data_ptr() % 16 == 0,
            values.data_ptr() % 16 == 0, self.get_device(), torch._C._cuda_getDevice())


@functools.lru_cache(maxsize=1024)
def _routes(rows: int, width: int, n: int, dtype: torch.dtype, out_dtype: torch.dtype,
            partitions: int) -> tuple:
    """The CUDA kernels for ``n`` values of ``width`` elements (``dtype``) into ``rows``
    rows of ``out_dtype``, in the order to try them (the shared sums raise ``Unusable``
    where this Triton's code cannot hold them), each called ``route(self, index, values,
    partitions, replay=list)``; empty where no kernel takes the values' dtype (torch ops
    then).
    Cached: a call of a shape seen before skips the rule."""
    from .scatter_few import few_rows_index_add
    from .scatter_ints import int_flat_index_add, int_index_add
    from .scatter_kernels import PARTS, partitioned_index_add
    from .scatter_narrow import narrow_index_add
    from .scatter_shared import shared_sums_index_add
    from .scatter_spread import spread_index_add

    def without_partitions(fn):
        @functools.wraps(fn)
        def route(self, index, values, partitions, **options):
            return fn(self, index, values, **options)
        return route

    # integers: into few rows the selects, wide rows one element a thread (no plan), int32
    # narrow rows the narrow kernels, other int64 native atomics
    if dtype not in PARTS:
        if few_ints(rows, width, n, dtype):
            return (without_partitions(few_rows_index_add),)
        if int_flat(rows, width, n, dtype) and out_dtype == dtype:
            return (int_flat_index_add,)
        if int_narrow(rows, width, n, dtype) and out_dtype == dtype:
            return (functools.partial(narrow_index_add, pair_sample=pair_sample(rows)),)
        return (int_index_add,) if int_adds(rows, width, n, dtype) else ()
    if not 0 < rows < 1 << 31:
        return (partitioned_index_add,)
    if few_rows(rows, width) or few_products(rows, width, n, dtype):
        return (without_partitions(few_rows_index_add),)
    # the shared sums, where this Triton can hold them, else what follows
    first = (without_partitions(shared_sums_index_add),) if shared_sums(rows, width, n, dtype) \
        else ()
    # fp16/bf16 rows too: the pass gives the op those of a scatter Inductor would not partition
    if partitions > 1 and spread(rows, width, n, dtype, half=True):
        return (*first, functools.partial(spread_index_add, hot=SPREAD_HOT,
                                          hot_min=SPREAD_HOT_MIN,
                                          busy=spread_busy(width),
                                          busy_hot_min=SPREAD_BUSY_HOT_MIN))
    # fp16/bf16 added in their own dtype (one copy)
    own = half_adds(rows, width, n, partitions, dtype) and out_dtype == dtype
    if width <= NARROW_ROW:
        # ... or, one copy, where the plan finds the adds uncontended
        switch = own_adds(rows, width, n, partitions, dtype) if out_dtype == dtype else 0
        return (*first, functools.partial(narrow_index_add, half_adds=own,
                                          pair_sample=pair_sample(rows), own_adds=switch))
    if partitions == 1 and wide_on_one_copy(rows, width, n, dtype):
        return (*first, functools.partial(narrow_index_add, hot=ONE_COPY_HOT,
                                          hot_min=ONE_COPY_HOT_MIN, half_adds=own))
    local = local_sums(rows, width, n, dtype)
    if partitions == 1 and local:
        columns, warps = local_blocks(rows, width, own)
        # the shared rows found before waiting for _init, and no hot-row loop, where the
        # blocks run on one warp (fp16/bf16 adds, fp32 into a few rows); fp32 blocks on 2
        # warps ran about 1 µs slower so
        # (docs/decisions/2026-11-28-scatter-blocks-plan-themselves-measured-dropped.md)
        return (*first, functools.partial(narrow_index_add, hot=0, local=local,
                                          columns=columns, warps=warps, half_adds=own,
                                          local_early=warps == 1))
    # fp16/bf16 in their dtype where the plan finds few adds an address
    if out_dtype == dtype and (switch := wide_own_adds(rows, width, n, dtype)):
        return (*first, functools.partial(partitioned_index_add, own_adds=switch))
    # hot rows as products where the plan finds few distinct rows
    if out_dtype == dtype and (hot := wide_hot(rows, width, n, dtype)):
        return (*first, functools.partial(partitioned_index_add, hot=hot))
    return (*first, partitioned_index_add)


def _partitioned_index_put_torch(self: torch.Tensor, index: torch.Tensor,
                                 values: torch.Tensor, partitions: int) -> torch.Tensor:
    """The copies in torch ops, with the kernels' copy rule but no combining of rows (CPU,
    and value dtypes the kernels do not take: integers stay bitwise exact)."""
    rows, n = self.shape[0], index.shape[0]
    index = torch.where(index < 0, index + rows, index).long()
    step = max(1, n // SAMPLE)
    sample = index[::step][:SAMPLE]
    pos = torch.arange(SAMPLE, device=index.device)
    equal = pairs = 0
    for s in range(SHIFTS):  # the kernels' estimate: equal pairs with shifted samples
        q = (pos + 1 + s * (SAMPLE // (2 * SHIFTS))) % SAMPLE
        both = (pos < sample.numel()) & (q < sample.numel())
        equal = equal + (sample[pos[both]] == sample[q[both]]).sum()
        pairs += int(both.sum())
    adds = n * equal / max(1, pairs)
    need = torch.ceil(adds / PER_ADDRESS)
    p = (2 ** torch.ceil(torch.log2(need.clamp_min(1).double()))).long()
    p = p.clamp(min(MIN_COPIES, partitions), partitions)
    p = torch.where(need <= 1, torch.ones_like(p), p)  # one copy: plain atomics
    part = torch.arange(n, device=index.device) % p
    acc_dtype = (torch.float32 if values.is_floating_point() and values.itemsize < 4
                 else values.dtype)
    copies = self.new_zeros((partitions * rows, *self.shape[1:]), dtype=acc_dtype)
    copies.index_put_([part * rows + index], values.to(acc_dtype), accumulate=True)
    summed = copies.view(partitions, rows, *self.shape[1:]).sum(0)
    return (self.to(acc_dtype) + summed).to(self.dtype)


def _partitioned_index_put_fake(self, index, values, partitions):
    # index_put(self, [index], values, accumulate=True): same shape and dtype as self
    return torch.empty_like(self)


lib.impl("partitioned_index_put", _partitioned_index_put, "CompositeExplicitAutograd")
torch.library.register_fake("commrt::partitioned_index_put", _partitioned_index_put_fake,
                            lib=lib)


@dataclasses.dataclass
class ScatterReport:
    scatters: int = 0
    rewritten: int = 0  # to commrt::partitioned_index_put
    inductor_partitioned: int = 0  # to the graph of Inductor's partitioned scatter
    decisions: list[str] = dataclasses.field(default_factory=list)  # "node: choice (why)"
    skipped: list[str] = dataclasses.field(default_factory=list)  # left as they are


def _device_memory(t: torch.Tensor) -> int:
    if t.device.type == "cuda":
        return torch.cuda.get_device_properties(t.device).total_memory
    return 16 << 30  # a stated nominal for CPU graphs


def _match(node: fx.Node):
    """(self, index, values) of an accumulating scatter along dim 0, or a reason."""
    if node.target in (aten.scatter_add.default, aten.scatter_reduce.two):
        return _match_scatter_add(node)
    if node.target == aten.index_put.default:
        accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate")
        if not accumulate:
            return None
        self_, indices, values = node.args[:3]
        if len(indices) != 1 or indices[0] is None:
            return "more than one index tensor"
        return self_, indices[0], values
    if node.target == aten.index_add.default:
        if node.args[1] != 0 or node.kwargs.get("alpha", 1) != 1:
            return "index_add along another dim or with alpha"
        return node.args[0], node.args[2], node.args[3]
    return None


# views that turn a 1-D index of n rows into one of shape (n, 1, ..., 1)
_ROW_VIEWS = (aten.reshape.default, aten.view.default, aten._unsafe_view.default,
              aten.unsqueeze.default)


def _match_scatter_add(node: fx.Node):
    """``scatter_add`` (or ``scatter_reduce`` summing with self) along dim 0 whose index
    gives each value row one output row: 1-D values, or a 1-D index viewed as a column and
    broadcast along the row (``index.view(-1, 1).expand_as(src)``). Then it is
    ``index_add(self, 0, index, src)``: (self, the 1-D index, src), else a reason."""
    if node.target == aten.scatter_reduce.two:
        reduce = node.args[4] if len(node.args) > 4 else node.kwargs.get("reduce")
        if reduce != "sum":
            return None
        if not (node.args[5] if len(node.args) > 5 else node.kwargs.get("include_self", True)):
            return "scatter_reduce without self's values"
    self_, dim, index, src = node.args[:4]
    vals = _fake_values(self_, index, src)
    if isinstance(vals, str):
        return vals
    sv, iv, vv = vals
    if sv.dim() == 0 or dim % sv.dim() != 0:
        return "scatter_add along another dim"
    if tuple(iv.shape) != tuple(vv.shape) or tuple(iv.shape[1:]) != tuple(sv.shape[1:]):
        return "scatter_add whose index is not the shape of src and of self's rows"
    rows = index
    if iv.dim() > 1:  # the row index broadcast along the row, then viewed as a column
        column = (iv.shape[0],) + (1,) * (iv.dim() - 1)
        if index.target in (aten.expand.default, aten.repeat.default) and \
                _shape(index.args[0]) == column:
            index = index.args[0]
        base = index.args[0] if index.target in _ROW_VIEWS else None
        if _shape(index) != column or _shape(base) != column[:1]:
            return "scatter_add whose index is not a 1-D row index broadcast along the row"
        rows = base
    return self_, rows, src


def _fake_values(*nodes) -> tuple | str:
    """The nodes' fake tensors, all of static shape, or a reason."""
    vals = tuple(n.meta.get("val") if isinstance(n, fx.Node) else None for n in nodes)
    if any(not isinstance(v, torch.Tensor) for v in vals):
        return "no shapes in node.meta"
    if any(isinstance(d, torch.SymInt) for v in vals for d in v.shape):
        return "dynamic shape"
    return vals


def _shape(node) -> tuple | None:
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None


def partitioned_scatter(gm: fx.GraphModule | fx.Graph, *,
                        memory_fraction: float = MEMORY_FRACTION,
                        rule=decide) -> ScatterReport:
    """Rewrite accumulating scatters in place; see the module docstring. ``rule`` has
    ``scatter_rule.decide``'s signature."""
    graph = gm.graph if isinstance(gm, fx.GraphModule) else gm
    report = ScatterReport()
    for node in list(graph.nodes):
        m = _match(node)
        if m is None:
            continue
        report.scatters += 1
        name = node.name
        choice, why = (INDUCTOR, m) if isinstance(m, str) else \
            _rewrite(graph, node, *m, memory_fraction, rule)
        report.decisions.append(f"{name}: {choice} ({why})")
        if choice == COMMRT:
            report.rewritten += 1
        elif choice == INDUCTOR_PARTITIONED:
            report.inductor_partitioned += 1
        else:
            report.skipped.append(f"{name}: {why}")
    if isinstance(gm, fx.GraphModule):
        gm.recompile()
    return report


def _static_shapes(self_, index, values) -> tuple | str:
    """(self, index, values) fake tensors of a scatter the pass can rewrite, or a reason."""
    vals = _fake_values(self_, index, values)
    if isinstance(vals, str):
        return vals
    sv, iv, vv = vals
    if iv.dim() != 1 or iv.dtype not in (torch.int32, torch.int64):
        return "index is not a 1-D int32/int64 tensor"
    if sv.dim() == 0 or tuple(vv.shape) != (iv.shape[0], *sv.shape[1:]) \
            or vv.dtype != sv.dtype:
        return "values do not match self[index] (broadcast or dtype change)"
    return sv, iv, vv


def copies(rows: int, width: int, n: int, dtype: torch.dtype, memory: int,
           fraction: float = MEMORY_FRACTION) -> int:
    """The most copies ``commrt::partitioned_index_put`` may add into (its ``partitions``),
    for ``n`` values of ``width`` elements into ``rows`` rows that the rule gives commrt."""
    # past SHARED_PLANE rows, the copies of the narrow kernels that a GPU without room for
    # the shared sums falls back to
    if p := int_flat(rows, width, n, dtype):
        return p
    if few_rows(rows, width) or few_products(rows, width, n, dtype) or \
            local_sums(rows, width, n, dtype) or \
            shared_sums(rows, width, n, dtype) and rows <= SHARED_PLANE:
        return 1
    if spread(rows, width, n, dtype, half=True):
        return spread_copies(rows * width, n, memory, fraction)
    acc_bytes = 4 if dtype in HALF else dtype.itemsize
    copies_from = INT_COPIES_PER_ROW if int_narrow(rows, width, n, dtype) else \
        NARROW_COPIES_PER_ROW
    narrow = _narrow(rows, width, n, dtype)
    # the wide kernels' fp32 copies hold rows of copy_stride(width) elements
    elements = width
    if not narrow and dtype.is_floating_point:
        from .scatter_kernels import copy_stride

        elements = copy_stride(width)
    return narrow_copies(partitions_for(rows, n, acc_bytes * elements, memory, fraction,
                                        narrow, copies_from),
                         rows, width)


def _narrow(rows: int, width: int, n: int, dtype: torch.dtype) -> bool:
    """Whether the narrow kernels take these rows (their copies follow the narrow rule)."""
    return (width <= NARROW_ROW or wide_on_one_copy(rows, width, n, dtype) or
            local_sums(rows, width, n, dtype) > 0 or int_narrow(rows, width, n, dtype))


def _rewrite(graph, node, self_, index, values, fraction, rule) -> tuple[str, str]:
    shapes = _static_shapes(self_, index, values)
    if isinstance(shapes, str):
        return INDUCTOR, shapes
    sv, iv, _ = shapes
    rows, n = sv.shape[0], iv.shape[0]
    width = sv.numel() // max(1, rows)
    memory = _device_memory(sv)
    # Inductor lowers index_put and scatter_add to its atomic scatter, a bf16 index_add
    # to aten's kernel (an fp32 or fp16 one reaches the pass as an index_put), and
    # partitions an index_put only
    choice, why = rule(rows, width, n, sv.dtype, node.target != aten.index_add.default,
                       node.target == aten.index_put.default)
    if choice == INDUCTOR_PARTITIONED:
        p = inductor_partitions(sv.numel(), n, sv.element_size(), memory)
        if p < 2:
            return INDUCTOR, f"{why}; Inductor's partitions over its memory budget"
        _inline(graph, node, _inductor_partitioned, (self_, index, values), p)
        return choice, f"{why}; {p} partitions"
    if choice != COMMRT:
        return choice, why
    p = copies(rows, width, n, sv.dtype, memory, fraction)
    # wide fp16/bf16 rows need fp32 copies (fp32 rows add into the output, the one copy),
    # but on the narrow kernels and the one-hot products
    if p < 2 and sv.dtype in HALF and not (_narrow(rows, width, n, sv.dtype) or
                                          few_products(rows, width, n, sv.dtype)):
        return INDUCTOR, f"{why}; too few values a row, or copies over the memory cap"
    with graph.inserting_before(node):
        new = graph.call_function(torch.ops.commrt.partitioned_index_put.default,
                                  (self_, index, values, p))
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)
    graph.erase_node(node)
    return choice, f"{why}; at most {p} {'copy' if p == 1 else 'copies'}"


def _inductor_partitioned(self, index, values, p: int):
    """Inductor's partitioned scatter (``reduced_atomic_contention``) along dim 0."""
    rows, n = self.shape[0], index.shape[0]
    iota = torch.ops.prims.iota.default(n, start=0, step=1, dtype=index.dtype,
                                        device=index.device, requires_grad=False)
    part = torch.ops.aten.bitwise_and.Scalar(iota, p - 1)
    # aten.full, as Inductor's pass builds it: Inductor has no lowering for aten.zeros (a
    # decomposition it applies before the post-grad passes)
    buf = torch.ops.aten.full.default([p * rows, *self.shape[1:]], 0, dtype=values.dtype,
                                      layout=torch.strided, device=values.device,
                                      pin_memory=False)
    index = torch.where(index < 0, index + rows, index)  # the offsets need it in range
    buf = torch.ops.aten.index_put.default(buf, [index + part * rows], values, True)
    summed = buf.view(p, rows, *self.shape[1:]).sum(0)
    return self + summed


def _inline(graph: fx.Graph, node: fx.Node, fn, inputs: tuple, *extra) -> None:
    """Replace ``node`` by the aten graph of ``fn(*inputs, *extra)``, traced on the inputs'
    fake values (each new node keeps its ``meta['val']``) with Inductor's decompositions, so
    that every new node is one Inductor lowers after its own decompositions ran."""
    from torch._guards import detect_fake_mode
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx

    vals = [n.meta["val"] for n in inputs]
    mode = detect_fake_mode(vals)
    with mode if mode is not None else contextlib.nullcontext():
        sub = make_fx(lambda *a: fn(*a, *extra), select_decomp_table(),
                      tracing_mode="real")(*vals)
    env = dict(zip([n for n in sub.graph.nodes if n.op == "placeholder"], inputs,
                   strict=True))
    with graph.inserting_before(node):
        out = graph.graph_copy(sub.graph, env)
    out.meta.setdefault("val", node.meta.get("val"))
    node.replace_all_uses_with(out)
    graph.erase_node(node)
