"""The overlap-and-bucket pass on aten graphs traced with the fake process group (CPU)."""

import shutil
import time

import funcol
import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from torch.fx.experimental.proxy_tensor import make_fx

import commrt.fx
from commrt import config
from commrt.fx.overlap import overlap_and_bucket

c10d = torch.ops._c10d_functional


@pytest.fixture(scope="module")
def groups():
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=0, world_size=8, store=FakeStore())
    pair = dist.new_group([0, 1])
    yield {8: dist.group.WORLD, 2: pair}
    dist.destroy_process_group()


def trace(fn, *args):
    return make_fx(fn, tracing_mode="fake")(*args)


def names(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def index(gm, target, k=0):
    return [i for i, n in enumerate(gm.graph.nodes) if n.target == target][k]


def w(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def layer_grads(x, ws, group):
    """Backward-like: each layer's gradient is all-reduced, then compute goes on."""
    outs = []
    for wt in ws:
        g = x @ wt
        outs.append(fc.all_reduce(g, "sum", group))
        x = torch.relu(x @ wt.t() @ wt)
    return x, outs


@pytest.mark.parametrize("world", [2, 8])
def test_start_raised_and_wait_sunk(groups, world):
    def f(a, b, wt):
        r = fc.all_reduce(a @ wt, "sum", groups[world])
        c = torch.relu(b @ wt) @ wt  # independent compute to hide behind
        return r + c
    gm = trace(f, w(64, 64), w(64, 64, seed=1), w(64, 64, seed=2))
    before_wait = index(gm, c10d.wait_tensor.default)
    rep = overlap_and_bucket(gm)
    ar, wait = index(gm, c10d.all_reduce.default), index(gm, c10d.wait_tensor.default)
    assert wait > before_wait and wait - ar > 2 and rep.moved == 1
    assert rep.exposed_us_after < rep.exposed_us_before and 0 < rep.hidden_fraction <= 1


def test_buckets_form_where_they_hide_more_and_numerics_stay_bitwise(groups):
    ws = [w(32, 32, seed=i) for i in range(4)]
    x = w(8, 32, seed=9)
    gm = trace(lambda x, *ws: layer_grads(x, ws, groups[2]), x, *ws)
    ref = gm(x, *ws)
    rep = overlap_and_bucket(gm)
    assert rep.collectives_before == 4 and rep.collectives_after < 4 and rep.buckets >= 1
    got = gm(x, *ws)
    assert all(torch.equal(a, b) for a, b in zip(torch.utils._pytree.tree_leaves(got),
                                                 torch.utils._pytree.tree_leaves(ref),
                                                 strict=True))


def test_no_bucket_across_a_dependency_a_dtype_change_or_the_cap(groups):
    def chain(a, wt):
        r1 = fc.all_reduce(a @ wt, "sum", groups[2])
        r2 = fc.all_reduce(r1 @ wt, "sum", groups[2])  # needs r1: cannot share its bucket
        r3 = fc.all_reduce((a @ wt).double(), "sum", groups[2])  # other dtype
        return r2, r3
    gm = trace(chain, w(16, 16), w(16, 16, seed=1))
    rep = overlap_and_bucket(gm)
    assert rep.buckets == 0 and rep.collectives_after == 3
    gm2 = trace(lambda x, *ws: layer_grads(x, ws, groups[2]), w(8, 32),
                *[w(32, 32, seed=i) for i in range(4)])
    assert overlap_and_bucket(gm2, bucket_cap=1).buckets == 0


def test_memory_budget_is_respected(groups):
    ws = [w(64, 64, seed=i) for i in range(4)]
    gm = trace(lambda x, *ws: layer_grads(x, ws, groups[2]), w(16, 64), *ws)
    rep = overlap_and_bucket(gm, memory_budget=0)
    gm_ref = trace(lambda x, *ws: layer_grads(x, ws, groups[2]), w(16, 64), *ws)
    base = overlap_and_bucket(gm_ref, memory_budget=1 << 40)
    assert rep.peak_in_flight_bytes <= base.peak_in_flight_bytes
    assert rep.memory_budget_bytes == 0


def test_same_graph_same_result_every_time(groups):
    ws = [w(32, 32, seed=i) for i in range(6)]
    graphs = []
    for _ in range(3):
        gm = trace(lambda x, *ws: layer_grads(x, ws, groups[8]), w(8, 32), *ws)
        overlap_and_bucket(gm)
        graphs.append(gm.code)
    assert graphs[0] == graphs[1] == graphs[2]


def test_graphs_it_does_not_handle_stay_correct_with_a_reason(groups):
    def a2a(a):
        return fc.all_to_all_single(a, None, None, groups[2]) + 1
    gm = trace(a2a, w(8, 4))
    code = gm.code
    rep = overlap_and_bucket(gm)
    assert gm.code == code and any("not handled" in s for s in rep.skipped)
    plain = trace(lambda a: torch.relu(a) * 2, w(4, 4))
    rep = overlap_and_bucket(plain)
    assert rep.collectives_before == 0 and rep.hidden_fraction == 0


def test_thirty_thousand_node_graph_under_ten_seconds(groups):
    layers = 1400  # about 22 nodes and one gradient all-reduce a layer, as in a transformer
    ws = [w(8, 8, seed=i) for i in range(4)]

    def deep(x, *ws):
        outs = []
        for i in range(layers):
            h = torch.relu(x @ ws[i % 4]) + x
            h = h * torch.sigmoid(h) - h.mean()
            a = torch.softmax(h @ h.t(), -1) @ h
            a = (a - a.mean(-1, keepdim=True)) * torch.rsqrt(a.var(-1, keepdim=True) + 1e-5)
            outs.append(fc.all_reduce(a @ ws[(i + 1) % 4], "sum", groups[8]))
            x = h.tanh() + a
        return x, outs
    gm = trace(deep, w(4, 8), *ws)
    n = len(gm.graph.nodes)
    assert n > 30_000
    t0 = time.perf_counter()
    rep = overlap_and_bucket(gm)
    assert time.perf_counter() - t0 < 10.0 and rep.seconds < 10.0
    assert rep.collectives_after <= rep.collectives_before == layers


def test_install_runs_both_passes_in_order():
    p = commrt.fx.install()
    try:
        assert p.passes[:2] == ("fuse_rmsnorm", "overlap")  # then any pass after it
    finally:
        commrt.fx.uninstall()


def test_dynamic_shapes_are_left_in_place_with_a_reason(groups):
    def f(a, wt):
        return fc.all_reduce(a @ wt, "sum", groups[2]) + 1
    gm = make_fx(f, tracing_mode="symbolic")(w(8, 16), w(16, 16))
    code = gm.code
    rep = overlap_and_bucket(gm)
    assert gm.code == code and any("dynamic shape" in s for s in rep.skipped)


def test_commrt_all_reduces_are_bucketed(groups):
    import commrt  # noqa: F401  (registers torch.ops.commrt)

    def f(a, b, wt):
        x = torch.ops.commrt.all_reduce(a @ wt, "0")
        y = torch.ops.commrt.all_reduce(b @ wt, "0")
        return torch.relu(wt @ wt) + x + y
    gm = trace(f, w(8, 8), w(8, 8, seed=1), w(8, 8, seed=2))
    rep = overlap_and_bucket(gm)
    assert rep.collectives_before == 2 and rep.collectives_after == 1 and rep.buckets == 1
    assert names(gm).count(torch.ops.commrt.all_reduce.default) == 1


def test_all_gathers_and_reduce_scatters_are_bucketed_too(groups):
    def f(a, b, wt):
        g1 = funcol.all_gather(a @ wt, groups[2])
        g2 = funcol.all_gather(b @ wt, groups[2])
        r1 = funcol.reduce_scatter(a @ wt, "sum", groups[2])
        r2 = funcol.reduce_scatter(b @ wt, "sum", groups[2])
        c = torch.relu(wt @ wt) @ wt
        return g1 + 1, g2 * 2, r1 - 1, r2 + c[:4]
    gm = trace(f, w(8, 16), w(8, 16, seed=1), w(16, 16, seed=2))
    rep = overlap_and_bucket(gm)
    assert rep.collectives_before == 4 and rep.collectives_after == 2 and rep.buckets == 2


@pytest.mark.skipif(shutil.which("g++") is None, reason="Inductor on CPU needs a C++ compiler")
def test_inductor_keeps_the_placement(groups):
    """Compiled with Inductor, the start is issued before the independent matmuls and the
    wait after them (pinned by control dependencies), and the result is unchanged."""
    from torch._inductor.utils import run_and_get_code

    def f(a, b, wt):
        r = fc.all_reduce(a @ wt, "sum", groups[8])
        c = b
        for _ in range(4):
            c = torch.relu(c @ wt)
        return r + c
    args = (w(32, 32), w(32, 32, seed=1), w(32, 32, seed=2))
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    commrt.fx.last_reports.clear()
    # a cache hit would skip the pass (and its report): compile for real
    with commrt.fx.installed(fuse_rmsnorm=False), inductor_config.patch(fx_graph_cache=False):
        out, (code, *_) = run_and_get_code(torch.compile(f, fullgraph=True), *args)
    rep = [r for name, r in commrt.fx.last_reports if name == "overlap"][-1]
    calls = [ln.strip() for ln in code.splitlines()
             if ln.strip().startswith(("extern_kernels.mm", "torch.ops._c10d_functional"))]
    start = next(i for i, c in enumerate(calls) if "all_reduce" in c)
    wait = next(i for i, c in enumerate(calls) if "wait_tensor" in c)
    assert start == 1 and wait == len(calls) - 1, calls  # mm, start, 4 x mm, wait
    torch.testing.assert_close(out, f(*args))  # the fake group's all-reduce is the identity
    assert rep.pinned == 1


def dp_step(x, *ws):
    """A backward that all-reduces each layer's gradient (the last layer's first), then
    updates in parameter order: the first update needs the last all-reduce issued."""
    grads, h = [], x
    for wt in reversed(ws):
        grads.append(fc.all_reduce(h @ wt, "sum", dist.group.WORLD))
        h = torch.relu(h @ wt.t())
    return [wt - 0.1 * g for wt, g in zip(ws, reversed(grads), strict=True)]


def test_a_stalled_wait_goes_after_the_work_that_does_not_need_it(groups):
    ws = [w(64, 64, seed=i) for i in range(4)]
    x = w(64, 64, seed=9)
    gm = trace(dp_step, x, *ws)
    ref = gm(x, *ws)
    rep = overlap_and_bucket(gm, bucket_cap=1)  # one all-reduce a layer
    assert rep.deferred >= 1 and rep.exposed_us_after < rep.exposed_us_before
    nodes = list(gm.graph.nodes)
    out = nodes[-1].args[0]
    upd = [nodes.index(u) for u in out]  # updates of ws[0], ws[1], ...
    assert upd[0] > max(upd[1:])  # ws[0]'s all-reduce was issued last: its update runs last
    got = gm(x, *ws)
    assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))
    again = trace(dp_step, x, *ws)
    overlap_and_bucket(again, bucket_cap=1)
    assert again.code == gm.code


