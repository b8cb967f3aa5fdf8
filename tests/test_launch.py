"""The lean launch path on the CPU: Triton's launch convention detected by feature, the
probe that binds a kernel's C launcher (3.6 and 3.9 layouts, mocked), world-size-1
identity and the call counts."""

from __future__ import annotations

import inspect
from unittest import mock

import pytest
import torch
import torch.distributed as dist

from commrt.symm_mem import launch

# --------------------------------------------------------------------------- detection


def test_fast_path_is_detected_on_the_installed_triton():
    assert launch._static_check() == ""
    assert launch.FAST and launch.why_slow == ""


def test_an_unknown_jit_launch_convention_is_named_not_guessed():
    with mock.patch.object(launch, "_JIT_CALL", "kernel.run(grid,stream,*args)"):
        assert "unknown argument list" in launch._static_check()


# ------------------------------------------------------- the probe, on a mocked Triton


class _Chain:
    """Triton 3.5+'s ``HookChain`` with nothing installed."""

    def __init__(self):
        self.calls = []


class _Runner:
    """``CudaLauncher``: 3.6 spreads the kernel arguments, 3.9 packs them in one tuple."""

    def __init__(self, packed: bool, scratch: int = 0):
        self.packed = packed
        self.global_scratch_size, self.profile_scratch_size = scratch, 0
        self.launched: list = []
        self.launch = self._c_launch

    def _c_launch(self, *a):
        self.launched.append(a)

    def __call__(self, gx, gy, gz, stream, function, kmeta, lmeta, enter, exit_, *args):
        if self.packed:
            self.launch(gx, gy, gz, stream, function, False, False, kmeta, lmeta, enter,
                        exit_, None, None, ["annotations"], b"sig", args)
        else:
            self.launch(gx, gy, gz, stream, function, False, False, None, None, kmeta, lmeta,
                        enter, exit_, *args)


class _Kernel:
    def __init__(self, runner):
        self.function, self.packed_metadata = 123456789, (4, 1, 0)
        self._runner, self._run = runner, None

    @property
    def run(self):
        if self._run is None:
            self._run = self._runner
        return self._run


class _Jit:
    """What ``JITFunction.run`` does at launch, for one compiled kernel."""

    __name__ = "fake_kernel"

    def __init__(self, runner):
        self.kernel = _Kernel(runner)
        self.enter, self.exit = _Chain(), _Chain()
        self.slow_calls = 0

    def warmup(self, *args, grid, **kwargs):
        return self.kernel

    def __getitem__(self, grid):
        def run(*args, num_warps, **consts):
            self.slow_calls += 1
            k = self.kernel
            k.run(grid[0], 1, 1, 77, k.function, k.packed_metadata, {"lazy": 1}, self.enter,
                  self.exit, *args, *consts.values())
        return run


class _Dev:
    class device:  # noqa: N801  (stands for a CUDA tensor's .device)
        type = "cuda"


@pytest.fixture
def cuda_stream(monkeypatch):
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda d: 77, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)


@pytest.mark.parametrize("packed", [False, True], ids=["triton3.6", "triton3.9"])
def test_probe_binds_the_c_launcher_and_later_calls_skip_the_jit(cuda_stream, packed):
    runner = _Runner(packed)
    jit = _Jit(runner)
    lau = launch.Launcher(jit)
    dev, n = _Dev(), 4096
    args, consts = (dev, (dev, dev), n, 5), (("WS", 2), ("BLOCK", 1024))
    for _ in range(3):
        lau("key", 8, args, consts, 4)
    assert jit.slow_calls == 1 and lau.fast_calls == 2 and launch.why_slow == ""
    first, later = runner.launched[0], runner.launched[1:]
    assert len(runner.launched) == 3
    for call in later:  # the same C call, but the hooks and their metadata dropped
        assert call[:4] == (8, 1, 1, 77)
        assert [x for x in call if isinstance(x, (dict, _Chain))] == []
        assert len(call) == len(first)
    rec = launch.recording()
    try:
        lau("key", 8, args, consts, 4)
    finally:
        launch.stop_recording()
    fn, head, tail, ptrs = rec[0]
    assert fn == runner._c_launch and head == (8, 1, 1) and ptrs == []
    assert (tail[-1] if packed else tail[-6:]) == (dev, (dev, dev), n, 5, 2, 1024)


def test_probe_keeps_scratch_kernels_on_the_compiled_launcher(cuda_stream):
    runner = _Runner(packed=True, scratch=64)
    lau = launch.Launcher(_Jit(runner))
    for _ in range(2):
        lau("key", 1, (_Dev(), 3), (("TIMER", True),), 1)
    bound = lau.compiled["key"]
    assert bound.launch is runner and bound.prefix[2:] == (None, None, None)


def test_installed_launch_hooks_keep_triton_s_path_and_say_why(cuda_stream):
    jit = _Jit(_Runner(packed=False))
    jit.enter.calls.append(print)
    lau = launch.Launcher(jit)
    for _ in range(3):
        lau("key", 1, (_Dev(), 3), (), 1)
    assert jit.slow_calls == 3 and lau.fast_calls == 0
    assert "launch hooks" in launch.why_slow
    launch.why_slow = ""


