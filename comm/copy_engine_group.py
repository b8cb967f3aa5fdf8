"""A process group whose collectives move data with the copy engines, on a side stream.

The FX overlap pass runs hidden all-reduces on it (``commrt.fx.install(copy_engine=True)``):
at world size 2 as ``exchange`` (``torch.ops.commrt.ce_exchange``: each rank packs its data
into a landing buffer, the peer's copy engines read it from there) plus a sum that the
compute does, elsewhere as all-gathers plus that sum. A functional
``all_gather_into_tensor`` or ``all_reduce`` (sum or avg) on this group starts
``symm_mem.copy_engine``'s on a stream of its own after the work queued so far, and
``wait_tensor`` makes the caller's stream wait for it; every other collective raises.
Repeated calls replay recorded CUDA graphs. The group owns a symmetric workspace of its
own (the communicator's serves calls on the compute stream, which may run at the same
time).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from commrt.errors import CommrtError, PeerTimeoutError
from commrt.symm_mem import copy_engine

BACKEND = "commrt_ce"
GRAPHS = 128  # recorded calls a group keeps (see ``CopyEngineGroup._run``)
_pending: list = []  # the workspace the next group made by ``make`` takes


class _Pending(dist.Work):
    """The collective queued on the group's stream; ``wait`` orders the caller's stream
    after it and keeps its tensors alive until then."""

    def __init__(self, done: torch.cuda.Event | None, keep, device: torch.device):
        super().__init__()
        self._done, self._keep, self._device = done, keep, device

    def wait(self, timeout=None) -> bool:  # noqa: ARG002 (c10d's signature)
        if self._done is not None:
            torch.cuda.current_stream(self._device).wait_event(self._done)
        self._keep = None
        return True

    def is_completed(self) -> bool:
        return self._done is None or self._done.query()

    def is_success(self) -> bool:
        return self.is_completed()


class CopyEngineGroup(dist.ProcessGroup):
    """``all_reduce`` and ``all_gather_into_tensor`` over ``ws``'s ranks by
    ``symm_mem.copy_engine`` (see the module docstring)."""

    def __init__(self, rank: int, size: int, ws, spin_timeout: float, store=None):
        super().__init__(rank, size)
        self.ws = ws
        self._store = store
        self._landing: list[torch.Tensor] = []  # every rank's landing buffer (uint8)
        self._keep: list = []  # earlier landing buffers (tensors may still point into them)
        self.spin_timeout = spin_timeout
        cuda = ws.device.type == "cuda"
        # high priority: its sums and barriers go ahead of queued compute blocks, so the
        # copies are not held up behind a long matmul
        self.stream = torch.cuda.Stream(ws.device, priority=-1) if cuda else None
        self._timeout = int(spin_timeout * 1e9) if cuda else 30_000  # interpreter: polls
        self._broken = ""
        self._graphs: dict[tuple, torch.cuda.CUDAGraph] = {}
        self._seen: set[tuple] = set()

    def getBackendName(self) -> str:  # noqa: N802 (c10d's name)
        return BACKEND

    supports_splitting = False

    def _get_backend(self, device):  # noqa: ARG002
        # new_group asks a group bound to a device whether its backend can split: this
        # Python group is its own backend (it registers none with c10d)
        return self

    @property
    def group_name(self) -> str:
        # c10d keeps a Python group's name in its registry, not on the group
        return dist.distributed_c10d._world.pg_names[self]

    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp.op if opts is not None else dist.ReduceOp.SUM
        if op not in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            raise CommrtError(f"{BACKEND} group: all_reduce supports sum and avg, "
                              f"not {op.name.lower()}")
        if len(tensors) != 1:
            raise CommrtError(f"{BACKEND} group: one tensor per all_reduce, got {len(tensors)}")
        (x,) = tensors
        if x.device != self.ws.device or not x.is_contiguous():
            kind = "a contiguous" if x.is_contiguous() else "a non-contiguous"
            raise CommrtError(f"{BACKEND} group: all_reduce needs a contiguous tensor on "
                              f"{self.ws.device}, got {kind} tensor on {x.device}")
        return self._start("all_reduce", [(x.view(-1), op == dist.ReduceOp.AVG)], x)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):  # noqa: ARG002
        """Each ``outputs[i]`` = every rank's ``inputs[i]``, in rank order (dim 0)."""
        pairs = []
        for out, x in zip(outputs, inputs, strict=True):
            if x.device != self.ws.device or not (x.is_contiguous() and out.is_contiguous()):
                raise CommrtError(f"{BACKEND} group: all_gather needs contiguous tensors on "
                                  f"{self.ws.device}")
            if out.numel() != x.numel() * self.size() or out.dtype != x.dtype:
                raise CommrtError(f"{BACKEND} group: all_gather output of {out.numel()} "
                                  f"{out.dtype} for {self.size()} x {x.numel()} {x.dtype}")
            pairs.append((x.view(-1), out.view(-1)))
        return self._start("all_gather", pairs, outputs)

    def exchange(self, parts: list[torch.Tensor], offset: int, total: int) -> torch.Tensor:
        """Every other rank's ``parts``, flat and packed in order (in rank order), as one
        new tensor whose ``wait_tensor`` orders the caller's stream after its copies.

        The caller's stream packs ``parts`` at byte ``offset`` of this rank's landing
        buffer (an SM kernel: a same-device copy would stall the compute this hides
        behind); the group's stream then reads the peers' from theirs
        (``symm_mem.copy_engine.pull``). Every rank calls it alike, in the same order;
        one call's ``[offset, offset + bytes)`` must not be used by another whose result
        is still unread. The landing buffers grow to ``total`` bytes at a call that asks
        for more (a rendezvous, so never during CUDA-graph capture)."""
        if self._broken:
            raise PeerTimeoutError(self._broken)
        if self.size() < 2:
            raise CommrtError(f"{BACKEND} group: exchange needs at least two ranks")
        dtype = parts[0].dtype
        bad = [p for p in parts if p.dtype != dtype or p.device != self.ws.device]
        if bad:
            raise CommrtError(f"{BACKEND} group: exchange needs parts of one dtype on "
                              f"{self.ws.device}, got {bad[0].dtype} on {bad[0].device}")
        n = sum(p.numel() for p in parts)
        size = torch.empty((), dtype=dtype).element_size()
        if offset % 16 or offset + n * size > total:
            raise CommrtError(f"{BACKEND} group: exchange of {n * size} B at offset {offset} "
                              f"outside a {total} B landing buffer (or offset not 16-aligned)")
        landing = self._grow(total)
        mine = landing[self.rank()][offset:offset + n * size].view(dtype)
        flat = [p.reshape(-1) for p in parts]
        if len(flat) == 1:
            torch.mul(flat[0], 1, out=mine)  # an SM kernel, exact (also for -0.0)
        else:
            torch.cat(flat, out=mine)
        out = torch.empty((self.size() - 1) * n, dtype=dtype, device=self.ws.device)
        done = self._enqueue("pull", [(out, offset)])
        if done is not None:
            torch._C._distributed_c10d._register_work(out, _Pending(done, None,
                                                                    self.ws.device))
        return out

    def _grow(self, total: int) -> list[torch.Tensor]:
        have = self._landing[0].numel() if self._landing else 0
        if have >= total:
            return self._landing
        if self._landing:
            self._keep.append(self._landing)
            # recorded pulls read the old buffers
            self._graphs = {k: g for k, g in self._graphs.items() if k[0] != "pull"}
        self._landing = _landing_buffers(self.ws, self._store, total, len(self._keep))
        return self._landing

    def _start(self, kind: str, pairs, keep):
        if self._broken:
            raise PeerTimeoutError(self._broken)
        return _Pending(self._enqueue(kind, pairs), keep, self.ws.device)

    def _enqueue(self, kind: str, calls) -> torch.cuda.Event | None:
        """Run ``calls`` of ``kind`` on the group's stream after the work the caller's
        stream has queued; returns the event they end with (None on the CPU, where they
        ran at once)."""
        if self.stream is None:  # CPU (tests): synchronous
            for args in calls:
                self._call(kind, args, timer=False)
            return None
        caller = torch.cuda.current_stream(self.ws.device)
        capturing = torch.cuda.is_current_stream_capturing()
        self.stream.wait_stream(caller)
        with torch.cuda.stream(self.stream):
            for args in calls:
                self._run(kind, args, capturing)
            done = torch.cuda.Event()
            done.record(self.stream)
        return done

    def _call(self, kind: str, args: tuple, timer: bool) -> None:
        if kind == "all_gather":
            copy_engine.all_gather(self.ws, *args, timeout=self._timeout, timer=timer)
        elif kind == "pull":
            copy_engine.pull(self.ws, self._landing, args[1], args[0], timeout=self._timeout,
                             timer=timer)
        else:
            copy_engine.all_reduce(self.ws, args[0], timeout=self._timeout, timer=timer,
                                   average=args[1])

    def _run(self, kind: str, args: tuple, capturing: bool) -> None:
        """Replay this very call (same address, size, dtype and op) from a recorded CUDA
        graph when there is one: one launch instead of about ten, whose host time would
        otherwise delay the compute the call should hide behind. A call is recorded the
        second time it is seen (the first compiles the kernels), while fewer than
        ``GRAPHS`` are kept; inside a caller's capture it is enqueued as it is."""
        key = (kind, *((a.data_ptr(), a.numel(), a.dtype) if isinstance(a, torch.Tensor)
                       else a for a in args))
        graph = self._graphs.get(key)
        if graph is not None:
            graph.replay()
            return
        record = not capturing and key in self._seen and len(self._graphs) < GRAPHS
        if len(self._seen) > 16 * GRAPHS:
            self._seen.clear()
        self._seen.add(key)
        if record:
            graph = torch.cuda.CUDAGraph()
            graph.capture_begin(capture_error_mode="thread_local")
        try:
            self._call(kind, args, timer=True)
        finally:
            if record:
                graph.capture_end()
        if record:
            self._graphs[key] = graph
            graph.replay()

    def check_health(self) -> None:
        """Raise if a barrier gave up waiting for a peer (synchronises the device)."""
        peer = self.ws.peer_error()
        if peer and not self._broken:
            self._broken = (f"rank {self.rank()} of {BACKEND} group: peer rank {peer - 1} did "
                            f"not arrive within COMMRT_SPIN_TIMEOUT={self.spin_timeout:g} s; "
                            "a rank skipped or reordered a collective")
        if self._broken:
            raise PeerTimeoutError(self._broken)


