"""``commrt.patch()``: code that calls torch's all-reduces, all-gathers and reduce-scatters
runs on commrt, unchanged.

    commrt.patch()                  # every group; or patch(groups=[tp_group or mesh])
    with commrt.patched(): ...      # the same, scoped
    commrt.unpatch()                # torch's functions and kernels again, exactly

While patched:

- ``torch.distributed.all_reduce``, ``all_gather_into_tensor`` and ``reduce_scatter_tensor``
  (Megatron-style code) are commrt's functions;
- ``_c10d_functional::all_reduce``, ``all_reduce_``, ``all_gather_into_tensor`` and
  ``reduce_scatter_tensor`` (DTensor, sequence parallelism, the functional collectives, the
  code Inductor generates for them) get CPU and CUDA kernels of commrt;
- torch.compile graphs get the ``adopt`` pass (``commrt.fx.adopt``), which rewrites
  functional all-reduces into ``commrt::all_reduce`` where commrt runs its own kernels.

A call that commrt takes goes to its group's ``Communicator``: one of commrt's kernels,
or the process group where the dispatcher says so (other ops and dtypes, gloo groups),
counted in ``commrt.stats()`` either way. A call commrt does not take (a group left out
of ``groups``, a tensor on another device than the group's, complex numbers, tensor
subclasses, an op the functional kernel does not know) runs torch's own implementation;
``plan()`` says which and why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterable

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from commrt import pg
from commrt.communicator import Communicator
from commrt.dispatch.dispatcher import Decision

# torch's all_reduce, or what stood in its place when ``patch()`` ran; the fallback.
original_all_reduce = pg.all_reduce
_MODULES = (dist, c10d)  # where the functions below are replaced
_REPLACED = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor")
# torch's own functions (``commrt.pg``), by name
_ORIGINAL = {name: getattr(pg, name) for name in _REPLACED}
_FUNCTIONAL = ("all_reduce", "all_reduce_", "all_gather_into_tensor", "reduce_scatter_tensor")
_KIND = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter"}
_KEYS = ("CPU", "CUDA")  # the backends whose tensors DTensor reduces
# backend slots no tensor commrt sees dispatches to, where torch's own functional kernels stay
_SPARE_KEYS = ("PrivateUse3", "PrivateUse2")
_OPS = {name.lower(): op for name, op in dist.ReduceOp.RedOpType.__members__.items()
        if name != "PREMUL_SUM"}  # the functional ops' op strings ("sum", "avg", ...)
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_SUM = dist.ReduceOp.SUM
_LOCAL = threading.local()  # ``inside``: commrt is running a call (its own calls go to torch)


@dataclasses.dataclass
class _Patch:
    groups: frozenset[str] | None  # names of the groups commrt takes (None: all)
    saved: dict  # (module, name) -> the function it had
    lib: torch.library.Library  # commrt's functional kernels; destroyed by unpatch()
    fx_pass: object  # the Inductor pass patch() installed (None: compile=False)
    fx_before: object  # Inductor's post-grad custom pass before it
    options: dict


_STATE: _Patch | None = None


# ----- which calls commrt takes ---------------------------------------------------------
def _group_names(groups: Iterable) -> frozenset[str]:
    names: set[str] = set()
    for g in groups:
        if isinstance(g, str):
            names.add(g)
        elif hasattr(g, "get_all_groups"):  # DeviceMesh: every dimension's group
            names.update(sub.group_name for sub in g.get_all_groups())
        else:
            names.add(g.group_name)
    return frozenset(names)


def _communicator(pg_: dist.ProcessGroup) -> Communicator | str:
    from commrt import registry

    comm = registry._BY_GROUP.get(pg_)
    if comm is not None:
        return comm
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return (f"group {pg_.group_name} has no commrt communicator yet and none can be made "
                "during CUDA-graph capture (run one eager all-reduce or commrt.init(group) "
                "before capture)")
    return registry.get(pg_)


def _taker(tensor, op, group, kind: str = "all_reduce") -> Communicator | str:
    """The communicator that takes this call, or why torch's own implementation runs."""
    state = _STATE
    if state is None:
        return "commrt is not patched in (commrt.patch())"
    if group is None:
        group = c10d.GroupMember.WORLD
        if group is None:
            return "torch.distributed is not initialised"
    if group is c10d.GroupMember.NON_GROUP_MEMBER:
        return "this rank is not a member of the group"
    if state.groups is not None and group.group_name not in state.groups:
        return f"group {group.group_name} is not one commrt.patch(groups=...) names"
    if type(tensor) not in _PLAIN:
        return f"{type(tensor).__name__} is a tensor subclass"
    if tensor.is_complex():
        return f"dtype {tensor.dtype}: torch reduces complex numbers as pairs of reals"
    comm = _communicator(group)
    if isinstance(comm, str):
        return comm
    if tensor.device != comm.device and (comm.device.type == "cuda"
                                         or tensor.device.type != comm.device.type):
        return (f"tensor is on {tensor.device}, group {group.group_name}'s communicator "
                f"reduces on {comm.device}")
    forced = comm.config.algo_for(kind)
    if forced != "auto" and kind != "all_gather" and op != dist.ReduceOp.SUM:
        return f"COMMRT_ALGO forces {forced} for {kind} and only sums run there"
    return comm


