"""nccl_symm on GPUs: the feature probe and the NCCL-backed workspace on one GPU (a
one-rank NCCL group), and on two or more GPUs NCCL's symmetric kernel against float64 in
eager mode and CUDA graphs, decisions agreed across ranks, and commrt's own kernels on the
same NCCL-backed workspace.

Every case runs in fresh processes (``spawn.run``): PyTorch's symmetric-memory backend is
fixed for a process at its first symmetric allocation.
"""

from __future__ import annotations

import importlib
import os

import pytest
import spawn
from conftest import cuda_count

MIB = 1 << 20
SIZES = (1, 7, 4097, MIB + 3)
NCCL_BACKEND = {"COMMRT_SYMM_BACKEND": "nccl"}
WORLD = int(os.environ.get("GPU_TEST_WORLD", 0)) or max(2, min(cuda_count(), 8))


def _bodies():
    """This file under its plain name (tests/ is on sys.path), so that spawned ranks can
    import the bodies below; pytest's importlib mode names it otherwise."""
    return importlib.import_module("test_gpu_nccl_symm")


# ----- per-rank bodies -------------------------------------------------------------------
def probe_and_one_rank_workspace(rank, world):
    """Probe, switch a fresh process to the NCCL backend, allocate the workspace through it
    and run the nccl_symm path on it (the identity over one rank: compared exactly)."""
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm

    from commrt import custom
    from commrt.symm_mem import nccl_symm
    from commrt.symm_mem.workspace import Workspace

    dev = torch.device("cuda", torch.cuda.current_device())
    out = {"version": nccl_symm.nccl_version(), "api": nccl_symm.api_present(),
           "before": nccl_symm.current_backend(dev), "switch": nccl_symm.use_nccl_backend(dev)}
    ws = Workspace.allocate(dist.group.WORLD, dev, 8 * MIB, 64 * 1024)
    out["after"] = nccl_symm.current_backend(dev)
    out["probe"] = nccl_symm.probe(out["after"], True)
    failures = []
    g = torch.Generator(device=dev).manual_seed(rank)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for n in SIZES:
            x = torch.randn(n, generator=g, device=dev).to(dtype)
            ref = x.double()
            got = torch.empty_like(x)
            custom.run("nccl_symm", ws, x, got, {}, 30.0, dist.group.WORLD)
            resident = ws.empty((n,), dtype)  # comm.empty: no copy in or out
            resident.copy_(x)
            custom.run("nccl_symm", ws, resident, resident, {}, 30.0, dist.group.WORLD)
            for name, t in (("copied", got), ("in the workspace", resident)):
                if not torch.equal(t.double(), ref):
                    failures.append(f"{name} {dtype} n={n}")
    try:  # PyTorch cannot go back after the NCCL-backed allocation
        symm.set_backend("CUDA")
        out["restore"] = ""
    except Exception as exc:
        out["restore"] = f"{type(exc).__name__}: {exc}"
    out["failures"] = failures
    return out


def switch_after_a_cuda_allocation(rank, world):
    """A process that already holds CUDA-backed symmetric memory cannot switch."""
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm

    from commrt.symm_mem import nccl_symm

    dev = torch.device("cuda", torch.cuda.current_device())
    before = nccl_symm.current_backend(dev)
    t = symm.empty(1024, dtype=torch.uint8, device=dev)
    symm.rendezvous(t, dist.group.WORLD.group_name)
    return {"before": before, "why": nccl_symm.use_nccl_backend(dev)}


def nccl_symm_matches_float64(rank, world):
    """Eager: ordinary tensors, comm.empty tensors in place and forced through
    COMMRT_ALGO's path, every dtype and awkward size; then CUDA-graph replays."""
    import ranks_gpu
    import torch

    import commrt
    from commrt.bench import forced_view

    comm = commrt.init()
    view = forced_view(comm, "nccl_symm")
    dev, failures, seed = comm.device, [], 0
    for dtype in ranks_gpu.DTYPES:
        for n in SIZES:
            seed += 1
            xs = ranks_gpu.inputs(seed, world, n, dtype, dev)
            ref = sum(x.double() for x in xs)
            plain = xs[rank].clone()
            comm.run_algorithm("nccl_symm", plain)
            resident = comm.empty(n, dtype)
            resident.copy_(xs[rank])
            view.all_reduce(resident)
            for name, t in (("ordinary", plain), ("comm.empty", resident)):
                err = ranks_gpu.rel_err(t, ref)
                if err > ranks_gpu.TOL[dtype] or not ranks_gpu.same_on_all_ranks(t):
                    failures.append(f"{name} {dtype} n={n}: rel err {err:.2e}")
    failures += _graph_replays(comm, view, rank, world, dev)
    return {"failures": failures, "plan": str(view.plan(torch.empty(7, device=dev)))}