def _landing_buffers(ws, store, nbytes: int, generation: int) -> list[torch.Tensor]:
    """Every rank's landing buffer of ``nbytes`` (uint8), as mapped in this process:
    symmetric memory on a GPU, shared memory on the CPU (tests, one process per rank;
    names go through the group's store). Collective."""
    if torch.cuda.is_available() and ws.device.type == "cuda":
        if torch.cuda.is_current_stream_capturing():
            raise CommrtError(f"{BACKEND} group: the landing buffer cannot grow to {nbytes} B "
                              "during CUDA-graph capture; run the step once before capture")
        import torch.distributed._symmetric_memory as symm

        buf = symm.empty(nbytes, dtype=torch.uint8, device=ws.device)
        handle = symm.rendezvous(buf, ws.group_name)
        return [buf if p == ws.rank else handle.get_buffer(p, (nbytes,), torch.uint8)
                for p in range(ws.world)]
    from multiprocessing import shared_memory

    block = shared_memory.SharedMemory(create=True, size=nbytes)
    key = f"commrt_ce_landing{generation}"
    store.set(f"{key}/{ws.rank}", block.name)
    blocks = [block if p == ws.rank else shared_memory.SharedMemory(
        name=store.get(f"{key}/{p}").decode()) for p in range(ws.world)]
    store.add(f"{key}/mapped", 1)
    while store.add(f"{key}/mapped", 0) < ws.world:  # everyone mapped: the name may go
        time.sleep(0.001)
    block.unlink()
    _shm.extend(blocks)
    return [torch.frombuffer(b.buf, dtype=torch.uint8, count=nbytes) for b in blocks]


