"""``Communicator``: drop-ins for ``dist.all_reduce``, ``all_gather_into_tensor`` and
``reduce_scatter_tensor`` that pick the fastest algorithm per call."""

from __future__ import annotations

import dataclasses
import logging

import torch
import torch.distributed as dist

from commrt import collective_kernels, custom, pg
from commrt import config as _config
from commrt.dispatch import table as _table  # noqa: F401  (tests patch table.find through here)
from commrt.dispatch.dispatcher import ALGORITHMS, Decision, Dispatcher, Facts, Query, why_not
from commrt.errors import CommrtError, ConfigError, MismatchError, PeerTimeoutError, WorkspaceError
from commrt.facts import agree_facts, build_profile, gather_facts
from commrt.stats import COUNTS as _COUNTS
from commrt.stats import print_at_exit, record
from commrt.symm_mem import launch as _launch
from commrt.symm_mem import torch_ops
from commrt.work import _DoneWork, _funcol_op, op_name

log = logging.getLogger("commrt")

_BACKEND_DEVICES = {"nccl": {"cuda"}, "rccl": {"cuda"}, "gloo": {"cpu", "cuda"}, "mpi": {"cpu"},
                    "ucc": {"cpu", "cuda"}, "fake": {"cpu", "cuda"}}

_SUM = dist.ReduceOp.SUM
# Reductions that are the identity over one rank (premul_sum is not: it scales).
_IDENTITY_OPS = frozenset({"sum", "avg", "max", "min", "product", "band", "bor", "bxor"})
_FAST_ENTRIES = 4096  # prebound launches kept per communicator before the cache restarts
_Tensor = torch.Tensor
_is_compiling = torch.compiler.is_compiling
# the C calls behind torch.cuda.is_current_stream_capturing and Triton's own stream lookup
# (no public spelling is as cheap: torch.cuda.current_stream().cuda_stream builds a Stream)
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_IDENTITY_KEY = ("all_reduce", "identity")
# Decisions whose launch is never replayed from the per-shape cache: nccl_symm is a copy
# and a process-group call, not one Triton launch.
_NOT_REPLAYED = frozenset({"nccl_symm"})
# All-gathers and reduce-scatters whose launch may be replayed (commrt's Triton kernels;
# the recording keeps one only where it was a single launch on the caller's tensors).
_REPLAYED_COLLECTIVES = frozenset({"ag_push", "ag_bw", "rs_pull", "rs_push"})
# The process group's all-gather and reduce-scatter as torch defines them (``commrt.pg``
# keeps them from before ``commrt.patch()`` can replace them).
_PG_COLLECTIVES = {"all_gather": pg.all_gather_into_tensor,
                   "reduce_scatter": pg.reduce_scatter_tensor}
