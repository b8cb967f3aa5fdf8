"""The symmetric workspace: one persistent buffer per process group.

Layout of every rank's buffer (bytes)::

    [0, data)                      data region: inputs copied in, or ``comm.empty`` tensors
    [data, 3*data)                 scratch of two_shot_push: contributions, then results
    [push, push + 3*world*slot)    one_shot_push receive buffers: buffer b, slot s at
                                   push + (b*world + s)*slot
    [pad, pad + PAD_BYTES)         signal pads for the block-wise barrier

Allocated with ``torch.distributed._symmetric_memory`` (``empty`` + ``rendezvous``)
before any CUDA-graph capture, and never grown: larger messages are reduced in pieces.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from commrt.dispatch.profile import sm_count
from commrt.errors import WorkspaceError

from .one_shot_push import META_INTS, SENTINEL16
from .signals import PAD_BYTES

_ALIGN = 256


def _round_up(n: int, to: int = _ALIGN) -> int:
    return -(-n // to) * to


class Workspace:
    """The layout over per-rank buffers; ``allocate`` makes the real symmetric one.

    ``buffers[p]`` is rank ``p``'s whole buffer as mapped in this process (uint8). Tests
    on the CPU build one over shared-memory tensors, one process per rank.
    """

    def __init__(self, buffers: list[torch.Tensor], rank: int, data_bytes: int,
                 slot_bytes: int, group_name: str = "", handle=None):
        self.group_name = group_name
        self.handle = handle
        self.rank = rank
        self.world = len(buffers)
        self.buffers = buffers
        self.buf = buffers[rank]
        self.device = self.buf.device
        self.data_bytes = data_bytes
        self.slot_bytes = slot_bytes
        self.scratch_off = data_bytes
        self.push_off = 3 * data_bytes
        self.pad_off = self.push_off + 3 * self.world * slot_bytes
        assert self.buf.numel() >= self.pad_off + PAD_BYTES, "buffer smaller than its layout"
        ptrs = [b.data_ptr() for b in buffers]
        self.pad_tab = torch.tensor([p + self.pad_off for p in ptrs], dtype=torch.int64,
                                    device=self.device)
        self.push_tab = torch.tensor([p + self.push_off for p in ptrs], dtype=torch.int64,
                                     device=self.device)
        self.pad_addr = self.pad_tab.data_ptr()
        self.push_addr = self.push_tab.data_ptr()
        self.push_mine = ptrs[rank] + self.push_off
        self.data_start = ptrs[rank]
        self.meta = torch.zeros(META_INTS, dtype=torch.int32, device=self.device)
        self.err = torch.zeros(1, dtype=torch.int32, device=self.device)
        # programs that are surely resident at once: one per SM (None: the interpreter)
        self.sm_count = sm_count(self.device)
        self._views: dict[torch.dtype, tuple[torch.Tensor, ...]] = {}
        self._scratch: dict[torch.dtype, tuple] = {}

    @staticmethod
    def total_bytes(world: int, data_bytes: int, slot_bytes: int) -> int:
        return 3 * data_bytes + 3 * world * slot_bytes + PAD_BYTES

    def clear(self) -> None:
        """Zero this rank's signal pads and fill its receive slots with the sentinel.

        Every rank must do this, then meet the others, before the first kernel.
        """
        self.buf[self.pad_off:].zero_()
        self.buf[self.push_off:self.pad_off].view(torch.int16).fill_(SENTINEL16)

    @classmethod
    def allocate(cls, group: dist.ProcessGroup, device: torch.device, data_bytes: int,
                 push_bytes: int) -> Workspace:
        """Allocate and rendezvous the symmetric buffer of ``group`` (never during capture)."""
        if torch.cuda.is_current_stream_capturing():
            raise WorkspaceError(
                "the symmetric workspace cannot be allocated during CUDA-graph capture; "
                "create the communicator (commrt.init()) before capture")
        import torch.distributed._symmetric_memory as symm

        name = group.group_name
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        data_bytes, slot_bytes = _round_up(data_bytes), _round_up(push_bytes)
        total = cls.total_bytes(world, data_bytes, slot_bytes)
        buf = symm.empty(total, dtype=torch.uint8, device=device)
        handle = symm.rendezvous(buf, name)
        buffers = [buf if p == rank else handle.get_buffer(p, (total,), torch.uint8)
                   for p in range(world)]
        ws = cls(buffers, rank, data_bytes, slot_bytes, name, handle)
        ws.clear()
        torch.cuda.synchronize(device)
        dist.barrier(group)
        return ws

    @property
    def multicast_ptr(self) -> int:
        return int(getattr(self.handle, "multicast_ptr", 0) or 0) if self.handle else 0

    def views(self, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """Every rank's data region as a flat tensor of ``dtype`` (mapped on this GPU)."""
        v = self._views.get(dtype)
        if v is None:
            v = tuple(b[:self.data_bytes].view(dtype) for b in self.buffers)
            self._views[dtype] = v
        return v

    def scratch(self, dtype: torch.dtype) -> tuple[tuple[torch.Tensor, ...], ...]:
        """(contribution areas, result areas) of every rank, each ``data`` bytes of ``dtype``."""
        v = self._scratch.get(dtype)
        if v is None:
            lo, mid, hi = self.scratch_off, self.scratch_off + self.data_bytes, self.push_off
            v = (tuple(b[lo:mid].view(dtype) for b in self.buffers),
                 tuple(b[mid:hi].view(dtype) for b in self.buffers))
            self._scratch[dtype] = v
        return v

    def capacity(self, dtype: torch.dtype) -> int:
        """Elements of ``dtype`` the data region holds."""
        return self.data_bytes // torch.empty((), dtype=dtype).element_size()

    def holds(self, t: torch.Tensor) -> bool:
        """True when ``t`` overlaps this rank's data region."""
        return self.data_start <= t.data_ptr() < self.data_start + self.data_bytes

    def is_data_start(self, t: torch.Tensor) -> bool:
        """True when ``t`` is a contiguous tensor at the start of the data region."""
        return t.is_contiguous() and t.data_ptr() == self.data_start

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        numel = 1
        for s in shape:
            numel *= s
        if numel > self.capacity(dtype):
            raise WorkspaceError(
                f"comm.empty{tuple(shape)} of {dtype} needs "
                f"{numel * torch.empty((), dtype=dtype).element_size()} B but the workspace "
                f"holds {self.data_bytes} B; raise COMMRT_MAX_CUSTOM_BYTES")
        return self.views(dtype)[self.rank][:numel].view(shape)

    def peer_error(self) -> int:
        """0, or 1 + the rank of a peer some kernel gave up waiting for (syncs the device)."""
        return int(self.err.item())

