"""Per-rank bodies of the ``commrt.patch()`` tests: a Llama-style block parallelised with
``parallelize_module`` (DTensor), a Megatron-style module calling ``dist.all_reduce``, and
the drop-in semantics, each run unpatched and patched. Run as a script (``python -m
commrt.run tests/ranks_patch.py OUT_DIR``), it writes what each rank saw to OUT_DIR.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from unittest import mock

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

HIDDEN, HEADS, INTER = 64, 4, 128


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.head_dim = hidden // heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (
            nn.Linear(hidden, hidden, bias=False) for _ in range(4))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (p(x).view(b, s, -1, self.head_dim).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """One Llama decoder layer: two all-reduces a forward once parallelised."""

    def __init__(self, hidden: int = HIDDEN, heads: int = HEADS, inter: int = INTER):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(hidden, eps=1e-5)
        self.self_attn = Attention(hidden, heads)
        self.post_attention_layernorm = nn.RMSNorm(hidden, eps=1e-5)
        self.mlp = MLP(hidden, inter)

    def forward(self, x):
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))


def tp_block(device_type: str = "cpu", dtype=torch.float32, seed: int = 0) -> nn.Module:
    """``Block`` (same weights on every rank) parallelised over the world with DTensor."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    torch.manual_seed(seed)
    block = Block().to(device=device_type, dtype=dtype)
    mesh = init_device_mesh(device_type, (dist.get_world_size(),))
    col, row = ColwiseParallel(), RowwiseParallel()
    plan = {"self_attn.q_proj": col, "self_attn.k_proj": col, "self_attn.v_proj": col,
            "self_attn.o_proj": row, "mlp.gate_proj": col, "mlp.up_proj": col,
            "mlp.down_proj": row}
    return parallelize_module(block, mesh, plan)


