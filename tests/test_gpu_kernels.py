"""Every kernel at world sizes 2-8 on one GPU: W virtual ranks in one process.

The harness (``ranks_onegpu``) builds the real workspaces over ordinary allocations and
runs each rank on its own stream; inputs and float64 checks are the interpreter tests'
(``kernel_cases``). Every test runs once per kernel of ``CONFIGS`` and world size.
"""

from __future__ import annotations

import pytest
import torch
from kernel_cases import EPS, check_all_reduce, check_fused, fused_inputs, make_input
from ranks_onegpu import OneGpuRanks

from commrt.errors import PeerTimeoutError

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
DEVICE = "cuda"
WORLDS = (2, 3, 4, 6, 8)
DATA_BYTES = 512 * 1024
SLOT_BYTES = 512 * 1024  # one_shot_push and its fused twin take messages up to this
TIMEOUT = 5.0  # seconds: generous, every launch of a call is queued within microseconds
QUEUE_TIMEOUT = 1.0  # long queues: a broken call costs this, not TIMEOUT, per barrier
MISSING_TIMEOUT = 0.25

# Launch configs as the sm90-h200 table has them; the harness caps each grid.
CONFIGS = {
    ("all_reduce", "one_shot_push"): {"block": 1024, "warps": 4, "pdl": 1},
    ("all_reduce", "one_shot"): {"block": 2048, "warps": 8},
    ("all_reduce", "two_shot"): {"block": 2048, "warps": 8},
    ("all_reduce", "two_shot_push"): {"block": 2048, "warps": 8, "round_tiles": 0, "pdl": 1},
    ("fused", "one_shot_push"): {"warps": 8, "split": 4},
    ("fused", "one_shot"): {"warps": 8},
    ("fused", "two_shot_push"): {"warps": 8},
}
# (dtype, size or (rows, hidden), in place) per call. Sizes are odd; each dtype keeps one
# hidden size so that the tests below reuse the kernels this table compiles.
EVERY_DTYPE = {
    "all_reduce": [(dt, n, n == 4097) for dt in (F32, BF16, F16) for n in (7, 4097, 65537)]
    + [(F32, 1, True)],
    "fused": [(F32, (7, 1000), False), (BF16, (5, 96), False), (BF16, (1, 96), False),
              (F16, (13, 4096), False)],
}
# cycled call after call: the dtype and the fill change every call
BACK_TO_BACK = {
    "all_reduce": [(F32, 4097, False), (BF16, 7, True), (F16, 1023, False),
                   (BF16, 4097, False), (F32, 33, True)],
    "fused": [(F32, (3, 1000), False), (BF16, (5, 96), False), (F16, (2, 4096), False),
              (BF16, (9, 96), False), (F32, (7, 1000), False)],
}
MISSING_RANK = {"all_reduce": [(F32, 4097, False)], "fused": [(BF16, (5, 96), False)]}
IN_GRAPH = {
    "all_reduce": [(BF16, 4097, False), (F32, 7, True)],
    "fused": [(BF16, (5, 96), False), (F16, (13, 4096), False)],
}
REPLAYS = 5


class AllReduceCall:
    """One all-reduce on every rank: inputs of call ``call`` and their outputs."""

    def __init__(self, algo: str, world: int, call: int, dtype: torch.dtype, n: int,
                 inplace: bool):
        self.algo, self.world, self.dtype, self.n, self.inplace = algo, world, dtype, n, inplace
        self.inps = [torch.empty(n, dtype=dtype, device=DEVICE) for _ in range(world)]
        self.outs = self.inps if inplace else [torch.empty_like(x) for x in self.inps]
        self.refill(call)

    def refill(self, call: int) -> None:
        """Fresh inputs (those of call ``call``) into the same tensors."""
        self.call = call
        for r, x in enumerate(self.inps):
            x.copy_(make_input(0, r, call, self.n, self.dtype))
        if not self.inplace:
            for o in self.outs:
                o.fill_(float("nan"))

    def launch(self, h: OneGpuRanks, timeout: float = TIMEOUT, ranks=None) -> None:
        h.all_reduce(self.algo, self.inps, self.outs, CONFIGS["all_reduce", self.algo],
                     timeout, ranks)

    def check(self) -> None:
        check_all_reduce(self.algo, self.world, self.call, self.n, self.dtype, self.outs)


class FusedCall:
    """One all-reduce + residual + RMSNorm on every rank."""

    def __init__(self, algo: str, world: int, call: int, dtype: torch.dtype,
                 shape: tuple[int, int], inplace: bool = False):
        self.algo, self.world, self.dtype, self.shape = algo, world, dtype, shape
        hidden = shape[1]
        self.args = [tuple(torch.empty(s, dtype=dtype, device=DEVICE)
                           for s in (shape, shape, (hidden,), shape, shape))
                     for _ in range(world)]
        self.refill(call)

    def refill(self, call: int) -> None:
        self.call = call
        for r, (x, res, w, normed, new_res) in enumerate(self.args):
            src = fused_inputs(r, call, self.shape, self.dtype)
            for dst, value in zip((x, res, w), src, strict=True):
                dst.copy_(value)
            normed.fill_(float("nan"))
            new_res.fill_(float("nan"))

    def launch(self, h: OneGpuRanks, timeout: float = TIMEOUT, ranks=None) -> None:
        h.fused(self.algo, self.args, EPS, CONFIGS["fused", self.algo], timeout, ranks)

    def check(self) -> None:
        check_fused(self.algo, self.world, self.call, self.shape, self.dtype,
                    [(a[3], a[4]) for a in self.args])