# ------------------------------------------- launches by name (the scatter kernels')


class _Param:
    def __init__(self, name: str, constexpr: bool = False, default=inspect.Parameter.empty):
        self.name, self.is_constexpr, self.default = name, constexpr, default


class _NamedJit(_Jit):
    """A kernel ``k(a, n, B: constexpr, out=None, C: constexpr = 3)``: constexprs between
    the other arguments, as the scatter kernels have them."""

    params = [_Param("a"), _Param("n"), _Param("B", True), _Param("out", default=None),
              _Param("C", True, 3)]

    def warmup(self, grid, **kwargs):
        return self.kernel

    def __getitem__(self, grid):
        def run(num_warps, launch_pdl=False, num_stages=None, **named):
            self.slow_calls += 1
            assert list(named) == [p.name for p in self.params]
            k = self.kernel
            k.run(*grid, 77, k.function, k.packed_metadata, {"lazy": 1}, self.enter,
                  self.exit, *named.values())
        return run


@pytest.mark.parametrize("packed", [False, True], ids=["triton3.6", "triton3.9"])
def test_launch_by_name_keys_what_triton_specialises_on(cuda_stream, monkeypatch, packed):
    monkeypatch.setattr(launch, "_on_cuda", lambda args: True)
    runner = _Runner(packed)
    jit = _NamedJit(runner)
    lau = launch.Launcher(jit)
    buf = torch.zeros(8)
    for _ in range(3):  # the arguments in any order; a 2-D grid
        lau.call((5, 2), 4, B=16, n=4096, a=buf)
    assert jit.slow_calls == 1 and lau.fast_calls == 2 and launch.why_slow == ""
    last = runner.launched[-1]
    assert last[:4] == (5, 2, 1, 77)
    # every parameter in signature order, constexprs and defaults where they stand
    assert (last[-1] if packed else last[-5:]) == (buf, 4096, 16, None, 3)
    # each of these is another specialisation, so another probe through the JIT
    lau.call((5,), 4, a=buf[1:], n=4096, B=16)  # 4 bytes off 16-byte alignment
    lau.call((5,), 4, a=buf, n=4097, B=16)  # n % 16 != 0
    lau.call((5,), 4, a=buf, n=4096, B=32)  # another constexpr
    lau.call((5,), 4, a=buf, n=4096, B=16, out=buf)  # a tensor where None was
    lau.call((5,), 8, a=buf, n=4096, B=16)  # other warps
    lau.call((5,), 4, True, a=buf, n=4096, B=16)  # a programmatic dependent launch
    lau.call((5,), 4, stages=1, a=buf, n=4096, B=16)  # other pipeline stages
    assert jit.slow_calls == 8 and lau.fast_calls == 2
    lau.call((9,), 4, a=torch.ones(8), n=4112, B=16)  # same specialisation, other values
    assert jit.slow_calls == 8 and lau.fast_calls == 3
    assert (runner.launched[-1][-1] if packed else runner.launched[-1][-5:])[1:] == \
        (4112, 16, None, 3)


def _prepared(packed: bool) -> tuple:
    """(runner, jit, launcher, its launch prepared on a (5, 2) grid with B=16)."""
    runner = _Runner(packed)
    jit = _NamedJit(runner)
    lau = launch.Launcher(jit)
    return runner, jit, lau, lau.prepare((5, 2), 4, B=16)


@pytest.mark.parametrize("packed", [False, True], ids=["triton3.6", "triton3.9"])
def test_prepared_launch_fixes_the_constexprs_and_shares_the_compiled_kernel(
        cuda_stream, monkeypatch, packed):
    monkeypatch.setattr(launch, "_on_cuda", lambda args: True)
    runner, jit, lau, prep = _prepared(packed)
    buf = torch.zeros(8)
    for _ in range(3):  # the other parameters in signature order: a, n, out
        prep(buf, 4096, None)
    assert jit.slow_calls == 1 and lau.fast_calls == 2
    assert (runner.launched[-1][-1] if packed else runner.launched[-1][-5:]) == \
        (buf, 4096, 16, None, 3)
    lau.call((5, 2), 4, a=torch.ones(8), n=16, B=16)  # the same kernel by name
    assert jit.slow_calls == 1 and lau.fast_calls == 3
    prep(buf[1:], 4096, None)  # another alignment: another probe
    assert jit.slow_calls == 2
    with pytest.raises(TypeError, match="prepare takes the constexprs"):
        lau.prepare((1,), 4, n=3)


