"""PyTorch's own symmetric-memory all-reduce ops, run on the commrt workspace.

``symm_one_shot`` -> ``torch.ops.symm_mem.one_shot_all_reduce`` (out of place),
``symm_two_shot`` -> ``two_shot_all_reduce_``, ``multimem`` -> ``multimem_all_reduce_``
(both in place). The input must already sit at the start of the workspace.
Multimem is only ever called when the dispatcher found a multicast pointer and
``TORCH_SYMM_MEM_DISABLE_MULTICAST`` unset; commrt never creates a multicast object.
"""

import torch

_OPS = {
    "symm_one_shot": "one_shot_all_reduce",
    "symm_two_shot": "two_shot_all_reduce_",
    "multimem": "multimem_all_reduce_",
}


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