def plan(tensor: torch.Tensor, op=dist.ReduceOp.SUM, group=None) -> Decision:
    """What a patched ``dist.all_reduce(tensor, op, group)`` runs, and why.

    ``Decision("torch", why)`` where torch's own implementation runs untouched, else the
    group's communicator's decision (one of commrt's kernels, or ``nccl``: the process
    group through commrt).
    """
    taker = _taker(tensor, op, group)
    if isinstance(taker, str):
        return Decision("torch", f"not routed through commrt: {taker}")
    return taker.plan(tensor, op)


def _run(comm: Communicator, tensor: torch.Tensor, op, async_op: bool):
    _LOCAL.inside = True
    try:
        return comm.all_reduce(tensor, op=op, async_op=async_op)
    finally:
        _LOCAL.inside = False


def _run_collective(comm: Communicator, kind: str, output: torch.Tensor,
                    input: torch.Tensor, op, async_op: bool):
    _LOCAL.inside = True
    try:
        if kind == "all_gather":
            return comm.all_gather_into_tensor(output, input, async_op=async_op)
        return comm.reduce_scatter_tensor(output, input, op=op, async_op=async_op)
    finally:
        _LOCAL.inside = False


# ----- torch.distributed.all_reduce -----------------------------------------------------
def _traced(tensor, op, group, async_op):
    """Under torch.compile: torch's own function, which Dynamo rewrites to the functional
    all-reduce (its rewrite is keyed by torch's function object, not by the name commrt's
    replaces). An op the caller left out stays left out: Dynamo makes a constant of the
    caller's op, not of a default of commrt's."""
    if op is None:
        return original_all_reduce(tensor, group=group, async_op=async_op)
    return original_all_reduce(tensor, op=op, group=group, async_op=async_op)


def all_reduce(tensor, op=None, group=None, async_op=False):
    """``torch.distributed.all_reduce`` while commrt is patched in (same semantics; no
    ``op`` is a sum)."""
    if torch.compiler.is_compiling():
        return _traced(tensor, op, group, async_op)
    op = _SUM if op is None else op
    if getattr(_LOCAL, "inside", False):
        return original_all_reduce(tensor, op, group, async_op)
    comm = _taker(tensor, op, group)
    if isinstance(comm, str):
        return original_all_reduce(tensor, op, group, async_op)
    return _run(comm, tensor, op, async_op)


# ----- torch.distributed.all_gather_into_tensor / reduce_scatter_tensor -----------------
def _traced_collective(kind: str, output, input, op, group, async_op):
    """Under torch.compile: torch's own function, which Dynamo rewrites to the functional
    form (as for ``_traced``)."""
    if kind == "all_gather":
        return _ORIGINAL["all_gather_into_tensor"](output, input, group=group,
                                                   async_op=async_op)
    extra = () if op is None else (op,)
    return _ORIGINAL["reduce_scatter_tensor"](output, input, *extra, group=group,
                                              async_op=async_op)