def sp_block(device_type: str = "cpu", dtype=torch.float32, seed: int = 0) -> nn.Module:
    """``Block`` with sequence parallelism (torchtitan's plan): the norms ``SequenceParallel``
    on sequence shards, an all-gather before attention and the MLP, a reduce-scatter after."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    torch.manual_seed(seed)
    block = Block().to(device=device_type, dtype=dtype)
    mesh = init_device_mesh(device_type, (dist.get_world_size(),))
    col, row = ColwiseParallel(), RowwiseParallel(output_layouts=Shard(1))
    gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    plan = {"input_layernorm": SequenceParallel(), "post_attention_layernorm": SequenceParallel(),
            "self_attn": gather, "mlp": gather,
            "self_attn.q_proj": col, "self_attn.k_proj": col, "self_attn.v_proj": col,
            "self_attn.o_proj": row, "mlp.gate_proj": col, "mlp.up_proj": col,
            "mlp.down_proj": row}
    return parallelize_module(block, mesh, plan)


def sequence_parallel(rank, world):
    """The sequence-parallel block, unpatched and patched (eager and compiled): bitwise
    equal, its all-gathers and reduce-scatters counted, everything restored after."""
    from commrt.patch import patched
    from commrt.stats import stats

    model = sp_block()
    x = inputs((2, 4 * world, HIDDEN)).chunk(world, dim=1)[rank].contiguous()
    before = originals()
    ref = model(x)
    stats(reset=True)
    with patched():
        got = model(x)
        eager_counts = stats(reset=True)
    cref, _ = _compiled(model, x, False)
    stats(reset=True)
    cgot, _ = _compiled(model, x, True)
    compiled_counts = stats(reset=True)
    return {"eager_equal": torch.equal(ref, got), "compiled_equal": torch.equal(cref, cgot),
            "eager_counts": eager_counts, "compiled_counts": compiled_counts,
            "restored": restored(before)}


class MegatronMLP(nn.Module):
    """Megatron-style: column-parallel then row-parallel linear, ``dist.all_reduce``."""

    def __init__(self, group=None, seed: int = 0, dtype=torch.float32, device="cpu"):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        w1 = torch.randn(INTER, HIDDEN, generator=g).chunk(world, 0)[rank]
        w2 = torch.randn(HIDDEN, INTER, generator=g).chunk(world, 1)[rank]
        self.w1 = nn.Parameter(w1.to(device, dtype) * 0.1)
        self.w2 = nn.Parameter(w2.contiguous().to(device, dtype) * 0.1)
        self.group = group

    def forward(self, x):
        y = F.linear(F.silu(F.linear(x, self.w1)), self.w2)
        torch.distributed.all_reduce(y, group=self.group)
        return x + y


def inputs(shape=(2, 5, HIDDEN), dtype=torch.float32, device="cpu") -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(7)).to(device, dtype)


def calls() -> int:
    """All-reduces counted by ``commrt.stats()`` since the last call (then reset)."""
    from commrt.stats import stats

    return sum(stats(reset=True).get("all_reduce", {}).values())


def originals() -> tuple:
    """What ``unpatch()`` must restore: the functions, the kernels, the Inductor pass."""
    import torch._inductor.config as inductor_config

    names = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor")
    kernels = ("all_reduce", "all_reduce_", "all_gather_into_tensor", "reduce_scatter_tensor")
    return (tuple(getattr(m, n) for m in (dist, dist.distributed_c10d) for n in names),
            tuple(torch._C._dispatch_dump(f"_c10d_functional::{k}") for k in kernels),
            inductor_config.post_grad_custom_post_pass)


def restored(before: tuple) -> bool:
    now = originals()
    same_functions = all(a is b for a, b in zip(now[0], before[0], strict=True))
    return same_functions and now[1] == before[1] and now[2] is before[2]


def _compiled(model, x, patch_it: bool, decide=None):
    from commrt.fx import adopt
    from commrt.fx.registration import last_reports
    from commrt.patch import patched

    torch._dynamo.reset()
    last_reports.clear()
    with patched() if patch_it else contextlib.nullcontext():
        with mock.patch.object(adopt, "dispatcher_decision", decide) if decide \
                else contextlib.nullcontext():
            out = torch.compile(model, fullgraph=True)(x)
    reports = [r for name, r in last_reports if name == "adopt"]
    return out, (sum(r.all_reduces for r in reports), sum(r.adopted for r in reports))


def _one_shot(group, nbytes, dtype, device_type):
    from commrt.dispatch.dispatcher import Decision

    return Decision("one_shot", "the test's decision")


def run_model(model, x, compile_too: bool = True) -> dict:
    """Unpatched vs patched, eager and compiled (with the adopt pass, then with it made to
    rewrite): bitwise equal outputs, the calls counted, everything restored after."""
    from commrt.patch import patched

    before = originals()
    ref = model(x)
    calls()
    with patched():
        got = model(x)
        patched_calls = calls()
    res = {"eager_equal": torch.equal(ref, got), "eager_calls": patched_calls}
    if compile_too:
        cref, _ = _compiled(model, x, False)
        calls()
        cgot, seen = _compiled(model, x, True)
        res.update(compiled_equal=torch.equal(cref, cgot), compiled_calls=calls(),
                   compiled_seen=seen)
        mgot, mseen = _compiled(model, x, True, _one_shot)
        res.update(adopted_equal=torch.equal(cref, mgot), adopted_seen=mseen,
                   adopted_calls=calls())
    res["restored"] = restored(before)
    return res


def dtensor_block(rank, world):
    return run_model(tp_block(), inputs())


def megatron(rank, world):
    return run_model(MegatronMLP(), inputs())


def _outcome(fn):
    try:
        out = fn()
    except Exception as exc:  # the same failure, patched or not, is the point
        return ("error", type(exc).__name__)
    return ("ok", out)


def _same(a, b) -> bool:
    if a[0] != b[0] or a[0] == "error":
        return a == b
    x, y = a[1], b[1]
    return all(torch.equal(p, q) for p, q in zip(x, y, strict=True)) if isinstance(x, tuple) else \
        torch.equal(x, y)


def _cases(rank, sub, mesh):
    import torch.distributed._functional_collectives as funcol

    def t(dtype=torch.float32, shape=(6, 8)):
        g = torch.Generator().manual_seed(rank * 31 + 5)
        return (torch.randn(shape, generator=g) * 100).to(dtype)

    def ar(x, **kw):
        x = x.clone()
        dist.all_reduce(x, **kw)
        return x

    def ar_async(x, **kw):
        x = x.clone()
        work = dist.all_reduce(x, async_op=True, **kw)
        work.wait()
        return x, torch.tensor(work.is_completed())

    def inplace_funcol(x, op="sum", group=None):
        x = x.clone()
        name = (group or dist.group.WORLD).group_name
        torch.ops._c10d_functional.wait_tensor(
            torch.ops._c10d_functional.all_reduce_(x, op, name))
        return x

    return {
        "sum": lambda: ar(t()), "async": lambda: ar_async(t()),
        "avg": lambda: ar(t(), op=dist.ReduceOp.AVG),
        "max": lambda: ar(t(), op=dist.ReduceOp.MAX),
        "int64": lambda: ar(t(torch.int64)), "int32 async": lambda: ar_async(t(torch.int32)),
        "bf16": lambda: ar(t(torch.bfloat16)), "0-dim": lambda: ar(t(shape=())),
        "empty": lambda: ar(t(shape=(0,))),
        "transposed async": lambda: ar_async(t().t()),
        "complex": lambda: ar(t(torch.complex64)),
        "subgroup": lambda: ar(t(), group=sub), "subgroup async": lambda: ar_async(t(), group=sub),
        "funcol sum mesh": lambda: funcol.all_reduce(t(), "sum", mesh).wait(),
        "funcol avg": lambda: funcol.all_reduce(t(), "avg", mesh).wait(),
        "funcol max int": lambda: funcol.all_reduce(t(torch.int64), "max", dist.group.WORLD)
        .wait(),
        "funcol strided": lambda: funcol.all_reduce(t().t(), "sum", sub).wait(),
        "funcol_ in place": lambda: inplace_funcol(t()),
        "funcol_ non-contiguous": lambda: inplace_funcol(t().t()),
        "funcol_ product subgroup": lambda: inplace_funcol(t(), "product", sub),
    }


def strided_view(rank) -> bool:
    """A strided view reduced patched gets the sum of its elements and leaves the rest (gloo
    itself reduces the view's storage span as if contiguous, so this is not compared to
    it): the reference reduces a contiguous copy."""
    from commrt.patch import patched

    base = torch.arange(48.0).view(6, 8) + 100 * rank
    want = base.clone()
    part = want[:, 1::2].contiguous()
    dist.all_reduce(part)
    want[:, 1::2] = part
    with patched():
        dist.all_reduce(base[:, 1::2])
    return torch.equal(base, want)


def semantics(rank, world):
    """Every case gives what it gives unpatched, with every group patched, with only the
    subgroup patched, and with only the mesh; counts show which calls commrt took."""
    from torch.distributed.device_mesh import init_device_mesh

    from commrt.patch import patched, plan

    sub = dist.new_group(list(range(world)))
    mesh = init_device_mesh("cpu", (world,))
    before = originals()
    ref = {k: _outcome(fn) for k, fn in _cases(rank, sub, mesh).items()}
    res = {"bad": [], "calls": {}, "plans": {}}
    for label, groups in (("all", None), ("sub", [sub]), ("mesh", [mesh])):
        calls()
        with patched(groups):
            got = {k: _outcome(fn) for k, fn in _cases(rank, sub, mesh).items()}
            res["plans"][label] = (plan(torch.ones(4)).algorithm,
                                   plan(torch.ones(4), group=sub).reason)
        res["calls"][label] = calls()
        res["bad"] += [f"{label}: {k} {ref[k]} vs {got[k]}"[:300] for k in ref
                       if not _same(ref[k], got[k])]
    res["errors"] = sorted(k for k, v in ref.items() if v[0] == "error")
    res["strided view"] = strided_view(rank)
    res["restored"] = restored(before)
    return res


def untaken_calls(rank, world, n: int) -> bool:
    """``n`` functional collectives on a group commrt leaves to torch, while patched, each
    result kept (its tensor has a Python object the finished work also holds): torch's own
    kernels run them, and nothing waits on the GIL (gloo's worker drops a finished work's
    tensors, and with them their Python objects, under the lock the next call enqueues
    on); on NCCL ranks, the same calls on CUDA tensors."""
    from commrt.patch import patched

    dev = "cuda" if dist.get_backend() == "nccl" else "cpu"
    ops = torch.ops._c10d_functional
    name = dist.group.WORLD.group_name
    sub = dist.new_group(list(range(world)))
    ok = True
    with patched([sub]):
        kept = []
        for i in range(n):
            x = torch.full((4, 3), float(rank + i), device=dev)
            want = float(sum(r + i for r in range(world)))
            if i % 3 == 0:
                out = ops.wait_tensor(ops.all_reduce(x, "sum", name))
            elif i % 3 == 1:
                out = ops.wait_tensor(ops.all_gather_into_tensor(x, world, name))
                want = torch.arange(world, device=dev).repeat_interleave(4)[:, None] + float(i)
            else:
                out = ops.wait_tensor(ops.reduce_scatter_tensor(x.repeat(world, 1), "sum",
                                                                world, name))
            ok = ok and bool((out == want).all()) and out.shape[1] == 3
            kept.append(out)
    return ok


def script_main(out_dir: str) -> None:
    """Run as ``__main__`` (by ``commrt.run``): both modules, what this process saw."""
    from commrt.patch import all_reduce as patched_all_reduce
    from commrt.patch import is_patched

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    megatron_out = MegatronMLP()(inputs())
    block_out = tp_block()(inputs())
    seen = {"name": __name__, "argv": sys.argv, "patched": is_patched(),
            "dist_is_commrt": dist.all_reduce is patched_all_reduce, "calls": calls(),
            "sums": [float(megatron_out.double().sum()), float(block_out.double().sum())]}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(seen, f)
    # torch 2.11 with gloo: a DTensor module left to the cyclic collector past the group's
    # destruction aborted about one exit in six ("terminate called without an active
    # exception"); collected before it, none in 80
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    script_main(sys.argv[1])