def test_work_with_side_effects_keeps_its_place(groups):
    def f(a, b, wt):
        r = fc.all_reduce(a @ wt, "sum", groups[2])
        y = r + 1
        b.add_(1)  # in place: may not move before the wait, though it does not need it
        return y, b * 2
    gm = make_fx(f, tracing_mode="fake")(w(64, 64), w(64, 64, seed=1), w(64, 64, seed=2))
    overlap_and_bucket(gm)
    assert index(gm, torch.ops.aten.add_.Tensor) > index(gm, c10d.wait_tensor.default)
    a, b, wt = w(64, 64), w(64, 64, seed=1), w(64, 64, seed=2)
    b0 = b.clone()
    y, z = gm(a, b, wt)
    assert torch.equal(b, b0 + 1) and torch.equal(z, (b0 + 1) * 2)


def test_functional_collectives_are_priced_as_the_process_group_runs_them(groups):
    """The process group (NCCL) runs a functional all-reduce; commrt's op runs auto's
    choice: the cost model reads each one's own row of the measured table."""
    from commrt.dispatch import table as tbl
    from commrt.dispatch.profile import DeviceProfile
    from commrt.fx.cost import CostModel

    prof = DeviceProfile("nvidia", "sm90-h200", "NVIDIA H200", 132, 141 << 30, 2, "nvlink",
                         True, False, "nvml")
    model, t = CostModel(prof), tbl.find("sm90-h200", 2)
    name = groups[2].group_name
    for nbytes in (64 << 10, 1 << 20, 32 << 20):
        nccl = t.predict_us("all_reduce", "graph", "nccl", nbytes)
        best = min(c.us for c in t.row_for("all_reduce", "graph", nbytes).ranking)
        assert model.comm_us("all_reduce", nbytes, torch.bfloat16, name) == nccl
        assert model.comm_us("commrt_all_reduce", nbytes, torch.bfloat16, name) < nccl
        assert model.comm_us("commrt_all_reduce", nbytes, torch.bfloat16, name) <= best + 1e-9


