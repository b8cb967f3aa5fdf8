"""``commrt.patch()``: torch's all-reduces through commrt, two gloo processes on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import ranks_patch
import spawn
import torch

from commrt.dispatch.dispatcher import Decision

HERE = os.path.dirname(os.path.abspath(__file__))
# every compile really compiles (a cache hit would skip the passes under test)
NO_CACHE = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}


def _check_model(res: list[dict], per_forward: int) -> None:
    for r in res:
        assert r["eager_equal"] and r["compiled_equal"] and r["adopted_equal"], r
        assert r["eager_calls"] == per_forward, r
        assert r["compiled_calls"] == per_forward, r  # Inductor's code calls our kernel
        assert r["compiled_seen"] == (per_forward, 0), r  # gloo: nothing to adopt
        assert r["adopted_seen"] == (per_forward, per_forward), r
        assert r["restored"], r


def test_dtensor_llama_block_bitwise_patched_eager_and_compiled():
    _check_model(spawn.run(ranks_patch.dtensor_block, 2, env=NO_CACHE), per_forward=2)


def test_sequence_parallel_block_bitwise_patched_with_gathers_and_scatters_counted():
    res = spawn.run(ranks_patch.sequence_parallel, 2, env=NO_CACHE)
    for r in res:
        assert r["eager_equal"] and r["compiled_equal"] and r["restored"], r
        for counts in (r["eager_counts"], r["compiled_counts"]):
            # attention and MLP: one all-gather before, one reduce-scatter after each
            assert sum(counts.get("all_gather", {}).values()) == 2, counts
            assert sum(counts.get("reduce_scatter", {}).values()) == 2, counts


def test_megatron_dist_all_reduce_bitwise_patched_eager_and_compiled():
    _check_model(spawn.run(ranks_patch.megatron, 2, env=NO_CACHE), per_forward=1)


def test_drop_in_semantics_async_avg_int_and_mixed_groups():
    res = spawn.run(ranks_patch.semantics, 2)
    for r in res:
        assert r["bad"] == [], r["bad"]
        assert r["restored"] and r["strided view"]
        # taken by commrt: everything but complex, the in-place non-contiguous
        # functional call (torch's kernel) and the errors (gloo has no avg)
        assert r["calls"]["all"] == 17 - len(r["errors"]), r
        assert r["calls"]["sub"] == 4, r  # subgroup x2, funcol strided, funcol_ product
        # a one-dimensional mesh over the world reduces over the world group
        assert r["calls"]["mesh"] == r["calls"]["all"] - r["calls"]["sub"], r
        assert r["plans"]["sub"][0] == "torch"
        assert "gloo" in r["plans"]["all"][1] or "gloo" in r["plans"]["sub"][1]


def test_calls_left_to_torch_never_deadlock_against_gloo_workers():
    # where torch's own kernel ran with the GIL held (SafeKernelFunction.call_boxed), this
    # hung in three of three runs of 3,000 calls and in four of five runs of 300 on torch 2.11
    assert spawn.run(ranks_patch.untaken_calls, 2, 2000, timeout=120) == [True, True]


def _torchrun(out_dir: str, patch_env: str) -> list[dict]:
    env = {**os.environ, "COMMRT_PATCH": patch_env, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(spawn._free_port()),
           "-m", "commrt.run", os.path.join(HERE, "ranks_patch.py"), out_dir]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.load(open(os.path.join(out_dir, f"rank{r}.json"))) for r in range(2)]


def test_commrt_run_launches_an_unmodified_script_patched(tmp_path):
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    on, off = _torchrun(str(tmp_path / "on"), "1"), _torchrun(str(tmp_path / "off"), "0")
    for r_on, r_off in zip(on, off, strict=True):
        assert r_on["name"] == "__main__" and r_on["argv"][1:] == [str(tmp_path / "on")]
        assert r_on["patched"] and r_on["dist_is_commrt"] and r_on["calls"] == 3, r_on
        assert not r_off["patched"] and not r_off["dist_is_commrt"] and r_off["calls"] == 0
        assert r_on["sums"] == r_off["sums"]


def test_commrt_run_without_a_script_prints_usage():
    done = subprocess.run([sys.executable, "-m", "commrt.run"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "usage" in done.stderr


def _traced_graph():
    """aten graph: an exposed all-reduce, one hidden behind a matmul, an avg, a large one,
    and one on a group with no communicator."""
    from torch.fx.experimental.proxy_tensor import make_fx

    c10d = torch.ops._c10d_functional

    def f(x, w, big):
        def ar(t, op="sum", group="g"):
            return c10d.all_reduce(t, op, group)
        a = c10d.wait_tensor(ar(x @ w))
        pending = ar(a * 2)
        m = x @ w
        b = c10d.wait_tensor(pending)
        c = c10d.wait_tensor(ar(b + m, "avg"))
        d = c10d.wait_tensor(ar(big))
        e = c10d.wait_tensor(ar(c, group="other"))
        return e, d

    return make_fx(f, tracing_mode="fake")(torch.randn(4, 8), torch.randn(8, 8),
                                           torch.randn(1 << 16))


def _window(group, nbytes, dtype, device_type):
    if group != "g":
        return None
    if nbytes <= 64 * 1024:
        return Decision("one_shot", "within the window")
    return Decision("nccl", "beyond the window")


def test_adopt_rewrites_only_exposed_sums_the_dispatcher_gives_to_commrt():
    from commrt.fx.adopt import adopt_all_reduces

    gm = _traced_graph()
    report = adopt_all_reduces(gm, _window)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert report.all_reduces == 5 and report.adopted == 1, report
    assert targets.count(torch.ops.commrt.all_reduce.default) == 1
    assert targets.count(torch.ops._c10d_functional.all_reduce.default) == 4
    why = " | ".join(report.skipped)
    for reason in ("hidden behind compute", "op avg", "keeps the process group",
                   "no commrt communicator"):
        assert reason in why, why
    first = next(n for n in gm.graph.nodes if n.target == torch.ops.commrt.all_reduce.default)
    assert first.args[1] == "g" and first.meta["val"].shape == (4, 8)


def test_install_runs_adopt_after_fusion_and_overlap():
    import torch._inductor.config as inductor_config

    import commrt.fx

    before = inductor_config.post_grad_custom_post_pass
    p = commrt.fx.install(copy_engine=False, comm_ctas=0)
    try:
        assert p.passes[-1] == "adopt" and p.passes.index("fuse_rmsnorm") == 0
        assert isinstance(p.uuid(), bytes)
    finally:
        commrt.fx.uninstall()
    assert inductor_config.post_grad_custom_post_pass is before
    assert commrt.fx.install(adopt=False, copy_engine=False).passes[-1] != "adopt"
    commrt.fx.uninstall()
