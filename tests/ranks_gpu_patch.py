"""Per-rank bodies of the ``commrt.patch()`` GPU tests (NCCL ranks, bf16): the modules of
``ranks_patch`` give bitwise the outputs they give unpatched, eagerly, inside CUDA-graph
capture and compiled, while commrt's own kernels run their all-reduces."""

from __future__ import annotations

import ranks_patch
import torch


def _captured(model, x):
    """``model(x)`` captured in a CUDA graph (warmed up on the capture's side stream)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        model(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = model(x)
    graph.replay()
    torch.cuda.synchronize()
    return out.clone()


def _check(name: str, model, x, failures: list, algos: set) -> None:
    from commrt.patch import patched
    from commrt.stats import stats

    ref, ref_graph = model(x), _captured(model, x)
    stats(reset=True)
    with patched():
        got = model(x)
        got_graph = _captured(model, x)
    algos.update(stats(reset=True).get("all_reduce", {}))
    if not torch.equal(ref, got):
        failures.append(f"{name} eager: max diff {(ref - got).abs().max().item()}")
    if not torch.equal(ref_graph, got_graph):
        failures.append(f"{name} graph: max diff {(ref_graph - got_graph).abs().max().item()}")
    cref, _ = ranks_patch._compiled(model, x, False)
    cgot, (seen, adopted) = ranks_patch._compiled(model, x, True)
    if not torch.equal(cref, cgot):
        failures.append(f"{name} compiled: max diff {(cref - cgot).abs().max().item()}")
    if adopted != seen or not seen:
        failures.append(f"{name} compiled: {adopted} of {seen} all-reduces adopted")


def tp_modules_bf16(rank, world):
    import commrt

    commrt.init()  # the world's communicator, before any capture
    dev = torch.device("cuda", rank)
    x = ranks_patch.inputs((4, 3, ranks_patch.HIDDEN), torch.bfloat16, dev)
    failures: list[str] = []
    algos: set[str] = set()
    block = ranks_patch.tp_block("cuda", torch.bfloat16)
    _check("dtensor block", block, x, failures, algos)
    mlp = ranks_patch.MegatronMLP(dtype=torch.bfloat16, device=dev)
    _check("megatron mlp", mlp, x, failures, algos)
    if not algos - {"nccl"}:
        failures.append(f"no commrt kernel ran the patched all-reduces: {sorted(algos)}")
    return {"failures": failures, "algos": sorted(algos)}