def test_collectives_move_to_a_cta_limited_copy_of_their_group(groups, monkeypatch):
    """With a limit, every functional collective runs on the group's limited copy; without
    a copy (fake or gloo groups get none) the graph keeps its groups and says why."""
    from commrt.fx import comm_groups

    assert any("fake" in r for r in comm_groups.make_copies("ctas8", [groups[2]]))
    ws = [w(32, 32, seed=i) for i in range(4)]
    x = w(8, 32, seed=9)
    gm = trace(lambda x, *ws: layer_grads(x, ws, groups[2]), x, *ws)
    rep = overlap_and_bucket(gm, comm_ctas=8)
    name = groups[2].group_name
    assert rep.limited == 0 and any(f"group {name}: no ctas8 copy" in s for s in rep.skipped)
    monkeypatch.setitem(comm_groups._BY_NAME, (name, "ctas8"), "copy-8")
    gm = trace(lambda x, *ws: layer_grads(x, ws, groups[2]), x, *ws)
    rep = overlap_and_bucket(gm, comm_ctas=8)
    starts = [n for n in gm.graph.nodes if n.target == c10d.all_reduce.default]
    assert rep.limited == len(starts) > 0 and all(n.args[-1] == "copy-8" for n in starts)
    with pytest.raises(ValueError, match="comm_ctas"):
        commrt.fx.install(comm_ctas=100)
    with pytest.raises(ValueError, match="exclude each other"):
        commrt.fx.install(comm_ctas=8, copy_engine=True)