CALLS = {"all_reduce": AllReduceCall, "fused": FusedCall}
EVERY_KERNEL = pytest.mark.parametrize(
    "kind, algo, world",
    [pytest.param(kind, algo, w, id=f"{kind}-{algo}-w{w}")
     for kind, algo in CONFIGS for w in WORLDS])


def _calls(kind: str, algo: str, world: int, table, count: int) -> list:
    """Calls 0 .. count - 1, cycling through the rows of ``table``."""
    return [CALLS[kind](algo, world, i, *table[i % len(table)]) for i in range(count)]


def _eager(h: OneGpuRanks, calls, timeout: float = TIMEOUT) -> None:
    with h.concurrent():
        for c in calls:
            c.launch(h, timeout)
    h.check_health(timeout)


@pytest.mark.gpu
@EVERY_KERNEL
def test_every_dtype_and_odd_size_matches_float64(kind, algo, world):
    h = OneGpuRanks(world, DATA_BYTES, SLOT_BYTES)
    table = EVERY_DTYPE[kind]
    for c in _calls(kind, algo, world, table, len(table)):
        _eager(h, [c])
        c.check()


@pytest.mark.gpu
@EVERY_KERNEL
def test_back_to_back_calls_keep_epochs_and_flags(kind, algo, world):
    # no join within a queue of 100 calls: a rank may run calls ahead of the others, as on
    # real GPUs (the Lamport buffers rotate, barrier counters reach 2)
    count = 1000 if algo == "one_shot_push" else 200
    h = OneGpuRanks(world, DATA_BYTES, SLOT_BYTES)
    calls = _calls(kind, algo, world, BACK_TO_BACK[kind], count)
    _eager(h, calls[:1])  # compiled and alive before the long queues
    for start in range(1, count, 100):
        _eager(h, calls[start:start + 100], QUEUE_TIMEOUT)
    for c in calls:
        c.check()


@pytest.mark.gpu
@EVERY_KERNEL
def test_cuda_graph_replays_fresh_inputs(kind, algo, world):
    h = OneGpuRanks(world, DATA_BYTES, SLOT_BYTES)
    table = IN_GRAPH[kind]
    calls = _calls(kind, algo, world, table, len(table))
    _eager(h, calls)  # warm-up: every kernel compiled before capture

    def body():
        for c in calls:
            c.launch(h)

    graph = h.capture(body)
    for replay in range(1, REPLAYS + 1):
        for i, c in enumerate(calls):
            c.refill(replay * len(calls) + i)
        graph.replay()
        h.check_health(TIMEOUT)
        for c in calls:
            c.check()


@pytest.mark.gpu
@EVERY_KERNEL
def test_a_rank_that_never_arrives_is_named_not_awaited(kind, algo, world):
    missing = world // 2
    others = [r for r in range(world) if r != missing]
    h = OneGpuRanks(world, DATA_BYTES, SLOT_BYTES)
    (c,) = _calls(kind, algo, world, MISSING_RANK[kind], 1)
    with h.concurrent():
        c.launch(h, MISSING_TIMEOUT, ranks=others)
    for r in others:
        with pytest.raises(PeerTimeoutError, match=f"peer rank {missing} did not arrive"):
            h.check_health(MISSING_TIMEOUT, ranks=[r])


def test_harness_builds_the_real_pointer_tables_cpu():
    # no kernel runs here: the layout, the tables and the stand-in health check only
    pytest.importorskip("triton")
    h = OneGpuRanks(3, 4096, 1024, device="cpu")
    ptrs = [b.data_ptr() for b in h.buffers]
    assert len(set(ptrs)) == 3
    for r, ws in enumerate(h.workspaces):
        assert (ws.rank, ws.world, ws.buf.data_ptr()) == (r, 3, ptrs[r])
        assert ws.pad_tab.tolist() == [p + ws.pad_off for p in ptrs]
        assert ws.push_tab.tolist() == [p + ws.push_off for p in ptrs]
        assert [v.data_ptr() for v in ws.views(F16)] == ptrs
        assert not ws.buf[ws.pad_off:].any()  # cleared: pads zero, slots the sentinel
        assert (ws.buf[ws.push_off:ws.pad_off].view(torch.int16) == -32768).all()
    assert h.config({"blocks": 264, "warps": 8}) == {"blocks": h.share, "warps": 8}
    h.check_health(1.0)
    h.workspaces[2].err.fill_(1)  # 1 + the peer rank 0
    with pytest.raises(PeerTimeoutError, match="rank 2 of group onegpu-w3: peer rank 0 did not"):
        h.check_health(1.0)
    with pytest.raises(RuntimeError, match="only on a CUDA device"):
        h.on_ranks(lambda r, ws: None)