_TORCH_NAMES = {"all_gather": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter_tensor"}


class Communicator:
    """All-reduce, all-gather and reduce-scatter over one process group (default: the world).

    Reads the ``COMMRT_*`` config once, profiles the group's devices, loads the table
    for them, checks that every rank agrees, and allocates the symmetric workspace
    when custom kernels can run (with PyTorch's symmetric-memory backend as the process
    has it, or NCCL's under ``COMMRT_SYMM_BACKEND=nccl``: then the same buffer also serves
    ``nccl_symm``). Create it before CUDA-graph capture.
    """

    def __init__(self, group: dist.ProcessGroup | None = None,
                 config: _config.Config | None = None):
        if not dist.is_initialized():
            raise CommrtError("torch.distributed is not initialised; call "
                              "dist.init_process_group() before creating a commrt Communicator")
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise WorkspaceError("a commrt Communicator cannot be created during CUDA-graph "
                                 "capture; call commrt.init() or run one eager all_reduce first")
        self.group = group if group is not None else dist.group.WORLD
        self.group_name = self.group.group_name
        self.rank = dist.get_rank(self.group)
        self.world_size = dist.get_world_size(self.group)
        self.config = config or _config.get()
        self.backend = str(dist.get_backend(self.group)).lower()
        self.device = self._pick_device()
        self._device_kinds = frozenset(self._backend_devices())
        self._forced: dict[tuple, Decision] = {}
        self.profile = build_profile(self.group, self.device, self.world_size)
        self.facts = self._agree(self._facts())
        self.dispatcher = Dispatcher(self.facts)
        self._broken = ""
        self._identity = self.world_size == 1  # every all-reduce is the identity
        self._dev_index = self.device.index if self.device.type == "cuda" else -1
        # prebound launches per call shape: (data_ptr, numel, dtype, capturing[, out_ptr])
        self._fast: dict | None = {} if self.workspace is not None and _raw_stream else None
        self._owned = self._workspace_ranges()
        if self.rank == 0:
            self._log_enabled()
        if self.config.log and dist.get_rank() == 0:
            print_at_exit()

    def __copy__(self) -> Communicator:
        """A view on the same group and workspace with its own replay cache, so that a
        view given another dispatcher (``commrt.bench.forced_view``) never replays ours."""
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        view._fast = {} if self._fast is not None else None
        return view

    # ----- set-up -------------------------------------------------------------------------
    def _backend_devices(self) -> set[str]:
        kinds: set[str] = set()
        for part in self.backend.split(","):
            dev, _, name = part.rpartition(":")
            kinds |= {dev} if dev else _BACKEND_DEVICES.get(name, {"cpu"})
        return kinds

    def _pick_device(self) -> torch.device:
        if "cuda" in self._backend_devices() and torch.cuda.is_available() \
                and self.backend not in ("gloo", "fake"):
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def _facts(self) -> Facts:
        """This rank's facts: allocates the workspace where custom kernels can run and
        settles the profile's multicast (``commrt.facts.gather_facts``)."""
        facts, self.workspace = gather_facts(self.group, self.device, self.backend, self.rank,
                                             self.world_size, self.profile, self.config)
        self.profile = facts.profile
        return facts

    def _agree(self, facts: Facts) -> Facts:
        """``facts`` as every rank agrees on them, else all nccl (``agree_facts``); a
        warning names the caller of ``Communicator()``."""
        return agree_facts(facts, self.group, self.group_name, self.rank, stacklevel=4)

    def _log_enabled(self) -> None:
        q = Query(1024, torch.bfloat16, device_type=self.device.type)
        state = [f"{a}" if why_not(a, q, self.facts) is None else f"{a} (off: "
                 f"{why_not(a, q, self.facts)})" for a, _ in ALGORITHMS]
        log.info("commrt group %s (%s, ws%d): %s", self.group_name, self.profile.generation,
                 self.world_size, "; ".join(state))

    # ----- public API -----------------------------------------------------------------
    def plan(self, tensor: torch.Tensor, op=dist.ReduceOp.SUM,
             kind: str = "all_reduce") -> Decision:
        """The decision for ``tensor`` in the current mode, without running anything.

        ``kind`` ``all_gather`` / ``reduce_scatter``: ``tensor`` is the call's output (the
        gathered tensor, this rank's shard), whose bytes the dispatcher keys on.
        """
        return self.dispatcher.decide(tensor.numel() * tensor.element_size(), tensor.dtype,
                                      op_name(op), self._mode(tensor), tensor.device.type, kind)

    def empty(self, shape, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """A tensor that lives in the workspace: an all-reduce of it skips the copy in.

        Valid until an all-reduce of another tensor reuses the workspace; reduced in place
        it holds the sum, reduced out of place (``out=``) its contents are unspecified after.
        """
        if self.workspace is None:
            raise WorkspaceError(f"no symmetric workspace for this group: "
                                 f"{self.facts.custom_blocked}")
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return self.workspace.empty(shape, dtype)

    def all_reduce(self, tensor: torch.Tensor, op=_SUM, async_op: bool = False,
                   out: torch.Tensor | None = None):
        """``dist.all_reduce`` semantics: in place (or into ``out``), work handle if async.

        An eager in-place sum of a contiguous tensor seen before (same address, size,
        dtype, capture state) replays the launch prepared the first time: one dict get
        and Triton's C launcher, nothing else.
        """
        if _is_compiling():
            res = torch.ops.commrt.all_reduce(tensor, self.group_name)
            return (out if out is not None else tensor).copy_(res)
        fast = self._fast
        if fast is not None and out is None and op is _SUM and type(tensor) is _Tensor:
            e = fast.get((tensor.data_ptr(), tensor.numel(), tensor.dtype, _capturing()))
            if e is not None and tensor.is_contiguous():
                if self._broken:
                    raise PeerTimeoutError(self._broken)
                e[0](*e[1], _raw_stream(self._dev_index), *e[2])
                _COUNTS[e[3]] += 1
                return _DoneWork(tensor) if async_op else None
        if self._identity:
            return self._identity_all_reduce(tensor, op, async_op, out)
        return self._all_reduce(tensor, op, async_op, out)

    def all_gather_into_tensor(self, output: torch.Tensor, input: torch.Tensor,
                               async_op: bool = False):
        """``dist.all_gather_into_tensor`` semantics: ``output`` receives every rank's
        ``input`` in rank order (``[world * n, ...]``, ``[world, n, ...]`` or any shape of
        ``world * input.numel()`` elements); a work handle if ``async_op``."""
        if _is_compiling():
            res = torch.ops.commrt.all_gather(input.reshape(-1), self.world_size,
                                              self.group_name)
            output.copy_(res.view(output.shape))
            return None
        if self._replayed("all_gather", output, input):
            return _DoneWork(output) if async_op else None
        return self._collective("all_gather", output, input, _SUM, async_op)

    def reduce_scatter_tensor(self, output: torch.Tensor, input: torch.Tensor, op=_SUM,
                              async_op: bool = False):
        """``dist.reduce_scatter_tensor`` semantics: ``output`` receives chunk ``rank`` (of
        ``world`` equal chunks of the flat ``input``) reduced over the ranks; a work handle
        if ``async_op``. Sums run on commrt's kernels where the dispatcher says so, other
        ops on the process group."""
        if _is_compiling():
            res = torch.ops.commrt.reduce_scatter(input.reshape(-1), _funcol_op(op),
                                                  self.world_size, self.group_name)
            output.copy_(res.view(output.shape))
            return None
        if op is _SUM and self._replayed("reduce_scatter", output, input):
            return _DoneWork(output) if async_op else None
        return self._collective("reduce_scatter", output, input, op, async_op)

    def _replayed(self, kind: str, output: torch.Tensor, input: torch.Tensor) -> bool:
        """Replay the launch an earlier sum of this kind kept for these exact tensors
        (addresses, sizes, dtype, capture state); False when there is none."""
        fast = self._fast
        if fast is None or type(output) is not _Tensor or type(input) is not _Tensor:
            return False
        e = fast.get((kind, input.data_ptr(), input.numel(), output.data_ptr(),
                      output.numel(), output.dtype, input.dtype, _capturing()))
        if e is None or not (output.is_contiguous() and input.is_contiguous()):
            return False
        if self._broken:
            raise PeerTimeoutError(self._broken)
        e[0](*e[1], _raw_stream(self._dev_index), *e[2])
        _COUNTS[e[3]] += 1
        return True

    def all_reduce_residual_rmsnorm(self, x: torch.Tensor, residual: torch.Tensor,
                                    weight: torch.Tensor, eps: float = 1e-6,
                                    algorithm: str | None = None
                                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rmsnorm(residual + all_reduce(x)) * weight, residual + all_reduce(x))``.

        One fused kernel where the dispatcher picks one (``x`` and ``residual`` are left
        as they are); otherwise the all-reduce, then the add and the norm as torch ops.
        ``residual`` and ``weight`` must be the same on every rank, as in tensor
        parallelism: a row may be normalised on another rank, with that rank's copies.
        ``algorithm`` forces one (bench, tuner); ``"nccl"`` forces the unfused path.
        """
        if torch.compiler.is_compiling():
            return torch.ops.commrt.all_reduce_residual_rmsnorm(x, residual, weight, eps,
                                                                  self.group_name)
        hidden = x.shape[-1] if x.dim() else 0
        self._validate(x, None)
        if residual.shape != x.shape or residual.dtype != x.dtype or \
                residual.device != x.device or tuple(weight.shape) != (hidden,):
            raise CommrtError(
                f"all_reduce_residual_rmsnorm needs residual shaped like x and weight of "
                f"[hidden]: got x {tuple(x.shape)} {x.dtype}, residual {tuple(residual.shape)} "
                f"{residual.dtype}, weight {tuple(weight.shape)}")
        if self._identity:  # the sum over one rank is x: add and norm locally
            record("all_reduce_residual_rmsnorm", "identity")
            new_res = residual + x
            return torch.nn.functional.rms_norm(new_res, (hidden,), weight, eps), new_res
        if self._checking(x):
            self.check_same(x, f"sum+rmsnorm(eps={eps})")
            self.check_replicated(residual=residual, weight=weight)
        nbytes = x.numel() * x.element_size()
        mode = self._mode(x)
        if algorithm is None:
            d = self.dispatcher.decide(nbytes, x.dtype, "sum", mode, x.device.type,
                                       "all_reduce_residual_rmsnorm", hidden)
        else:
            q = Query(nbytes, x.dtype, "sum", mode, x.device.type,
                      "all_reduce_residual_rmsnorm", hidden)
            why = why_not(algorithm, q, self.facts)
            if why:
                raise ConfigError(f"{algorithm} cannot run this fused call: {why}")
            d = Decision(algorithm, "requested", self.dispatcher.config_for(
                algorithm, nbytes, mode, "all_reduce_residual_rmsnorm"))
        record("all_reduce_residual_rmsnorm", d.algorithm)
        if d.algorithm == "nccl" or x.numel() == 0:
            summed = x.clone()
            self._all_reduce(summed, _SUM, False, None, counted=False)
            new_res = residual + summed
            normed = torch.nn.functional.rms_norm(new_res, (hidden,), weight, eps)
            return normed, new_res
        if self._broken:
            raise PeerTimeoutError(self._broken)
        x2 = x.reshape(-1, hidden).contiguous()
        r2 = residual.reshape(-1, hidden).contiguous()
        if self._awkward_in_workspace(x2):
            x2 = x2.clone()
        normed, new_res = torch.empty_like(x2), torch.empty_like(r2)
        custom.run_fused(d.algorithm, self.workspace, x2, r2, weight.contiguous(), normed,
                         new_res, eps, d.config, self.config.spin_timeout)
        return normed.view(x.shape), new_res.view(x.shape)

    def run_algorithm(self, algorithm: str, tensor: torch.Tensor,
                      config: dict | None = None) -> None:
        """In-place all-reduce with ``algorithm``, bypassing the table's choice (bench, tuner).

        Without ``config`` the table's launch config for that algorithm and size is used.
        Raises ``ConfigError`` saying why when the algorithm cannot run this call.
        """
        key = (algorithm, tensor.numel() * tensor.element_size(), tensor.dtype,
               self._mode(tensor), None if config is None else tuple(sorted(config.items())))
        d = self._forced.get(key)
        if d is None:
            q = Query(key[1], tensor.dtype, "sum", key[3], tensor.device.type)
            why = why_not(algorithm, q, self.facts)
            if why:
                raise ConfigError(f"{algorithm} cannot run this call: {why}")
            if config is None:
                config = self.dispatcher.config_for(algorithm, q.nbytes, q.mode)
            d = self._forced[key] = Decision(algorithm, "requested", config)
        record("all_reduce", algorithm)
        if algorithm == "nccl":
            self._process_group(tensor, dist.ReduceOp.SUM, False)
        else:
            self._run_custom(d, tensor, tensor)

    def run_flat(self, inp: torch.Tensor, out: torch.Tensor) -> None:
        """Sum a flat contiguous tensor into ``out`` (the custom op's kernel)."""
        fast = self._fast
        if fast is not None:
            key = (inp.data_ptr(), inp.numel(), inp.dtype, _capturing(), out.data_ptr())
            e = fast.get(key)
            if e is not None:
                if self._broken:
                    raise PeerTimeoutError(self._broken)
                e[0](*e[1], _raw_stream(self._dev_index), *e[2])
                _COUNTS[e[3]] += 1
                return
        if inp.numel() == 0:
            return
        if self._identity:
            _COUNTS[_IDENTITY_KEY] += 1
            out.copy_(inp)
            return
        d = self.dispatcher.decide(inp.numel() * inp.element_size(), inp.dtype, "sum",
                                   self._mode(inp), inp.device.type)
        record("all_reduce", d.algorithm)
        if d.algorithm == "nccl":
            out.copy_(inp)
            pg.all_reduce(out, group=self.group)
        elif fast is not None and not self.config.check and d.algorithm not in _NOT_REPLAYED:
            self._run_recorded(key, d, inp, out)
        else:
            self._custom(d, inp, out)

    def check_health(self) -> None:
        """Raise if a kernel gave up waiting for a peer (synchronises the device)."""
        if self._broken:
            raise PeerTimeoutError(self._broken)
        if self.workspace is not None:
            peer = self.workspace.peer_error()
            if peer:
                self._broken = (
                    f"rank {self.rank} of group {self.group_name}: peer rank {peer - 1} did not "
                    f"arrive within COMMRT_SPIN_TIMEOUT={self.config.spin_timeout:g} s; a rank "
                    "skipped or reordered a collective. This communicator is now unusable.")
                raise PeerTimeoutError(self._broken)

    def check_same(self, tensor: torch.Tensor, opn: str, kind: str = "all_reduce") -> None:
        """Compare shape, dtype and op across ranks; raise on every rank if they differ."""
        mine = (tuple(tensor.shape), str(tensor.dtype).replace("torch.", ""), opn)
        gathered: list = [None] * self.world_size
        dist.all_gather_object(gathered, mine, group=self.group)
        if any(g != mine for g in gathered):
            lines = "; ".join(f"rank {r}: shape {g[0]} {g[1]} {g[2]}"
                              for r, g in enumerate(gathered))
            raise MismatchError(f"commrt.{kind} called with different arguments across "
                                f"the ranks of group {self.group_name}: {lines}")

    def check_replicated(self, **tensors: torch.Tensor) -> None:
        """Compare fingerprints of tensors that must be equal on every rank (the fused
        op's residual and weight); raise on every rank, naming them, if they differ."""
        def fingerprint(t: torch.Tensor) -> tuple[float, float]:
            flat = t.detach().reshape(-1).double()
            ramp = torch.arange(1, flat.numel() + 1, device=flat.device, dtype=torch.float64)
            return float(flat.sum()), float((flat * ramp).sum())
        mine = {name: fingerprint(t) for name, t in tensors.items()}
        gathered: list = [None] * self.world_size
        dist.all_gather_object(gathered, mine, group=self.group)
        differ = [name for name in mine if any(g[name] != mine[name] for g in gathered)]
        if differ:
            raise MismatchError(f"{' and '.join(differ)} must be the same on every rank of group "
                                f"{self.group_name} (tensor parallelism replicates them), but "
                                f"they differ across ranks")

    # ----- internals ------------------------------------------------------------------
    def _all_reduce(self, tensor: torch.Tensor, op, async_op: bool, out: torch.Tensor | None,
                    counted: bool = True):
        """Everything but the replay: validate, decide, run (and prepare the replay)."""
        self._validate(tensor, out)
        opn = "sum" if op is _SUM else op_name(op)
        if self.config.check and self._checking(tensor):
            self.check_same(tensor, opn)
        target = tensor if out is None else out
        numel = target.numel()
        if numel == 0:
            return _DoneWork(target) if async_op else None
        mode = self._mode(target)
        devtype = "cuda" if target.is_cuda else target.device.type  # no torch.device made
        ws = self.workspace
        d = self.dispatcher.decide(numel * target.element_size(), target.dtype, opn, mode,
                                   devtype, resident=ws is not None and ws.holds(target))
        if self.config.log and self.rank == 0:
            log.info("commrt all_reduce %s %s %s: %s", tuple(target.shape), target.dtype, mode, d)
        if counted:
            record("all_reduce", d.algorithm)
        if d.algorithm == "nccl":
            if out is not None:
                out.copy_(tensor)
            return self._process_group(target, op, async_op)
        if self._fast is not None and out is None and not self.config.check \
                and d.algorithm not in _NOT_REPLAYED \
                and type(tensor) is _Tensor and tensor.is_contiguous():
            key = (tensor.data_ptr(), numel, tensor.dtype, mode == "graph")
            self._run_recorded(key, d, tensor, tensor)
        else:
            self._run_custom(d, tensor, target)
        return _DoneWork(target) if async_op else None

    def _collective(self, kind: str, output: torch.Tensor, input: torch.Tensor, op,
                    async_op: bool):
        """All-gather or reduce-scatter: validate, decide, run ours or the process group's."""
        self._check_sizes(kind, output, input)
        opn = "sum" if op is _SUM else op_name(op)
        if self._checking(input):
            self.check_same(input, opn, _TORCH_NAMES[kind])
        if self._identity and opn in _IDENTITY_OPS:  # one rank: the input is the result
            record(kind, "identity")
            output.copy_(input.reshape(output.shape))
            return _DoneWork(output) if async_op else None
        mode = self._mode(output)
        d = self.dispatcher.decide(output.numel() * output.element_size(), output.dtype, opn,
                                   mode, output.device.type, kind)
        if self.config.log and self.rank == 0:
            log.info("commrt %s %s %s %s: %s", kind, tuple(output.shape), output.dtype, mode, d)
        record(kind, d.algorithm)
        if d.algorithm == "nccl":
            return self._process_group_collective(kind, output, input, op, async_op)
        replayable = self._fast is not None and not self.config.check and opn == "sum" \
            and d.algorithm in _REPLAYED_COLLECTIVES and type(output) is _Tensor \
            and type(input) is _Tensor and output.is_contiguous() and input.is_contiguous()
        if replayable and output.numel():
            key = (kind, input.data_ptr(), input.numel(), output.data_ptr(), output.numel(),
                   output.dtype, input.dtype, mode == "graph")
            self._run_recorded(key, d, input, output, kind)
        elif output.numel():
            self._run_collective(kind, d, output, input)
        return _DoneWork(output) if async_op else None

    def _check_sizes(self, kind: str, output: torch.Tensor, input: torch.Tensor) -> None:
        """torch's checks (same dtype and device, world times the elements), said plainly."""
        name = _TORCH_NAMES[kind]
        for t in (output, input):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"commrt.{name} expects torch.Tensors, got {type(t)}")
            self._validate(t, None)
        big, small = (output, input) if kind == "all_gather" else (input, output)
        if output.dtype != input.dtype or big.numel() != self.world_size * small.numel():
            raise CommrtError(
                f"commrt.{name} on group {self.group_name} (world size {self.world_size}) "
                f"needs the {'output' if big is output else 'input'} to hold world size times "
                f"the {'input' if big is output else 'output'}'s elements, of one dtype: got "
                f"output {tuple(output.shape)} {output.dtype}, input {tuple(input.shape)} "
                f"{input.dtype}")

    def _process_group_collective(self, kind: str, output: torch.Tensor,
                                  input: torch.Tensor, op, async_op: bool):
        """torch's own collective on flat contiguous tensors (any output shape, as NCCL
        takes; gloo wants dim 0 scaled), copied into a non-contiguous ``output`` after."""
        flat_in = input.reshape(-1) if input.is_contiguous() else input.contiguous().view(-1)
        direct = output.is_contiguous()
        flat_out = output.view(-1) if direct else output.new_empty(output.numel())
        extra = {"op": op} if kind == "reduce_scatter" else {}
        work = _PG_COLLECTIVES[kind](flat_out, flat_in, group=self.group, async_op=async_op,
                                     **extra)
        if direct:
            return work
        if not async_op:
            output.copy_(flat_out.view(output.shape))
            return None
        return _DoneWork(output, after=lambda: output.copy_(flat_out.view(output.shape)),
                         inner=work)

    def _run_collective(self, kind: str, d: Decision, output: torch.Tensor,
                        input: torch.Tensor) -> None:
        """One of commrt's all-gathers or reduce-scatters on flat contiguous tensors."""
        if self._broken:
            raise PeerTimeoutError(self._broken)
        flat_in = input.reshape(-1) if input.is_contiguous() else input.contiguous().view(-1)
        direct = output.is_contiguous()
        flat_out = output.view(-1) if direct else output.new_empty(output.numel())
        ws, timeout = self.workspace, self.config.spin_timeout
        if d.algorithm == "multimem_ag":
            torch_ops.multimem_all_gather(ws, flat_in, flat_out)
        elif d.algorithm == "symm_rs":
            torch_ops.reduce_scatter(ws, flat_in, flat_out)
        elif kind == "all_gather":
            collective_kernels.run_all_gather(d.algorithm, ws, flat_in, flat_out,
                                              dict(d.config), timeout)
        else:
            collective_kernels.run_reduce_scatter(d.algorithm, ws, flat_in, flat_out,
                                                  dict(d.config), timeout)
        if not direct:
            output.copy_(flat_out.view(output.shape))

    def _identity_all_reduce(self, tensor: torch.Tensor, op, async_op: bool,
                             out: torch.Tensor | None):
        """World size 1: the input is the result; no process group, no kernel."""
        if out is not None or not isinstance(tensor, _Tensor):
            self._validate(tensor, out)
        if op is not _SUM and op_name(op) not in _IDENTITY_OPS:
            return self._all_reduce(tensor, op, async_op, out)
        _COUNTS[_IDENTITY_KEY] += 1
        if out is not None:
            out.copy_(tensor)
        return _DoneWork(out if out is not None else tensor) if async_op else None

    def _run_recorded(self, key: tuple, d: Decision, src: torch.Tensor,
                      dst: torch.Tensor, kind: str = "all_reduce") -> None:
        """Run ``d``; keep its launch under ``key`` when it was one Triton launch reading
        and writing only ``src``, ``dst`` and the workspace (no temporaries)."""
        rec = _launch.recording()
        try:
            if kind == "all_reduce":
                self._run_custom(d, src, dst)
            else:
                self._run_collective(kind, d, dst, src)
        finally:
            _launch.stop_recording()
        if len(rec) != 1 or rec[0] is None:
            return
        fn, head, tail, ptrs = rec[0]
        mine = (src.data_ptr(), dst.data_ptr())
        if all(p in mine or self._in_workspace(p) for p in ptrs):
            if len(self._fast) >= _FAST_ENTRIES:
                self._fast.clear()
            self._fast[key] = (fn, head, tail, (kind, d.algorithm))

    def _workspace_ranges(self) -> tuple[tuple[int, int], ...]:
        ws = self.workspace
        if ws is None:
            return ()
        owned = [*ws.buffers, ws.err, ws.meta, ws.pad_tab, ws.push_tab]
        return tuple((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in owned)

    def _in_workspace(self, ptr: int) -> bool:
        return any(lo <= ptr < hi for lo, hi in self._owned)

    def _checking(self, t: torch.Tensor) -> bool:
        """COMMRT_CHECK, except inside CUDA-graph capture (the comparison synchronises)."""
        return self.config.check and self._mode(t) == "eager"

    def _mode(self, t: torch.Tensor) -> str:
        # the C check behind torch.cuda.is_current_stream_capturing, without its frame (hot
        # path); only reached for CUDA tensors, so only on CUDA builds
        if t.is_cuda and torch._C._cuda_isCurrentStreamCapturing():
            return "graph"
        return "eager"

    def _validate(self, tensor: torch.Tensor, out: torch.Tensor | None) -> None:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"commrt.all_reduce expects a torch.Tensor, got {type(tensor)}")
        kinds = self._device_kinds
        dev = tensor.device
        if dev != self.device:  # the common case skips both checks below
            if dev.type not in kinds:
                raise CommrtError(
                    f"tensor is on {dev} but group {self.group_name} uses the "
                    f"{self.backend} backend, which reduces {' or '.join(sorted(kinds))} "
                    "tensors")
            if self.device.type == "cuda":
                raise CommrtError(f"tensor is on {dev} but this rank's device is "
                                  f"{self.device}; move it or set torch.cuda.set_device()")
        if out is not None and (out.shape != tensor.shape or out.dtype != tensor.dtype
                                or out.device != tensor.device):
            raise CommrtError(
                f"out must match the input: got {tuple(out.shape)} {out.dtype} on {out.device}, "
                f"input is {tuple(tensor.shape)} {tensor.dtype} on {tensor.device}")

    def _process_group(self, target: torch.Tensor, op, async_op: bool):
        if target.is_contiguous():
            return pg.all_reduce(target, op=op, group=self.group, async_op=async_op)
        flat = target.contiguous()
        work = pg.all_reduce(flat, op=op, group=self.group, async_op=async_op)
        if not async_op:
            target.copy_(flat)
            return None
        return _DoneWork(target, after=lambda: target.copy_(flat), inner=work)

    def _run_custom(self, d: Decision, src: torch.Tensor, dst: torch.Tensor) -> None:
        if self._broken:
            raise PeerTimeoutError(self._broken)
        if src.dim() == 1 and src.is_contiguous():  # no view to make: a host microsecond
            flat_in = src
        else:
            flat_in = src.view(-1) if src.is_contiguous() else src.contiguous().view(-1)
        if self._awkward_in_workspace(flat_in):
            flat_in = flat_in.clone()
        direct = dst.is_contiguous() and not self._awkward_in_workspace(dst)
        flat_out = (dst if dst.dim() == 1 else dst.view(-1)) if direct else \
            torch.empty_like(flat_in)
        self._custom(d, flat_in, flat_out)
        if not direct:
            dst.copy_(flat_out.view(dst.shape))

    def _awkward_in_workspace(self, t: torch.Tensor) -> bool:
        ws = self.workspace
        return ws is not None and ws.holds(t) and not ws.is_data_start(t)

    def _custom(self, d: Decision, inp: torch.Tensor, out: torch.Tensor) -> None:
        custom.run(d.algorithm, self.workspace, inp, out, d.config, self.config.spin_timeout,
                   self.group)

    def close(self) -> None:
        """Free the workspace. The communicator falls back to the process group after."""
        self.workspace = None
        self._fast, self._owned = None, ()
        self.facts = dataclasses.replace(self.facts, custom_blocked="communicator closed")
        self.dispatcher = Dispatcher(self.facts)

