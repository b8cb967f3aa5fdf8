"""FX pass: contended accumulating scatters spread over partitions, chosen at run time.

Before::

    out = index_put(self, [idx], values, accumulate=True)     # index_add(self, 0, idx, v)

After::

    out = commrt.partitioned_index_put(self, idx, values, partitions)

``partitioned_index_put`` spreads colliding writes over ``p`` fp32 copies of the
output and sums the copies, so colliding indices stop serialising on one address.
``p`` is chosen on the GPU from the indices themselves, with no host sync: the distinct
rows of a strided sample of the indices are counted, and ``p`` is the power of two
(``MIN_COPIES`` to ``partitions``) that keeps the expected atomic adds per address under
``PER_ADDRESS``: all-colliding indices get every partition, spread ones few. On CUDA
(floating values) it runs the Triton kernels of ``scatter_kernels``, which also sum the
rows of a block that share an index before adding them (fewer atomics where indices
collide); elsewhere, and for integer values, the partitions in torch ops.
The pass picks ``partitions`` from the shapes (a power of two, at most
``MAX_PARTITIONS``, at most the values per output row) and skips a scatter whose
copies would exceed a fraction of device memory.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.fx as fx

aten = torch.ops.aten
MAX_PARTITIONS = 128  # as Inductor's pass allows for outputs under 1M elements
SAMPLE = 128  # indices sampled (strided) to estimate contention
# The rule's constants, read from the kernel sweeps (benchmarks/results/scatter.md,
# benchmarks/scatter_sweep.py): atomic adds one address may take before another copy
# pays, the fewest copies, rows a scatter program takes, and the most distinct indices
# among them for which it sums rows before adding (combining was faster wherever indices
# collide, and as fast as adding every row on H100 but 10% slower on H200 where
# nearly all 16 are distinct).
PER_ADDRESS = 512
MIN_COPIES = 16
BLOCK_ROWS = 16
LEADERS = 14
MEMORY_FRACTION = 0.05

lib = torch.library.Library("commrt", "FRAGMENT")
lib.define("partitioned_index_put(Tensor self, Tensor index, Tensor values, int partitions) "
           "-> Tensor")


def _partitioned_index_put(self: torch.Tensor, index: torch.Tensor, values: torch.Tensor,
                           partitions: int) -> torch.Tensor:
    if self.device.type == "cuda":
        from .scatter_kernels import PARTS, partitioned_index_add

        if values.dtype in PARTS:  # the value dtypes the kernels take
            return partitioned_index_add(self.contiguous(), index.contiguous(),
                                         values.contiguous(), partitions)
    return _partitioned_index_put_torch(self, index, values, partitions)


def _partitioned_index_put_torch(self: torch.Tensor, index: torch.Tensor,
                                 values: torch.Tensor, partitions: int) -> torch.Tensor:
    """The copies in torch ops, with the kernels' copy rule but no combining of rows (CPU,
    and value dtypes the kernels do not take: integers stay bitwise exact)."""
    rows, n = self.shape[0], index.shape[0]
    index = torch.where(index < 0, index + rows, index).long()
    step = max(1, n // SAMPLE)
    sample = index[::step][:SAMPLE].sort().values
    distinct = 1 + (sample[1:] != sample[:-1]).sum()
    need = (n + distinct * PER_ADDRESS - 1) // (distinct * PER_ADDRESS)
    p = (2 ** torch.ceil(torch.log2(need.clamp_min(1).double()))).long()
    p = p.clamp(min(MIN_COPIES, partitions), partitions)
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
    rewritten: int = 0
    skipped: list[str] = dataclasses.field(default_factory=list)


def _device_memory(t: torch.Tensor) -> int:
    if t.device.type == "cuda":
        return torch.cuda.get_device_properties(t.device).total_memory
    return 16 << 30  # a stated nominal for CPU graphs


def partitions_for(rows: int, n: int, row_bytes: int, memory: int,
                   fraction: float = MEMORY_FRACTION) -> int:
    """Power of two, <= MAX_PARTITIONS and <= values per row, copies within the cap."""
    p = 1 << max(0, int(math.log2(max(1, n // max(1, rows)))))
    p = min(p, MAX_PARTITIONS)
    while p > 1 and p * rows * row_bytes > fraction * memory:
        p //= 2
    return p


def _match(node: fx.Node):
    """(self, index, values) of an accumulating scatter along dim 0, or a reason."""
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


def partitioned_scatter(gm: fx.GraphModule | fx.Graph, *,
                        memory_fraction: float = MEMORY_FRACTION) -> ScatterReport:
    """Rewrite accumulating scatters in place; see the module docstring."""
    graph = gm.graph if isinstance(gm, fx.GraphModule) else gm
    report = ScatterReport()
    for node in list(graph.nodes):
        m = _match(node)
        if m is None:
            continue
        report.scatters += 1
        if isinstance(m, str):
            report.skipped.append(f"{node.name}: {m}")
            continue
        why = _rewrite(graph, node, *m, memory_fraction)
        if why:
            report.skipped.append(f"{node.name}: {why}")
        else:
            report.rewritten += 1
    if isinstance(gm, fx.GraphModule):
        gm.recompile()
    return report


def _rewrite(graph, node, self_, index, values, fraction) -> str:
    sv, iv, vv = (n.meta.get("val") for n in (self_, index, values))
    if sv is None or iv is None or vv is None:
        return "no shapes in node.meta"
    if any(isinstance(d, torch.SymInt) for d in (*sv.shape, *iv.shape, *vv.shape)):
        return "dynamic shape"
    if iv.dim() != 1 or iv.dtype not in (torch.int32, torch.int64):
        return "index is not a 1-D int32/int64 tensor"
    if tuple(vv.shape) != (iv.shape[0], *sv.shape[1:]) or vv.dtype != sv.dtype:
        return "values do not match self[index] (broadcast or dtype change)"
    rows, n = sv.shape[0], iv.shape[0]
    acc_bytes = 4 if sv.dtype in (torch.bfloat16, torch.float16) else sv.element_size()
    row_bytes = acc_bytes * (sv.numel() // max(1, rows))
    p = partitions_for(rows, n, row_bytes, _device_memory(sv), fraction)
    if p < 2:
        return "too few values per row to contend, or copies over the memory cap"
    with graph.inserting_before(node):
        new = graph.call_function(torch.ops.commrt.partitioned_index_put.default,
                                  (self_, index, values, p))
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)
    graph.erase_node(node)
    return ""
