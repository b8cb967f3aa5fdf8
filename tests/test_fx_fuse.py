"""The all-reduce -> add -> RMSNorm pattern pass on graphs traced by torch.compile (CPU)."""

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import commrt
import commrt.fx
from commrt.fx.registration import CommrtPass

H = 64


@pytest.fixture(scope="module", autouse=True)
def one_rank_group():
    if dist.is_initialized():
        yield
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


W = torch.randn(H).to(torch.bfloat16)


def hand_written(x, r):
    y = x * 2
    dist.all_reduce(y)
    h = r + y
    hf = h.float()
    v = hf.pow(2).mean(-1, keepdim=True)
    return (hf * torch.rsqrt(v + 1e-6)).to(torch.bfloat16) * W, h


def functional_rms_norm(x, r):
    y = x * 2
    commrt.all_reduce(y)
    h = y + r
    return F.rms_norm(h, (H,), W, 1e-5), h


def funcol(x, r):
    import torch.distributed._functional_collectives as fc

    y = fc.all_reduce(x * 2, "sum", dist.group.WORLD)
    h = y + r
    hf = h.float()
    return (hf * torch.rsqrt((hf * hf).mean(-1, keepdim=True) + 1e-6)).to(h.dtype) * W, h


def eps_from_tensor(x, r, eps):
    y = x * 2
    dist.all_reduce(y)
    h = r + y
    hf = h.float()
    return (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).to(h.dtype) * W, h


def other_dim(x, r):
    y = x * 2
    dist.all_reduce(y)
    h = r + y
    hf = h.float()
    return (hf * torch.rsqrt(hf.pow(2).mean(0, keepdim=True) + 1e-6)).to(h.dtype) * W, h


def broadcast_add(x, r):
    y = x * 2
    dist.all_reduce(y)
    h = r[0] + y  # [H] + [rows, H]
    return F.rms_norm(h, (H,), W, 1e-5), h


def result_used_twice(x, r):
    y = x * 2
    dist.all_reduce(y)
    h = r + y
    return F.rms_norm(h, (H,), W, 1e-5), h, y * 3


def compiled(fn, *args, backend="inductor"):
    import torch._inductor.config as ic

    commrt.fx.last_reports.clear()
    torch._dynamo.reset()
    # no FX graph cache: a cached graph would skip the passes and their reports
    with commrt.fx.installed(), ic.patch(fx_graph_cache=False):
        out = torch.compile(fn, fullgraph=True, backend=backend)(*args)
    fused = sum(r.fused for name, r in commrt.fx.last_reports if name == "fuse_rmsnorm")
    return out, fused


def inputs(rows=5):
    g = torch.Generator().manual_seed(rows)
    return (torch.randn(rows, H, generator=g).to(torch.bfloat16),
            torch.randn(rows, H, generator=g).to(torch.bfloat16))


@pytest.mark.parametrize("fn", [hand_written, functional_rms_norm, funcol])
@pytest.mark.parametrize("backend", ["inductor", commrt.fx.backend])
def test_matches_the_forms_and_keeps_the_numbers(fn, backend):
    x, r = inputs()
    ref = fn(x.clone(), r.clone())
    got, fused = compiled(fn, x.clone(), r.clone(), backend=backend)
    assert fused == 1
    for a, b in zip(got, ref, strict=True):
        assert torch.allclose(a.float(), b.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("fn,args", [
    (eps_from_tensor, (torch.tensor(1e-6),)),
    (other_dim, ()),
    (broadcast_add, ()),
    (result_used_twice, ()),
])
def test_near_misses_are_left_alone(fn, args):
    x, r = inputs()
    ref = fn(x.clone(), r.clone(), *args)
    got, fused = compiled(fn, x.clone(), r.clone(), *args)
    assert fused == 0
    for a, b in zip(got, ref, strict=True):
        assert torch.allclose(a.float(), b.float(), rtol=2e-2, atol=2e-2)


def test_reports_say_why_a_graph_was_not_fused():
    x, r = inputs()
    compiled(other_dim, x, r)
    reports = [rep for name, rep in commrt.fx.last_reports if name == "fuse_rmsnorm"]
    assert any("last dim" in why for rep in reports for why in rep.skipped)


def test_install_chains_the_users_pass_and_keeps_a_stable_uuid():
    import torch._inductor.config as ic
    from torch._inductor.custom_graph_pass import CustomGraphPass

    seen = []

    class UserPass(CustomGraphPass):
        def __call__(self, graph):
            seen.append(len(graph.nodes))

        def uuid(self):
            return "user-pass-1"

    before = ic.post_grad_custom_post_pass
    ic.post_grad_custom_post_pass = UserPass()
    try:
        p1 = commrt.fx.install()
        p2 = commrt.fx.install()  # installing twice does not chain ours twice
        assert isinstance(p2.previous, UserPass) and p1.uuid() == p2.uuid()
        x, r = inputs()
        torch._dynamo.reset()
        with ic.patch(fx_graph_cache=False):  # a cache hit would run no pass at all
            torch.compile(hand_written, fullgraph=True)(x, r)
        assert seen, "the user's pass must still run"
        commrt.fx.uninstall()
        assert isinstance(ic.post_grad_custom_post_pass, UserPass)
    finally:
        ic.post_grad_custom_post_pass = before
    assert CommrtPass(("fuse_rmsnorm",)).uuid() != CommrtPass((), None).uuid()
