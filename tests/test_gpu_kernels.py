"""Every kernel at world sizes 2-8 on one GPU: W virtual ranks in one process.

The harness (``ranks_onegpu``) builds the real workspaces over ordinary allocations and
runs each rank on its own stream; inputs and checks are the interpreter tests'
(``kernel_cases``): the all-reduces (plain and fused with RMSNorm) against float64, every
rank's output bitwise the same; the all-gathers bit for bit against the inputs in rank
order; the reduce-scatters bitwise against the fp32 rank-order sum, and close to float64.
Every test runs once per kernel of ``CONFIGS`` and world size.
"""

from __future__ import annotations

import pytest
import torch
from kernel_cases import (
    EPS,
    LAMPORT_WORD32,
    check_all_gather,
    check_all_reduce,
    check_fused,
    check_reduce_scatter,
    collective_input,
    fused_inputs,
    make_input,
)
from ranks_onegpu import OneGpuRanks

from commrt.errors import PeerTimeoutError

F32, BF16, F16, I32 = torch.float32, torch.bfloat16, torch.float16, torch.int32
DEVICE = "cuda"
WORLDS = (2, 3, 4, 6, 8)
DATA_BYTES = 512 * 1024
SLOT_BYTES = 512 * 1024  # one_shot_push, its fused twin and ag_push take messages up to this
# fp32 elements a rank that go in pieces at every world size: more than a receive slot
# holds (131072, ag_push) or than a rank's share of the data region (65536 at world size 2)
AG_PIECES = 150_001
RS_PIECES = 70_001  # a reduce-scatter's input is world times this, on every rank
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
    # no table rows yet: blocks small enough that the grid-stride loops (and rs_push's
    # rounds) turn at these sizes
    ("all_gather", "ag_push"): {"block": 1024, "warps": 4},
    ("all_gather", "ag_bw"): {"block": 2048, "warps": 8},
    ("reduce_scatter", "rs_pull"): {"block": 2048, "warps": 8},
    ("reduce_scatter", "rs_push"): {"block": 1024, "warps": 4, "round_tiles": 2},
}
# Lamport kernels: their receive-buffer rotation gets 1000 calls back to back, not 200
LAMPORT = ("one_shot_push", "ag_push")
# ag_push rotates the receive buffers one_shot_push rotates: every third call of its
# back-to-back queue is an all-reduce
INTERLEAVED = {("all_gather", "ag_push"): ("all_reduce", "one_shot_push")}
# (dtype, size or (rows, hidden), in place) per call; a (kind, algorithm) key overrides its
# kind's rows. Sizes are odd; each dtype keeps one hidden size so that the tests below reuse
# the kernels this table compiles. A collective's size is one rank's share (the all-gather's
# input, the reduce-scatter's output); in place, that share is chunk ``rank`` of the other
# tensor: at 16 bytes a rank the chunks stay 16-byte aligned and reuse the odd sizes' kernels.
_COLLECTIVES = [(dt, n, False) for dt in (F32, BF16, F16) for n in (7, 4097)] + [
    (F32, 1, False), (F32, 4, True), (BF16, 8, True)]
_COLLECTIVES_B2B = [(F32, 4097, False), (BF16, 7, False), (F16, 1023, False), (F32, 4, True),
                    (BF16, 4097, False)]
_COLLECTIVES_GRAPH = [(BF16, 4097, False), (F32, 4, True)]
EVERY_DTYPE = {
    "all_reduce": [(dt, n, n == 4097) for dt in (F32, BF16, F16) for n in (7, 4097, 65537)]
    + [(F32, 1, True)],
    "fused": [(F32, (7, 1000), False), (BF16, (5, 96), False), (BF16, (1, 96), False),
              (F16, (13, 4096), False)],
    "all_gather": _COLLECTIVES + [(F32, AG_PIECES, False)],
    ("all_gather", "ag_bw"): _COLLECTIVES + [(F32, AG_PIECES, False), (I32, 7, False),
                                             (I32, 4097, False)],
    "reduce_scatter": _COLLECTIVES + [(F32, RS_PIECES, False)],
}
# cycled call after call: the dtype and the fill change every call
BACK_TO_BACK = {
    "all_reduce": [(F32, 4097, False), (BF16, 7, True), (F16, 1023, False),
                   (BF16, 4097, False), (F32, 33, True)],
    "fused": [(F32, (3, 1000), False), (BF16, (5, 96), False), (F16, (2, 4096), False),
              (BF16, (9, 96), False), (F32, (7, 1000), False)],
    "all_gather": _COLLECTIVES_B2B,
    "reduce_scatter": _COLLECTIVES_B2B,
}
WARM_CALLS = 15  # run before the long queues: every row of BACK_TO_BACK (and INTERLEAVED)
MISSING_RANK = {"all_reduce": [(F32, 4097, False)], "fused": [(BF16, (5, 96), False)],
                "all_gather": [(F32, 4097, False)], "reduce_scatter": [(F32, 4097, False)]}