def test_only_sum_and_avg_all_reduces_move_to_the_copy_engine_group(groups, monkeypatch):
    """Beyond two ranks: as all-gathers on the copy, summed over the ranks in rank order."""
    from commrt.fx import comm_groups

    monkeypatch.setattr("commrt.fx.overlap.CE_SLACK", 0.0)  # however little compute
    name = groups[8].group_name
    world = groups[8].size()
    monkeypatch.setitem(comm_groups._BY_NAME, (name, "ce"), "ce-copy")

    def f(a, b, c, d):
        s = fc.all_reduce(a @ a, "sum", groups[8])
        m = fc.all_reduce(b @ b, "max", groups[8])
        v = fc.all_reduce(d @ d, "avg", groups[8])
        g = funcol.all_gather(c @ c, groups[8])
        return s + m + v, g

    gm = trace(f, *(w(16, 16, seed=i) for i in range(4)))
    rep = overlap_and_bucket(gm, copy_engine=True, bucket_cap=1)  # no buckets: one each
    reduces = [n for n in gm.graph.nodes if n.target == c10d.all_reduce.default]
    assert [(n.args[1], n.args[-1]) for n in reduces] == [("max", name)]
    # the sum and the avg became all-gathers on the copy, summed over the ranks after
    # their waits (the avg also divided by the world size)
    gathers = [n for n in gm.graph.nodes if n.target == c10d.all_gather_into_tensor.default]
    assert sorted(n.args[-1] for n in gathers) == sorted(["ce-copy", "ce-copy", name])
    assert rep.limited == 2
    for g in (n for n in gathers if n.args[-1] == "ce-copy"):
        (wait,) = g.users
        (view,) = wait.users
        (total,) = view.users
        assert view.args[1] == [world, 16, 16] and total.target == torch.ops.aten.sum.dim_IntList
        assert total.meta["val"].shape == (16, 16)
    assert sum(n.target == torch.ops.aten.div.Tensor and n.args[1] == world
               for n in gm.graph.nodes) == 1
    assert not any(n.target == torch.ops.commrt.ce_exchange.default for n in gm.graph.nodes)