def _graph_replays(comm, view, rank, world, dev) -> list[str]:
    import ranks_gpu
    import torch

    failures = []
    for dtype in (torch.bfloat16, torch.float32):
        bufs = [torch.empty(n, dtype=dtype, device=dev) for n in SIZES]
        stage = [torch.empty_like(b) for b in bufs]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm up on the capture stream
            for b, st in zip(bufs, stage, strict=True):
                b.copy_(st.normal_())
                view.all_reduce(b)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for b, st in zip(bufs, stage, strict=True):
                b.copy_(st)
                view.all_reduce(b)
        for replay in range(8):
            refs = []
            for j, st in enumerate(stage):
                xs = ranks_gpu.inputs(1000 * replay + j, world, st.numel(), dtype, dev)
                st.copy_(xs[rank])
                refs.append(sum(x.double() for x in xs))
            g.replay()
            torch.cuda.synchronize()
            for b, ref in zip(bufs, refs, strict=True):
                if ranks_gpu.rel_err(b, ref) > ranks_gpu.TOL[dtype]:
                    failures.append(f"graph {dtype} n={b.numel()} replay {replay}")
    return failures


def decisions(rank, world):
    """What every rank decided: the agreed facts and auto's choice at each size."""
    import torch

    import commrt
    from commrt.dispatch.dispatcher import Query, why_not

    comm = commrt.init()
    sizes = [1 << k for k in range(10, 27, 2)]
    return {"blocked": comm.facts.nccl_symm_blocked,
            "eligible": [why_not("nccl_symm", Query(n, torch.bfloat16), comm.facts) is None
                         for n in sizes],
            "auto": [str(comm.dispatcher.decide(n, torch.bfloat16, "sum", m))
                     for n in sizes for m in ("graph", "eager")]}


# ----- one GPU -----------------------------------------------------------------------
@pytest.mark.gpu
def test_probe_and_the_nccl_backed_workspace_on_a_one_rank_group():
    (res,) = spawn.run(_bodies().probe_and_one_rank_workspace, 1, backend="nccl")
    assert res["version"] >= (2, 27) and res["api"], res
    assert res["switch"] == "" and res["after"] == "NCCL" and res["probe"] == "", res
    assert res["failures"] == []
    # putting the old backend back after an allocation raises (torch 2.11: "does not find
    # allocation backend CUDA"): why commrt never sets and restores it around its own
    assert res["restore"].startswith("RuntimeError"), res["restore"]


@pytest.mark.gpu
def test_a_process_with_cuda_backed_symmetric_memory_is_not_switched():
    (res,) = spawn.run(_bodies().switch_after_a_cuda_allocation, 1, backend="nccl")
    assert "could not switch" in res["why"] and "can not be changed" in res["why"], res


# ----- two or more GPUs ----------------------------------------------------------------
@pytest.mark.multigpu
def test_nccl_symm_matches_float64_eager_and_in_cuda_graphs():
    res = spawn.run(_bodies().nccl_symm_matches_float64, WORLD, backend="nccl",
                    env=NCCL_BACKEND, timeout=900)
    assert [r["failures"] for r in res] == [[]] * WORLD
    assert res[0]["plan"].startswith("nccl_symm: forced")


@pytest.mark.multigpu
def test_ranks_agree_on_nccl_symm_and_on_every_decision():
    res = spawn.run(_bodies().decisions, WORLD, backend="nccl", env=NCCL_BACKEND, timeout=300)
    assert all(r == res[0] for r in res)
    assert res[0]["blocked"] == "" and all(res[0]["eligible"])
    plain = spawn.run(_bodies().decisions, WORLD, backend="nccl", timeout=300)
    assert "not NCCL" in plain[0]["blocked"] and not any(plain[0]["eligible"])


@pytest.mark.multigpu
@pytest.mark.parametrize("body", ["correctness", "workspace_and_out", "graph_capture"])
def test_commrts_kernels_on_the_nccl_backed_workspace(body):
    import ranks_gpu

    res = spawn.run(getattr(ranks_gpu, body), WORLD, backend="nccl", env=NCCL_BACKEND,
                    timeout=900)
    assert [r["failures"] for r in res] == [[]] * WORLD