IN_GRAPH = {
    "all_reduce": [(BF16, 4097, False), (F32, 7, True)],
    "fused": [(BF16, (5, 96), False), (F16, (13, 4096), False)],
    "all_gather": _COLLECTIVES_GRAPH + [(F32, AG_PIECES, False)],
    "reduce_scatter": _COLLECTIVES_GRAPH + [(F32, RS_PIECES, False)],
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


class CollectiveCall:
    """One all-gather or reduce-scatter on every rank: rank r's ``inps[r]`` and ``outs[r]``,
    one of them ``world`` chunks of ``n`` elements, the other ``n`` (in place: chunk
    ``rank`` of the first)."""

    KIND = ""

    def __init__(self, algo: str, world: int, call: int, dtype: torch.dtype, n: int,
                 inplace: bool):
        self.algo, self.world, self.dtype, self.n = algo, world, dtype, n
        big = [torch.empty(world * n, dtype=dtype, device=DEVICE) for _ in range(world)]
        small = ([b[r * n:(r + 1) * n] for r, b in enumerate(big)] if inplace
                 else [torch.empty(n, dtype=dtype, device=DEVICE) for _ in range(world)])
        gather = self.KIND == "all_gather"
        self.inps, self.outs = (small, big) if gather else (big, small)
        self.refill(call)

    @property
    def label(self) -> str:
        return f"{self.algo} w{self.world} {self.dtype} n={self.n} call {self.call}"

    def inputs(self) -> list[torch.Tensor]:
        """Every rank's input of this call (CPU)."""
        return [collective_input(self.algo, r, self.call, self.n, self.dtype, self.world)
                for r in range(self.world)]

    def refill(self, call: int) -> None:
        """Fresh inputs (those of call ``call``, kept for the check) into the same tensors."""
        self.call = call
        self.xs = self.inputs()
        for o in self.outs:  # in place, the inputs overwrite their chunks next
            o.view(torch.uint8).fill_(0xFF)  # NaN in every float dtype, -1 in int32
        for x, value in zip(self.inps, self.xs, strict=True):
            x.copy_(value)

    def launch(self, h: OneGpuRanks, timeout: float = TIMEOUT, ranks=None) -> None:
        run = h.all_gather if self.KIND == "all_gather" else h.reduce_scatter
        run(self.algo, self.inps, self.outs, CONFIGS[self.KIND, self.algo], timeout, ranks)


class GatherCall(CollectiveCall):
    KIND = "all_gather"

    def inputs(self) -> list[torch.Tensor]:
        """With fp32's element 2 the receive slots' sentinel word, which ag_push must
        deliver as its neighbour (and ag_bw as it is)."""
        xs = super().inputs()
        if self.dtype == F32 and self.n > 3:
            for x in xs:
                x.view(I32)[2] = LAMPORT_WORD32
        return xs

    def check(self) -> None:
        check_all_gather(self.label, self.algo, self.xs, self.outs)


class ScatterCall(CollectiveCall):
    KIND = "reduce_scatter"

    def check(self) -> None:
        check_reduce_scatter(self.label, self.xs, self.outs)


CALLS = {"all_reduce": AllReduceCall, "fused": FusedCall, "all_gather": GatherCall,
         "reduce_scatter": ScatterCall}
EVERY_KERNEL = pytest.mark.parametrize(
    "kind, algo, world",
    [pytest.param(kind, algo, w, id=f"{kind}-{algo}-w{w}")
     for kind, algo in CONFIGS for w in WORLDS])


def _call(kind: str, algo: str, world: int, table: dict, i: int):
    """Call ``i``: row ``i`` (cycling) of the kernel's rows in ``table``."""
    rows = table.get((kind, algo), table[kind])
    return CALLS[kind](algo, world, i, *rows[i % len(rows)])


def _calls(kind: str, algo: str, world: int, table: dict) -> list:
    """One call per row of the kernel's rows in ``table``."""
    rows = table.get((kind, algo), table[kind])
    return [_call(kind, algo, world, table, i) for i in range(len(rows))]


def _eager(h: OneGpuRanks, calls, timeout: float = TIMEOUT) -> None:
    with h.concurrent():
        for c in calls:
            c.launch(h, timeout)
    h.check_health(timeout)


@pytest.mark.gpu
@EVERY_KERNEL
def test_every_dtype_and_odd_size_matches_float64(kind, algo, world):
    h = OneGpuRanks(world, DATA_BYTES, SLOT_BYTES)
    for c in _calls(kind, algo, world, EVERY_DTYPE):
        _eager(h, [c])
        c.check()


@pytest.mark.gpu
@EVERY_KERNEL
def test_back_to_back_calls_keep_epochs_and_flags(kind, algo, world):
    # no join within a queue of 100 calls: a rank may run calls ahead of the others, as on
    # real GPUs (the Lamport buffers rotate, barrier counters reach 2)
    count = 1000 if algo in LAMPORT else 200
    other = INTERLEAVED.get((kind, algo))
    h = OneGpuRanks(world, DATA_BYTES, SLOT_BYTES)
    calls = [_call(*(other if other and i % 3 == 2 else (kind, algo)), world, BACK_TO_BACK, i)
             for i in range(count)]
    _eager(h, calls[:WARM_CALLS])  # compiled and alive before the long queues
    for start in range(WARM_CALLS, count, 100):
        _eager(h, calls[start:start + 100], QUEUE_TIMEOUT)
    for c in calls:
        c.check()


@pytest.mark.gpu
@EVERY_KERNEL
def test_cuda_graph_replays_fresh_inputs(kind, algo, world):
    h = OneGpuRanks(world, DATA_BYTES, SLOT_BYTES)
    calls = _calls(kind, algo, world, IN_GRAPH)
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
    (c,) = _calls(kind, algo, world, MISSING_RANK)
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
    with pytest.raises(RuntimeError, match="only on a CUDA device"):
        h.all_gather("ag_bw", [], [], {}, 1.0)