@pytest.mark.parametrize("packed", [False, True], ids=["triton3.6", "triton3.9"])
def test_prepared_launch_goes_direct_only_for_the_specialisation_it_saw(
        cuda_stream, monkeypatch, packed):
    monkeypatch.setattr(launch, "_on_cuda", lambda args: True)
    runner, jit, lau, prep = _prepared(packed)
    buf = torch.zeros(8)
    prep(buf, 4096, None)  # the probe
    prep(buf, 4096, None)  # the C launcher through the key; the direct launch made
    assert len(prep.direct) == 1 and jit.slow_calls == 1 and lau.fast_calls == 1
    other = torch.ones(8)
    prep(other, 4112, None)  # same specialisation, other values: direct
    assert jit.slow_calls == 1 and lau.fast_calls == 2 and len(prep.direct) == 1
    last = runner.launched[-1]
    assert last[:4] == (5, 2, 1, 77)
    assert (last[-1] if packed else last[-5:]) == (other, 4112, 16, None, 3)
    assert last[4:-1 if packed else -5] == runner.launched[-2][4:-1 if packed else -5]
    # another specialisation or kind of argument: the key's path, never the direct one
    for args in ((buf[1:], 4096, None), (buf, 4097, None), (buf, 4096, buf),
                 (buf.double(), 4096, None), (buf, 4096.0, None), (buf, True, None)):
        slow, fast = jit.slow_calls, lau.fast_calls
        prep(*args)
        assert (jit.slow_calls, lau.fast_calls) == (slow + 1, fast), args
    prep(buf, 4096, None)
    assert lau.fast_calls == fast + 1
    monkeypatch.setattr(launch, "FAST", False)  # Triton's path when asked
    prep(buf, 4096, None)
    assert lau.fast_calls == fast + 1


def test_launch_by_name_names_a_missing_or_unknown_argument(cuda_stream):
    lau = launch.Launcher(_NamedJit(_Runner(False)))
    with pytest.raises(TypeError, match=r"missing arguments \['B'\]"):
        lau.call((1,), 4, a=torch.zeros(4), n=3)
    with pytest.raises(TypeError, match=r"unknown arguments \['D'\]"):
        lau.call((1,), 4, a=torch.zeros(4), n=3, B=1, D=2)


def test_launch_by_name_takes_triton_s_path_for_cpu_tensors():
    jit = _NamedJit(_Runner(False))
    lau = launch.Launcher(jit)
    for _ in range(2):  # the interpreter's case: no key, no probe
        lau.call((1,), 4, a=torch.zeros(4), n=3, B=1)
    assert jit.slow_calls == 2 and lau.fast_calls == 0 and lau.compiled == {}


# ------------------------------------------------------- world size 1 and the counts


@pytest.fixture
def world1():
    import commrt
    from commrt import registry

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    commrt.stats(reset=True)
    yield commrt
    registry.reset()
    dist.destroy_process_group()


def test_world_size_one_is_the_identity_without_the_process_group(world1):
    commrt = world1
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    ref = x.clone()
    with mock.patch.object(dist, "all_reduce", side_effect=AssertionError("called")):
        assert commrt.all_reduce(x) is None
        work = commrt.all_reduce(x.t(), op=dist.ReduceOp.MAX, async_op=True)
        assert work.wait() and work.result()[0].data_ptr() == x.data_ptr()
        out = torch.empty_like(x)
        commrt.all_reduce(x, out=out)
        y = torch.ops.commrt.all_reduce(x, dist.group.WORLD.group_name)
    assert torch.equal(x, ref) and torch.equal(out, ref) and torch.equal(y, ref)
    assert commrt.stats() == {"all_reduce": {"identity": 4}}


def test_world_size_one_fused_op_adds_and_normalises_locally(world1):
    commrt = world1
    g = torch.Generator().manual_seed(0)
    x, res = torch.randn(5, 64, generator=g), torch.randn(5, 64, generator=g)
    w = torch.randn(64, generator=g)
    with mock.patch.object(dist, "all_reduce", side_effect=AssertionError("called")):
        normed, new_res = commrt.init().all_reduce_residual_rmsnorm(x, res, w, 1e-5)
    ref_res = res.double() + x.double()
    ref = ref_res * torch.rsqrt(ref_res.pow(2).mean(-1, keepdim=True) + 1e-5) * w.double()
    assert torch.allclose(new_res.double(), ref_res) and torch.allclose(normed.double(), ref,
                                                                        atol=1e-5)
    assert commrt.stats() == {"all_reduce_residual_rmsnorm": {"identity": 1}}


def test_counts_name_the_process_group_fallback_and_reset():
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import commrt
    from commrt import registry

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=0, world_size=2, store=FakeStore())
    try:
        commrt.stats(reset=True)
        x = torch.ones(16)
        commrt.all_reduce(x)
        commrt.all_reduce(x, op=dist.ReduceOp.MAX)
        assert commrt.stats(reset=True) == {"all_reduce": {"nccl": 2}}
        assert commrt.stats() == {}
    finally:
        registry.reset()
        dist.destroy_process_group()


def test_counts_format_and_print_once_at_exit(monkeypatch):
    import importlib

    stats = importlib.import_module("commrt.stats")  # the module; commrt.stats is its function

    registered = []
    monkeypatch.setattr(stats, "_AT_EXIT", False)
    monkeypatch.setattr(stats.atexit, "register", registered.append)
    stats.print_at_exit()
    stats.print_at_exit()
    assert len(registered) == 1
    text = stats.format_stats({"all_reduce": {"one_shot": 3, "nccl": 1}})
    assert text == "all_reduce: 4 calls (one_shot 3, nccl 1)"