@pytest.mark.parametrize("cap", [None, 1])
def test_two_rank_all_reduces_become_exchanges_summed_part_by_part(groups, monkeypatch, cap):
    """Of two ranks: ``ce_exchange`` of the bucket's parts (no bucket is built), each with a
    landing place of its own, and every member's result ``own part + peer's slice``."""
    from commrt.fx import comm_groups
    from commrt.fx.overlap import LANDING_ALIGN

    name = groups[2].group_name
    monkeypatch.setitem(comm_groups._BY_NAME, (name, "ce"), "ce-copy")
    monkeypatch.setattr("commrt.fx.overlap.CE_SLACK", 0.0)

    def f(x, w0, w1, w2, w3):
        x, outs = layer_grads(x, (w0, w1, w2), groups[2])
        return x, outs, fc.all_reduce(x @ w3, "avg", groups[2])

    args = [w(8, 31, seed=9), *(w(31, 31, seed=i) for i in range(3)), w(31, 5, seed=3)]
    gm = trace(f, *args)
    kw = {} if cap is None else {"bucket_cap": cap}
    rep = overlap_and_bucket(gm, copy_engine=True, **kw)
    nodes = list(gm.graph.nodes)
    ex = [n for n in nodes if n.target == torch.ops.commrt.ce_exchange.default]
    assert rep.limited == len(ex) == rep.collectives_after
    assert (len(ex) < 4) == (cap is None)  # the default cap buckets the sums
    assert not any(n.target in (c10d.all_reduce.default, torch.ops.aten.cat.default)
                   for n in nodes)
    sizes = [sum(p.meta["val"].numel() * 4 for p in n.args[0]) for n in ex]
    offsets = [n.args[2] for n in ex]
    want = [sum(-(-b // LANDING_ALIGN) * LANDING_ALIGN for b in sizes[:i])
            for i in range(len(ex))]
    assert offsets == want and {n.args[3] for n in ex} == {want[-1] + -(-sizes[-1] // 256) * 256}
    assert all(n.args[1] == "ce-copy" for n in ex)
    divs = [n for n in nodes if n.target == torch.ops.aten.div.Tensor]
    assert len(divs) == 1 and divs[0].args[1] == 2
    for e in ex:
        (wait,) = e.users
        assert wait.target == c10d.wait_tensor.default
        for u in wait.users:  # the peer's slice (or view) of each part, added to the part
            (add,) = u.users
            assert add.target == torch.ops.aten.add.Tensor and add.args[1] is u
            assert add.args[0] in e.args[0] or add.args[0].target == torch.ops.aten.view.default
            assert add.meta["val"].shape == add.args[0].meta["val"].shape
    # the same graph every time
    again = trace(f, *args)
    overlap_and_bucket(again, copy_engine=True, **kw)
    assert [str(n.target) for n in again.graph.nodes] == [str(n.target) for n in nodes]


def test_only_all_reduces_with_compute_to_hide_behind_go_to_the_copy_engines(groups,
                                                                            monkeypatch):
    from commrt.fx import comm_groups

    name = groups[2].group_name
    monkeypatch.setitem(comm_groups._BY_NAME, (name, "ce"), "ce-copy")

    def f(a, b, wt):
        hidden = fc.all_reduce(a, "sum", groups[2])
        c = b
        for _ in range(8):  # independent compute, far longer than the all-reduce
            c = torch.relu(c @ wt)
        exposed = fc.all_reduce(c, "sum", groups[2])
        return hidden + c, exposed * 2

    gm = trace(f, w(16, 256), w(16, 256, seed=1), w(256, 256, seed=2))
    rep = overlap_and_bucket(gm, copy_engine=True, bucket_cap=1)
    ex = [n for n in gm.graph.nodes if n.target == torch.ops.commrt.ce_exchange.default]
    left = [n for n in gm.graph.nodes if n.target == c10d.all_reduce.default]
    assert rep.limited == len(ex) == 1 and len(left) == 1 and left[0].args[-1] == name
    assert ex[0].args[0][0].op == "placeholder"  # the first one's input: a
    assert any("1 all-reduces left on their group: too little compute" in s
               for s in rep.skipped)


def test_a_wait_whose_result_lives_on_moves_within_a_zero_budget(groups):
    def f(a, b, wt):
        r = fc.all_reduce(a @ wt, "sum", groups[2])
        return r, torch.relu(b @ wt) @ wt  # r is a result: it lives to the end anyway
    gm = trace(f, w(64, 64), w(64, 64, seed=1), w(64, 64, seed=2))
    rep = overlap_and_bucket(gm, memory_budget=0)
    assert rep.moved == 1
    assert index(gm, c10d.wait_tensor.default) > index(gm, torch.ops.aten.relu.default)


def test_copy_engine_auto_is_on_for_two_nccl_ranks_on_gpus_only(groups, monkeypatch):
    from commrt.fx import comm_groups

    p = commrt.fx.install()  # off by default: no note, no copy
    try:
        assert p.copy_engine is False and not p.notes
    finally:
        commrt.fx.uninstall()
    monkeypatch.setenv("COMMRT_FX_COPY_ENGINE", "auto")
    config.reload()
    try:
        p = commrt.fx.install()  # the fake group on a CPU machine: auto leaves it off
        assert p.copy_engine is False and any("copy engine off (auto)" in n for n in p.notes)
    finally:
        commrt.fx.uninstall()
        monkeypatch.delenv("COMMRT_FX_COPY_ENGINE")
        config.reload()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda g=None: "nccl")
    assert comm_groups.copy_engine_by_default([groups[2]]) == (True, "two NCCL ranks on GPUs")
    on, why = comm_groups.copy_engine_by_default([groups[8]])
    assert not on and "has 8 ranks" in why
    on, why = comm_groups.copy_engine_by_default()  # the world group: 8 ranks
    assert not on and "has 8 ranks" in why
    monkeypatch.setattr(dist, "get_backend", lambda g=None: "gloo")
    assert "runs on gloo, not NCCL" in comm_groups.copy_engine_by_default([groups[2]])[1]


def test_install_takes_a_bucket_cap():
    p = commrt.fx.install(bucket_cap=1)
    try:
        assert p.bucket_cap == 1
    finally:
        commrt.fx.uninstall()
    with pytest.raises(ValueError, match="bucket_cap"):
        commrt.fx.install(bucket_cap=0)


def test_install_takes_a_memory_budget_and_the_pass_gets_it(groups, monkeypatch):
    seen = []
    monkeypatch.setitem(commrt.fx.registration.PASSES, "overlap",
                        lambda g, **kw: seen.append(kw.get("memory_budget")) or
                        commrt.fx.OverlapReport())
    p = commrt.fx.install(fuse_rmsnorm=False, memory_budget=1 << 20)
    try:
        p(trace(lambda a: a + 1, w(2, 2)).graph)
        assert seen == [1 << 20] and p.uuid() != commrt.fx.CommrtPass(("overlap",)).uuid()
    finally:
        commrt.fx.uninstall()
    with pytest.raises(ValueError, match="memory_budget"):
        commrt.fx.install(memory_budget=-1)


def test_gradients_made_at_the_end_are_computed_as_soon_as_their_inputs_exist(groups):
    """A graph that makes every weight gradient at its end (as the post-grad graph of
    ``grad_and_value`` does): the pass moves each gradient's matmul to just after its
    inputs, so its all-reduce starts during the rest of the work; bits unchanged. Here the
    move also frees the activations sooner."""
    ws = [w(32, 32, seed=i) for i in range(4)]
    x = w(256, 32, seed=9)

    def f(x, *ws):
        hs = [x]
        for wt in ws:
            hs.append(torch.relu(hs[-1] @ wt))
        grads = [fc.all_reduce(hs[i].t() @ hs[i + 1], "sum", groups[2]) for i in range(4)]
        return [wt - 0.1 * g for wt, g in zip(ws, grads, strict=True)]
    gm = trace(f, x, *ws)
    ref = gm(x, *ws)
    from commrt.fx.memory import peak_bytes

    before = peak_bytes(list(gm.graph.nodes))
    rep = overlap_and_bucket(gm, memory_budget=0, bucket_cap=1)  # one all-reduce each
    assert rep.hoisted == 4 and peak_bytes(list(gm.graph.nodes)) <= before
    nodes = list(gm.graph.nodes)
    relus = [i for i, n in enumerate(nodes) if n.target == torch.ops.aten.relu.default]
    starts = [i for i, n in enumerate(nodes) if n.target == c10d.all_reduce.default]
    assert starts[0] < relus[1] and starts[2] < relus[3], (starts, relus)
    assert all(torch.equal(a, b) for a, b in zip(gm(x, *ws), ref, strict=True))


def test_producers_stay_where_moving_them_would_exceed_the_memory_budget(groups):
    ws = [w(64, 64, seed=i) for i in range(3)]
    x = w(8, 64, seed=9)  # few rows: a gradient is larger than the activations it frees

    def f(x, *ws):
        hs = [x]
        for wt in ws:
            hs.append(torch.relu(hs[-1] @ wt))
        return [fc.all_reduce(hs[i].t() @ hs[i + 1], "sum", groups[2]).sum() for i in range(3)]
    from commrt.fx.memory import peak_bytes

    gm = trace(f, x, *ws)
    before = peak_bytes(list(gm.graph.nodes))
    rep = overlap_and_bucket(gm, memory_budget=0, bucket_cap=1)
    assert rep.hoisted < 3 and any("left where the graph makes them" in s for s in rep.skipped)
    assert peak_bytes(list(gm.graph.nodes)) <= before
    gm = trace(f, x, *ws)
    assert overlap_and_bucket(gm, memory_budget=1 << 30, bucket_cap=1).hoisted == 3


# ----- commrt::all_gather and commrt::reduce_scatter -------------------------------------
def _gather_ref(x, world, group):
    """A stand-in for ``commrt::all_gather`` on CPU: rank r's input is ``x * (r + 1)``."""
    return torch.cat([x * (r + 1) for r in range(world)])


def _scatter_ref(x, op, world, group):
    """A stand-in for ``commrt::reduce_scatter`` on CPU: every rank holds ``x``."""
    return torch.stack(list(x.chunk(world))).sum(0) if op == "sum" else x.chunk(world)[0]


def with_references(gm):
    """``gm`` with commrt's all-gathers and reduce-scatters replaced by their stand-ins, so
    that the graph runs on the fake group and its values can be compared."""
    refs = {torch.ops.commrt.all_gather.default: _gather_ref,
            torch.ops.commrt.reduce_scatter.default: _scatter_ref}
    for n in gm.graph.nodes:
        n.target = refs.get(n.target, n.target)
    gm.recompile()
    return gm


def commrt_collectives(a, b, wt, group):
    """Two all-gathers and two reduce-scatters of commrt's on one group, each followed by
    compute that needs it: as functional collectives they would share buckets."""
    g1 = torch.ops.commrt.all_gather(a @ wt, 2, group)
    g2 = torch.ops.commrt.all_gather(b @ wt, 2, group)
    r1 = torch.ops.commrt.reduce_scatter(a @ wt, "sum", 2, group)
    r2 = torch.ops.commrt.reduce_scatter(b @ wt, "sum", 2, group)
    c = torch.relu(wt @ wt) @ wt
    return g1 + 1, g2 * 2, r1 - 1, r2 + c[:4]


def test_commrt_all_gathers_and_reduce_scatters_count_but_are_never_bucketed(groups):
    args = (w(8, 16), w(8, 16, seed=1), w(16, 16, seed=2))
    name = groups[2].group_name
    gm = trace(lambda a, b, wt: commrt_collectives(a, b, wt, name), *args)
    ref = with_references(trace(lambda a, b, wt: commrt_collectives(a, b, wt, name), *args))
    rep = overlap_and_bucket(gm)
    assert rep.collectives_before == rep.collectives_after == 4
    assert rep.buckets == 0 and rep.moved == 0 and rep.hoisted == 0
    assert rep.comm_us > 0 and rep.exposed_us_after == pytest.approx(rep.comm_us)
    ops = names(gm)
    assert ops.count(torch.ops.commrt.all_gather.default) == 2
    assert ops.count(torch.ops.commrt.reduce_scatter.default) == 2
    assert torch.ops.aten.cat.default not in ops  # nothing packed
    for n in gm.graph.nodes:  # each keeps its own input and group
        if n.target in (torch.ops.commrt.all_gather.default,
                        torch.ops.commrt.reduce_scatter.default):
            assert n.args[0].target == torch.ops.aten.mm.default and n.args[-1] == name
    got = with_references(gm)(*args)
    assert all(torch.equal(x, y) for x, y in zip(got, ref(*args), strict=True))


def test_a_commrt_all_gather_runs_while_a_functional_all_reduce_is_in_flight(groups):
    """commrt's ops run on the compute stream: the wait that would stall goes after the
    all-gather and the reduce-scatter, which hide the all-reduce; no bucket mixes them."""
    name = groups[2].group_name

    def f(a, b, wt):
        y = fc.all_reduce(a @ wt, "sum", groups[2]) + 1
        g = torch.ops.commrt.all_gather(b @ wt, 2, name)
        s = torch.ops.commrt.reduce_scatter(b @ wt.t(), "sum", 2, name)
        return y, g, s
    args = (w(64, 64), w(64, 64, seed=1), w(64, 64, seed=2))
    gm = trace(f, *args)
    ref = with_references(trace(f, *args))
    rep = overlap_and_bucket(gm, memory_budget=1 << 30)
    assert rep.collectives_before == rep.collectives_after == 3 and rep.buckets == 0
    assert rep.deferred == 1 and rep.exposed_us_after < rep.exposed_us_before
    wait = index(gm, c10d.wait_tensor.default)
    assert index(gm, c10d.all_reduce.default) < index(gm, torch.ops.commrt.all_gather.default)
    assert index(gm, torch.ops.commrt.all_gather.default) < wait
    assert index(gm, torch.ops.commrt.reduce_scatter.default) < wait
    got = with_references(gm)(*args)
    assert all(torch.equal(x, y) for x, y in zip(got, ref(*args), strict=True))


def test_commrt_gathers_and_scatters_are_priced_as_the_dispatcher_predicts(groups,
                                                                           monkeypatch):
    """With a communicator for the group: its dispatcher's prediction for its choice
    (rs_push here: symm_rs, the table's fastest, needs PyTorch's
    reduce_scatter_out, which these facts lack). Without
    one: the fastest in the table's rows of the operation; without rows: as the process
    group runs it."""
    import types

    from test_dispatch import AG_SECTION, RS_SECTION, facts, with_sections

    from commrt import registry
    from commrt.dispatch.dispatcher import Dispatcher
    from commrt.fx import cost

    f = with_sections(facts(), all_gather=AG_SECTION, reduce_scatter=RS_SECTION)
    disp = Dispatcher(f)
    name = groups[2].group_name
    bf16 = torch.bfloat16
    assert cost.CostModel().comm_us("commrt_all_gather", 4096, bf16, name) == \
        cost.CostModel().comm_us("all_gather", 4096, bf16, name)
    monkeypatch.setattr(cost, "_table", lambda generation, world: f.table)
    assert cost.CostModel().comm_us("commrt_reduce_scatter", 4096, bf16, name) == 40.0
    monkeypatch.setitem(registry._BY_NAME, name, types.SimpleNamespace(dispatcher=disp))
    model = cost.CostModel()
    for nbytes in (4096, 1 << 20):
        for op in ("all_gather", "reduce_scatter"):
            want = disp.predict_us(nbytes, bf16, "graph", kind=op)
            assert want is not None
            assert model.comm_us(f"commrt_{op}", nbytes, bf16, name) == want
    assert model.comm_us("commrt_all_gather", 4096, bf16, name) == 5.0
    assert model.comm_us("commrt_reduce_scatter", 4096, bf16, name) == 50.0
