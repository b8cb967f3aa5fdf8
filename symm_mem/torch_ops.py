"""PyTorch's own symmetric-memory collective ops, run on the commrt workspace.

All-reduce: ``symm_one_shot`` -> ``torch.ops.symm_mem.one_shot_all_reduce`` (out of
place), ``symm_two_shot`` -> ``two_shot_all_reduce_``, ``multimem`` ->
``multimem_all_reduce_`` (both in place); the input must already sit at the start of the
workspace. All-gather and reduce-scatter: ``multimem_ag`` -> ``multimem_all_gather_out``
and ``symm_rs`` -> ``reduce_scatter_out`` (torch 2.11 on), which stage through the start
of the data region themselves. Multimem is only ever called when the dispatcher found a
multicast pointer and ``TORCH_SYMM_MEM_DISABLE_MULTICAST`` unset; commrt never creates a
multicast object.
"""

import torch

_OPS = {
    "symm_one_shot": "one_shot_all_reduce",
    "symm_two_shot": "two_shot_all_reduce_",
    "multimem": "multimem_all_reduce_",
}
# PyTorch's symm-mem ops for all-gather and reduce-scatter (present from torch 2.11 on).
_COLLECTIVE_OPS = ("reduce_scatter_out", "multimem_all_gather_out")


def available() -> frozenset[str]:
    """Names of the PyTorch symm-mem ops this torch provides."""
    ns = getattr(torch.ops, "symm_mem", None)
    found = set()
    for op in _OPS.values():
        try:
            getattr(ns, op)
            found.add(op)
        except (AttributeError, RuntimeError):
            pass
    return frozenset(found)


def run(algorithm: str, *, symm_inp: torch.Tensor, out: torch.Tensor, group_name: str) -> None:
    """Sum ``symm_inp`` (a workspace tensor) over the group into ``out``."""
    op = getattr(torch.ops.symm_mem, _OPS[algorithm])
    if algorithm == "symm_one_shot":
        res = op(symm_inp, "sum", group_name)
    else:
        op(symm_inp, "sum", group_name)
        res = symm_inp
    if res.data_ptr() != out.data_ptr():
        out.copy_(res.view(out.shape))


def collective_ops() -> frozenset[str]:
    """Names of PyTorch's symm-mem all-gather / reduce-scatter ops this torch provides."""
    ns = getattr(torch.ops, "symm_mem", None)
    return frozenset(op for op in _COLLECTIVE_OPS if hasattr(ns, op))


def reduce_scatter(ws, flat_in: torch.Tensor, flat_out: torch.Tensor) -> None:
    """PyTorch's ``reduce_scatter_out`` on the input at the start of the data region."""
    buf = ws.views(flat_in.dtype)[ws.rank][:flat_in.numel()]
    if buf.data_ptr() != flat_in.data_ptr():
        buf.copy_(flat_in.clone() if ws.holds(flat_in) else flat_in)
    # the peers read the data region until the op's last barrier; 16-byte aligned output
    out = flat_out if not ws.holds(flat_out) and flat_out.data_ptr() % 16 == 0 else \
        torch.empty_like(flat_out)
    torch.ops.symm_mem.reduce_scatter_out(buf, ws.group_name, False, out)
    if out is not flat_out:
        flat_out.copy_(out)


def multimem_all_gather(ws, flat_in: torch.Tensor, flat_out: torch.Tensor) -> None:
    """PyTorch's ``multimem_all_gather_out`` into the start of the data region (multicast
    stores), then out of it; the input read in 16-byte vectors, never from the region."""
    buf = ws.views(flat_out.dtype)[ws.rank][:flat_out.numel()]
    if ws.holds(flat_in) or flat_in.data_ptr() % 16:
        flat_in = flat_in.clone()
    torch.ops.symm_mem.multimem_all_gather_out(flat_in, ws.group_name, buf)
    if buf.data_ptr() != flat_out.data_ptr():
        flat_out.copy_(buf.clone() if ws.holds(flat_out) else buf)
