"""W virtual ranks on one GPU, in one process: the kernel layer's multi-rank harness.

PyTorch's symmetric memory refuses two processes on one GPU, so this stands in for the
rendezvous only. Rank ``r``'s buffer is an ordinary ``torch.empty(total, uint8)`` on the
GPU; every rank's ``Workspace`` is built over the list of all W buffers, exactly as
``Workspace.allocate`` builds it over the symmetric handle's buffers, so the pointer
tables (``pad_tab``, ``push_tab``), peer views, signal pads and receive slots are the
real ones. Calls go through the launchers' callers unchanged (``commrt.custom.run`` and
``run_fused``; ``commrt.collective_kernels.run_all_gather`` and ``run_reduce_scatter``);
rank ``r``'s launch is issued under ``torch.cuda.stream(streams[r])`` (the launchers launch
on the current stream), so the W ranks' kernels run concurrently.

Residency. A rank's programs wait for the programs of the same id on the other ranks (and
a split fused ``one_shot_push`` row waits for its rank's other programs), so all W grids
must be resident at once, or a spinning program could hold the SM a peer's program
needs. Each rank's grid is capped at ``share = min(16, sm_count // W)`` programs (the
``blocks`` of its launch config), so the W grids hold at most ``sm_count`` programs; any
program that launches at all fits an idle SM by itself, and nothing else runs on the GPU
meanwhile (the caller's stream only waits on the rank streams), so every program gets an
SM whatever order the block scheduler takes them in. The fused ``one_shot_push`` caps a
split grid at ``ws.sm_count``, the programs it assumes resident: each virtual rank's
``sm_count`` is set to its share (a stand-in for one GPU per rank, not a kernel change).
Streams sharing a hardware queue could be serialised behind each other, so this module
asks for 32 queues (``CUDA_DEVICE_MAX_CONNECTIONS``, unless already set; it is read when
the CUDA context is created). Every spin in the kernels is bounded: should ranks ever fail
to run together, they report a ``PeerTimeoutError``, they do not hang.

What this proves: sm90 code generation, memory ordering within one GPU, the epoch and
flag logic across calls, CUDA-graph capture and the timeout at any world size. Not
cross-GPU timing or NVLink ordering.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from commrt.symm_mem.workspace import Workspace

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")

MAX_SHARE = 16  # programs per rank: grid-stride loops run even at world size 2
_ALIGN = 256  # the workspace rounds its regions to this (Workspace.allocate)


class OneGpuRanks:
    """``world`` ranks' workspaces on one device and one stream per rank."""

    def __init__(self, world: int, data_bytes: int, slot_bytes: int,
                 device: torch.device | str = "cuda") -> None:
        from commrt.symm_mem.signals import MAX_WORLD
        from commrt.symm_mem.workspace import Workspace

        if not 2 <= world <= MAX_WORLD:
            raise ValueError(f"world={world} is not a world size; expected 2..{MAX_WORLD}")
        if data_bytes % _ALIGN or slot_bytes % _ALIGN:
            raise ValueError(f"data_bytes={data_bytes}, slot_bytes={slot_bytes}: both must "
                             f"be multiples of {_ALIGN}")
        self.device = _resolve(device)
        self.world = world
        total = Workspace.total_bytes(world, data_bytes, slot_bytes)
        self.buffers = [torch.empty(total, dtype=torch.uint8, device=self.device)
                        for _ in range(world)]
        self.workspaces = [Workspace(self.buffers, r, data_bytes, slot_bytes,
                                     f"onegpu-w{world}") for r in range(world)]
        self.share = MAX_SHARE
        self.streams: list[torch.cuda.Stream] = []
        if self.device.type == "cuda":
            sms = torch.cuda.get_device_properties(self.device).multi_processor_count
            self.share = max(1, min(MAX_SHARE, sms // world))
            self.streams = [torch.cuda.Stream(self.device) for _ in range(world)]
        for ws in self.workspaces:
            if ws.sm_count is not None:
                ws.sm_count = self.share  # this rank's SMs, as if it had a GPU of its own
            ws.clear()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def config(self, config: Mapping[str, int]) -> dict:
        """``config`` with its grid capped at one rank's share of the SMs."""
        return dict(config, blocks=min(config.get("blocks", self.share), self.share))

    def fork(self) -> None:
        """Make every rank stream wait for the work queued so far on the current stream."""
        cur = torch.cuda.current_stream(self.device)
        for s in self._cuda_streams():
            s.wait_stream(cur)

    def join(self) -> None:
        """Make the current stream wait for every rank stream."""
        cur = torch.cuda.current_stream(self.device)
        for s in self._cuda_streams():
            cur.wait_stream(s)

    @contextlib.contextmanager
    def concurrent(self) -> Iterator[None]:
        """Fork to the rank streams on entry, join back on exit. Tensors used inside must
        live until the join (the caching allocator reuses memory in stream order)."""
        self.fork()
        try:
            yield
        finally:
            self.join()

    def on_ranks(self, fn: Callable[[int, Workspace], None],
                 ranks: Iterable[int] | None = None) -> None:
        """``fn(rank, workspace)`` for each rank, on that rank's stream (inside
        ``concurrent()``); ``ranks`` leaves some out, e.g. a rank that never arrives."""
        streams = self._cuda_streams()
        for r in range(self.world) if ranks is None else ranks:
            with torch.cuda.stream(streams[r]):
                fn(r, self.workspaces[r])

    def all_reduce(self, algorithm: str, inps: Sequence[torch.Tensor],
                   outs: Sequence[torch.Tensor], config: Mapping[str, int], timeout: float,
                   ranks: Iterable[int] | None = None) -> None:
        """``custom.run`` of rank r's ``inps[r]`` into ``outs[r]`` on every rank."""
        from commrt import custom

        cfg = self.config(config)
        self.on_ranks(lambda r, ws: custom.run(algorithm, ws, inps[r], outs[r], cfg, timeout),
                      ranks)

    def fused(self, algorithm: str, args: Sequence[tuple[torch.Tensor, ...]], eps: float,
              config: Mapping[str, int], timeout: float,
              ranks: Iterable[int] | None = None) -> None:
        """``custom.run_fused`` on every rank; ``args[r]`` is rank r's
        (x, residual, weight, normed, new_residual)."""
        from commrt import custom

        cfg = self.config(config)
        self.on_ranks(lambda r, ws: custom.run_fused(algorithm, ws, *args[r], eps, cfg,
                                                     timeout), ranks)

    def all_gather(self, algorithm: str, inps: Sequence[torch.Tensor],
                   outs: Sequence[torch.Tensor], config: Mapping[str, int], timeout: float,
                   ranks: Iterable[int] | None = None) -> None:
        """``run_all_gather`` of rank r's ``inps[r]`` (n elements) into ``outs[r]``
        (world * n) on every rank."""
        from commrt.collective_kernels import run_all_gather

        cfg = self.config(config)
        self.on_ranks(lambda r, ws: run_all_gather(algorithm, ws, inps[r], outs[r], cfg,
                                                   timeout), ranks)

    def reduce_scatter(self, algorithm: str, inps: Sequence[torch.Tensor],
                       outs: Sequence[torch.Tensor], config: Mapping[str, int],
                       timeout: float, ranks: Iterable[int] | None = None) -> None:
        """``run_reduce_scatter`` of rank r's ``inps[r]`` (world * n elements) into
        ``outs[r]`` (n) on every rank."""
        from commrt.collective_kernels import run_reduce_scatter

        cfg = self.config(config)
        self.on_ranks(lambda r, ws: run_reduce_scatter(algorithm, ws, inps[r], outs[r], cfg,
                                                       timeout), ranks)

    def capture(self, body: Callable[[], None]) -> torch.cuda.CUDAGraph:
        """Capture ``body`` (launches through this harness) into a CUDA graph: the capture
        stream forks to the rank streams and joins them back. Run every launch of ``body``
        eagerly once first (compilation must not happen during capture)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph), self.concurrent():
            body()
        return graph

    def check_health(self, timeout: float, ranks: Iterable[int] | None = None) -> None:
        """Raise rank r's ``PeerTimeoutError`` if one of its kernels gave up waiting for a
        peer: the error ``Communicator.check_health`` raises, through that same code, with
        this harness's workspace standing in for the communicator's (syncs the device)."""
        from commrt.communicator import Communicator

        for r in range(self.world) if ranks is None else ranks:
            ws = self.workspaces[r]
            stand_in = SimpleNamespace(_broken="", workspace=ws, rank=r,
                                       group_name=ws.group_name,
                                       config=SimpleNamespace(spin_timeout=timeout))
            Communicator.check_health(stand_in)

    def _cuda_streams(self) -> list[torch.cuda.Stream]:
        if not self.streams:
            raise RuntimeError("ranks run concurrently only on a CUDA device; under the "
                               "Triton interpreter use one process per rank")
        return self.streams


def _resolve(device: torch.device | str) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device