_shm: list = []  # the CPU landing buffers' mappings (they must outlive their tensors)


def _create(store, rank, size, timeout):  # noqa: ARG001 (c10d's creator signature)
    if not _pending:
        raise CommrtError(f"a {BACKEND} group is made by commrt.copy_engine_group.make(), "
                          "not by dist.new_group")
    ws, spin_timeout = _pending.pop()
    if (ws.rank, ws.world) != (rank, size):
        raise CommrtError(f"{BACKEND}: workspace of rank {ws.rank}/{ws.world} for group rank "
                          f"{rank}/{size}")
    return CopyEngineGroup(rank, size, ws, spin_timeout, store)


def make(base: dist.ProcessGroup, ws=None) -> CopyEngineGroup:
    """A copy-engine group over ``base``'s ranks; collective (every rank of ``base``, in
    the same order). ``ws``: its workspace (default: a new symmetric one rendezvoused on
    ``base``, ``COMMRT_MAX_CUSTOM_BYTES`` of data)."""
    from commrt import config

    cfg = config.get()
    if ws is None:
        from commrt.symm_mem.workspace import Workspace

        device = torch.device("cuda", torch.cuda.current_device())
        ws = Workspace.allocate(base, device, cfg.max_custom_bytes, 256)
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])
    _pending.append((ws, cfg.spin_timeout))
    try:
        group = dist.new_group(dist.get_process_group_ranks(base), backend=BACKEND,
                               group_desc="commrt_copy_engine")
    finally:
        _pending.clear()
    return group