def _dist_collective(kind: str, output, input, op, group, async_op):
    name = "all_gather_into_tensor" if kind == "all_gather" else "reduce_scatter_tensor"
    if torch.compiler.is_compiling():
        return _traced_collective(kind, output, input, op, group, async_op)
    op = _SUM if op is None else op
    extra = () if kind == "all_gather" else (op,)
    comm = None if getattr(_LOCAL, "inside", False) else _taker(input, op, group, kind)
    if comm is None or isinstance(comm, str) or type(output) not in _PLAIN:
        return _ORIGINAL[name](output, input, *extra, group=group, async_op=async_op)
    return _run_collective(comm, kind, output, input, op, async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """``torch.distributed.all_gather_into_tensor`` while commrt is patched in."""
    return _dist_collective("all_gather", output_tensor, input_tensor, None, group, async_op)


def reduce_scatter_tensor(output, input, op=None, group=None, async_op=False):
    """``torch.distributed.reduce_scatter_tensor`` while commrt is patched in (no ``op`` is a
    sum)."""
    return _dist_collective("reduce_scatter", output, input, op, group, async_op)


_PATCHED = {"all_reduce": all_reduce, "all_gather_into_tensor": all_gather_into_tensor,
            "reduce_scatter_tensor": reduce_scatter_tensor}


# ----- _c10d_functional::all_reduce(_) kernels ------------------------------------------
def _functional_kernel(original, inplace: bool):
    """A kernel for ``all_reduce`` (``inplace``: ``all_reduce_``) that routes through
    commrt, registering the process group's work for ``wait_tensor`` as torch's does."""
    def kernel(keyset, input, reduce_op, group_name):
        op = _OPS.get(reduce_op) if isinstance(reduce_op, str) else None
        if op is not None and not getattr(_LOCAL, "inside", False) \
                and not (inplace and not input.is_contiguous()):
            comm = _taker(input, op, _group_of(group_name))
            if not isinstance(comm, str):
                out = input if inplace else input.clone(memory_format=torch.contiguous_format)
                work = _run(comm, out, op, True)
                if isinstance(work, dist.Work):
                    torch._C._distributed_c10d._register_work(out, work)
                return out
        return original(keyset, input, reduce_op, group_name)
    return kernel


# ----- _c10d_functional::all_gather_into_tensor / reduce_scatter_tensor kernels ---------
def _group_of(group_name):
    return group_name if isinstance(group_name, dist.ProcessGroup) \
        else c10d._resolve_process_group(group_name)


def _collective_out(comm: Communicator, kind: str, input: torch.Tensor, op,
                    group_size: int) -> torch.Tensor:
    """Run the functional collective through ``comm`` into a fresh dim-0 output,
    registering the process group's work for ``wait_tensor`` as torch's kernel does."""
    rows = input.shape[0] * group_size if kind == "all_gather" else input.shape[0] // group_size
    out = input.new_empty((rows, *input.shape[1:]))
    work = _run_collective(comm, kind, out, input, op, True)
    if isinstance(work, dist.Work):
        torch._C._distributed_c10d._register_work(out, work)
    return out


def _gather_kernel(original):
    """A kernel for ``all_gather_into_tensor(input, group_size, group_name)``."""
    def kernel(keyset, input, group_size, group_name):
        if input.dim() and not getattr(_LOCAL, "inside", False):
            comm = _taker(input, dist.ReduceOp.SUM, _group_of(group_name), "all_gather")
            if not isinstance(comm, str) and comm.world_size == group_size:
                return _collective_out(comm, "all_gather", input, dist.ReduceOp.SUM,
                                       group_size)
        return original(keyset, input, group_size, group_name)
    return kernel


def _scatter_kernel(original):
    """A kernel for ``reduce_scatter_tensor(input, reduce_op, group_size, group_name)``."""
    def kernel(keyset, input, reduce_op, group_size, group_name):
        op = _OPS.get(reduce_op) if isinstance(reduce_op, str) else None
        if op is not None and input.dim() and input.shape[0] % group_size == 0 \
                and not getattr(_LOCAL, "inside", False):
            comm = _taker(input, op, _group_of(group_name), "reduce_scatter")
            if not isinstance(comm, str) and comm.world_size == group_size:
                return _collective_out(comm, "reduce_scatter", input, op, group_size)
        return original(keyset, input, reduce_op, group_size, group_name)
    return kernel


def _kernel_for(name: str, original):
    if name == "all_gather_into_tensor":
        return _gather_kernel(original)
    if name == "reduce_scatter_tensor":
        return _scatter_kernel(original)
    return _functional_kernel(original, name.endswith("_"))


def _torch_kernel(op, key: str):
    """torch's own kernel for ``op`` on ``key``'s tensors, as ``f(keyset, *args)``, taken
    before commrt's replaces it.

    Where it is torch's device-generic kernel (CompositeExplicitAutograd), it is reached
    by redispatching to a backend slot commrt leaves alone, which releases the GIL while
    it runs. ``SafeKernelFunction.call_boxed`` holds the GIL across the process group's
    enqueue, and gloo's worker may be waiting for the GIL under that queue's lock (to drop
    the Python objects of a finished work's tensors): a deadlock.
    """
    own = torch.library.get_kernel(op, key)
    for spare in _SPARE_KEYS:
        slot = getattr(torch._C.DispatchKey, spare, None)
        if slot is not None and repr(torch.library.get_kernel(op, spare)) == repr(own):
            keys = torch._C.DispatchKeySet(slot)
            return lambda keyset, *args: op.redispatch(keys, *args)
    return own.call_boxed


def _register_kernels() -> torch.library.Library:
    lib = torch.library.Library("_c10d_functional", "IMPL")
    for name in _FUNCTIONAL:
        op = getattr(torch.ops._c10d_functional, name).default
        for key in _KEYS:
            lib.impl(name, _kernel_for(name, _torch_kernel(op, key)), key, with_keyset=True)
    return lib


# ----- patch / unpatch ------------------------------------------------------------------
def _install_fx():
    """(the pass installed, the pass before it): the ``adopt`` pass alone, after any custom
    pass already registered; nothing where ``commrt.fx.install()`` already chose passes."""
    import torch._inductor.config as inductor_config

    from commrt.fx.registration import CommrtPass, install

    before = inductor_config.post_grad_custom_post_pass
    if isinstance(before, CommrtPass):
        return None, None
    return install(fuse_rmsnorm=False, overlap=False, partitioned_scatter=False,
                   comm_ctas=0, copy_engine=False, adopt=True), before


def patch(groups: Iterable | None = None, compile: bool = True) -> None:
    """Route torch's all-reduces, all-gathers and reduce-scatters through commrt (see the
    module docstring).

    ``groups``: process groups, device meshes or group names commrt takes (default:
    every group). ``compile``: also install the ``adopt`` pass for torch.compile.
    Calling it again replaces the previous patch.
    """
    global _STATE, original_all_reduce
    if _STATE is not None:
        unpatch()
    names = None if groups is None else _group_names(groups)
    saved = {(m, name): getattr(m, name) for m in _MODULES for name in _REPLACED}
    original_all_reduce = saved[dist, "all_reduce"]
    _ORIGINAL.update({name: saved[dist, name] for name in _REPLACED})
    lib = _register_kernels()
    fx_pass, fx_before = _install_fx() if compile else (None, None)
    _STATE = _Patch(names, saved, lib, fx_pass, fx_before,
                    {"groups": groups, "compile": compile})
    for (m, name) in saved:
        setattr(m, name, _PATCHED[name])


def unpatch() -> None:
    """Restore torch's functions, kernels and Inductor pass exactly as ``patch()`` found
    them (an Inductor pass registered since stays). No-op when not patched."""
    global _STATE
    state, _STATE = _STATE, None
    if state is None:
        return
    for (m, name), fn in state.saved.items():
        setattr(m, name, fn)
    state.lib._destroy()
    if state.fx_pass is not None:
        import torch._inductor.config as inductor_config

        if inductor_config.post_grad_custom_post_pass is state.fx_pass:
            inductor_config.post_grad_custom_post_pass = state.fx_before


def is_patched() -> bool:
    """Whether ``patch()`` is in effect."""
    return _STATE is not None


@contextlib.contextmanager
def patched(groups: Iterable | None = None, compile: bool = True):
    """``with commrt.patched(): ...``: patched inside, as before after."""
    before = dict(_STATE.options) if _STATE is not None else None
    patch(groups, compile)
    try:
        yield
    finally:
        unpatch()
        if before is not None:
            patch(**before)
