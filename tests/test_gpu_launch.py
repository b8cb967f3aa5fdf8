"""The lean launch path on one GPU: Triton's launcher bound directly on the installed
Triton, and the communicator's replay per call shape (a one-rank group, a kernel forced
onto a one-rank workspace carved from an ordinary allocation). No timing asserts: host
time is benchmarks/bench_host_overhead.py's."""

from __future__ import annotations

import importlib

import pytest
import torch

pytestmark = pytest.mark.gpu

DATA, SLOT = 1 << 20, 1 << 16
# algorithm -> (module of its launcher, elements of bf16)
CASES = {"one_shot": ("one_shot", 4097), "two_shot": ("two_shot", 4096),
         "one_shot_push": ("one_shot_push", 2048), "two_shot_push": ("two_shot_push", 8191)}


def one_rank_workspace():
    from commrt.symm_mem.workspace import Workspace

    buf = torch.zeros(Workspace.total_bytes(1, DATA, SLOT), dtype=torch.uint8, device="cuda")
    ws = Workspace([buf], 0, DATA, SLOT, "one-rank")
    ws.clear()
    torch.cuda.synchronize()
    return ws


def launcher_of(module: str):
    return importlib.import_module(f"commrt.symm_mem.{module}")._launch


@pytest.fixture(scope="module")
def ws():
    return one_rank_workspace()


@pytest.mark.parametrize("algorithm", list(CASES))
def test_fast_launch_is_taken_on_the_installed_triton(ws, algorithm):
    from commrt import custom
    from commrt.symm_mem import launch

    module, n = CASES[algorithm]
    lau = launcher_of(module)
    x = torch.randn(n, device="cuda").to(torch.bfloat16)
    out = torch.full_like(x, float("nan"))
    before = lau.fast_calls
    for _ in range(3):
        out.fill_(float("nan"))
        custom.run(algorithm, ws, x, out, {}, 5.0)
    torch.cuda.synchronize()
    assert launch.FAST and launch.why_slow == "", launch.why_slow
    assert lau.fast_calls - before >= 2, "the fast launch path was skipped"
    assert torch.equal(out, x) and ws.peer_error() == 0


def test_fused_kernel_through_the_fast_launch(ws):
    from commrt import custom
    from commrt.symm_mem import fused_rmsnorm as fused

    g = torch.Generator(device="cuda").manual_seed(1)
    x, res = (torch.randn(6, 512, device="cuda", generator=g).to(torch.bfloat16)
              for _ in range(2))
    w = torch.randn(512, device="cuda", generator=g).to(torch.bfloat16)
    before = fused._one.fast_calls
    for _ in range(3):
        normed, new_res = torch.empty_like(x), torch.empty_like(x)
        custom.run_fused("one_shot", ws, x, res, w, normed, new_res, 1e-6, {}, 5.0)
    torch.cuda.synchronize()
    ref_n, ref_r = fused.reference(x, res, w, 1e-6)
    assert fused._one.fast_calls - before >= 2
    assert torch.allclose(new_res.double(), ref_r.double(), atol=1e-2, rtol=1e-2)
    assert torch.allclose(normed.double(), ref_n, atol=5e-2, rtol=2e-2)


class _Forced:
    """A dispatcher that always answers one algorithm."""

    def __init__(self, algorithm: str):
        from commrt.dispatch.dispatcher import Decision

        self.d = Decision(algorithm, "forced onto a one-rank workspace")

    def decide(self, *args, **kwargs):
        return self.d


def one_rank_comm(algorithm: str):
    """The world's communicator (one rank, NCCL) with ``algorithm`` forced onto a
    one-rank workspace: the whole eager host path of a kernel call, on one GPU."""
    import torch.distributed as dist

    import commrt

    if not dist.is_initialized():  # an in-process store: no port that tests beside it share
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1,
                                device_id=torch.device("cuda", torch.cuda.current_device()))
    comm = commrt.init()
    comm.workspace = one_rank_workspace()
    comm._identity, comm._fast = False, {}
    comm._owned = comm._workspace_ranges()
    comm.dispatcher = _Forced(algorithm)
    return comm


def test_one_rank_group_with_a_kernel_forced_replays_its_launch():
    comm = one_rank_comm("one_shot")
    x = torch.randn(2048, device="cuda")
    inp, out = x.clone(), torch.full_like(x, float("nan"))
    for _ in range(3):
        comm.all_reduce(x)
        comm.run_flat(inp, out)
    assert len(comm._fast) == 2, "no launch prepared for the replay"
    lau = launcher_of("one_shot")
    slow = lau.fn.run
    lau.fn.run = None  # a replay must not reach Triton's JIT (nor the Launcher)
    try:
        torch.cuda.synchronize()
        allocs = torch.cuda.memory_stats()["allocation.all.allocated"]
        out.fill_(float("nan"))
        for _ in range(100):
            comm.all_reduce(x)
            comm.run_flat(inp, out)
        torch.cuda.synchronize()
        assert torch.cuda.memory_stats()["allocation.all.allocated"] == allocs
    finally:
        lau.fn.run = slow
    assert torch.equal(out, inp) and torch.equal(x, inp) and comm.workspace.peer_error() == 0


def test_replayed_launch_is_captured_in_a_cuda_graph():
    comm = one_rank_comm("two_shot")
    inp = torch.randn(4096, device="cuda")
    out = torch.empty_like(inp)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            comm.run_flat(inp, out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        for _ in range(2):
            comm.run_flat(inp, out)
    inp.copy_(torch.randn_like(inp))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, inp) and comm.workspace.peer_error() == 0


@pytest.mark.parametrize("algorithm", ["ag_push", "ag_bw", "rs_pull", "rs_push"])
def test_one_rank_gather_and_scatter_replay_their_launch(algorithm):
    """An eager all-gather or reduce-scatter of the same tensors again replays the launch
    kept the first time: no Triton, no allocation, the right result on fresh data."""
    from commrt.symm_mem import all_gather, all_gather_push, reduce_scatter, reduce_scatter_push

    module = {"ag_push": all_gather_push, "ag_bw": all_gather, "rs_pull": reduce_scatter,
              "rs_push": reduce_scatter_push}[algorithm]
    comm = one_rank_comm(algorithm)
    call = comm.all_gather_into_tensor if algorithm.startswith("ag") else \
        comm.reduce_scatter_tensor
    x = torch.randn(2053, device="cuda").to(torch.bfloat16)
    out = torch.full_like(x, float("nan"))
    for _ in range(3):
        call(out, x)
    assert len(comm._fast) == 1, "no launch kept for the replay"
    fresh = [torch.randn(x.shape, generator=torch.Generator().manual_seed(seed)).to(x)
             for seed in range(20)]
    slow = module._launch.fn.run
    module._launch.fn.run = None  # a replay must not reach Triton's JIT
    try:
        grown = 0
        for seed, data in enumerate(fresh):
            x.copy_(data)
            out.fill_(float("nan"))
            allocs = torch.cuda.memory_stats()["allocation.all.allocated"]
            call(out, x)
            grown += torch.cuda.memory_stats()["allocation.all.allocated"] - allocs
            torch.cuda.synchronize()
            assert torch.equal(out, x), f"replay {seed}"
        assert grown == 0, "the replay allocated"
    finally:
        module._launch.fn.run = slow
    assert comm.workspace.peer_error() == 0
