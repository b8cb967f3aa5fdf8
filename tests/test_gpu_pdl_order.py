"""A programmatic dependent that returns without waiting for its primary still holds back
the stream's next launch until the primary is done.

The scatter kernels' ``_sum`` (a programmatic dependent of ``_scatter``) returns at once,
without ``griddepcontrol.wait``, where the plan leaves it nothing to do; the output is then
complete only if the op after it still waits for ``_scatter``, also where that op is the
next scatter, whose first kernel is itself a programmatic dependent (``wait_first``) that
waits in ``griddepcontrol.wait``. Here the primary spins for ``SPIN_NS`` before it writes a
flag, the dependent returns at once, and a copy of the flag follows (a plain copy, or a
programmatic dependent that waits, then copies): eager and in a CUDA graph, every copy must
see its own call's flag.
"""

import pytest
import torch
import triton
import triton.language as tl

from commrt.dispatch.profile import has_pdl
from commrt.symm_mem.signals import now

SPIN_NS = 50_000
CALLS = 16


@triton.jit
def _primary(flag, value, NS: tl.constexpr):
    tl.extra.cuda.gdc_launch_dependents()
    t0 = now(True)
    while now(True) - t0 < NS:
        pass
    tl.store(flag, value)


@triton.jit
def _dependent(flag, skip):
    if tl.load(skip) == 0:  # never: the dependent neither waits nor writes
        tl.store(flag, -1)


@triton.jit
def _waiting_copy(flag, seen):
    tl.extra.cuda.gdc_wait()
    tl.store(seen, tl.load(flag))


def _calls(flag, skip, seen, next_waits: bool):
    for k in range(CALLS):
        _primary[(1,)](flag, k + 1, NS=SPIN_NS)
        _dependent[(4,)](flag, skip, launch_pdl=True)
        if next_waits:
            _waiting_copy[(1,)](flag, seen[k:], launch_pdl=True)
        else:
            seen[k].copy_(flag[0])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not has_pdl(torch.device("cuda")),
                    reason="needs a CUDA GPU with programmatic dependent launch (sm90+)")
@pytest.mark.parametrize("next_waits", [False, True], ids=["plain_copy", "waiting_dependent"])
def test_next_launch_waits_for_the_primary_eager_and_in_graph(next_waits):
    flag = torch.zeros(1, device="cuda", dtype=torch.int32)
    skip = torch.ones(1, device="cuda", dtype=torch.int32)
    want = torch.arange(1, CALLS + 1, device="cuda", dtype=torch.int32)
    seen = torch.zeros(CALLS, device="cuda", dtype=torch.int32)
    _calls(flag, skip, seen, next_waits)  # eager (and compiles the kernels)
    torch.cuda.synchronize()
    assert torch.equal(seen, want), f"eager: the copies saw {seen.tolist()}"
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _calls(flag, skip, seen, next_waits)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _calls(flag, skip, seen, next_waits)
    for _ in range(3):
        flag.zero_()
        seen.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(seen, want), f"graph: the copies saw {seen.tolist()}"


@triton.jit
def _slow_copy(dst, src, n, NS: tl.constexpr, BLOCK: tl.constexpr):
    tl.extra.cuda.gdc_launch_dependents()  # the dependent may launch at once
    t0 = now(True)
    while now(True) - t0 < NS:
        pass
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


def _matches_eager_and_in_graph(call, ref: torch.Tensor) -> None:
    """``call()`` within 1e-3 of ``ref`` in two eager calls, then in three replays of a
    CUDA graph of it (captured after a call on a side stream)."""
    for _ in range(2):
        got = call()
        torch.cuda.synchronize()
        assert float((got.double() - ref).abs().max()) < 1e-3
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = call()
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert float((got.double() - ref).abs().max()) < 1e-3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not has_pdl(torch.device("cuda")),
                    reason="needs a CUDA GPU with programmatic dependent launch (sm90+)")
@pytest.mark.parametrize("kernels", ["narrow", "wide"])
def test_scatter_launched_after_its_producer_reads_its_output(kernels):
    """``wait_first``: the scatter's first kernel, a programmatic dependent of the launch
    before it, waits for it before reading ``self``: a producer that lets it launch at
    once, then spins before it writes ``self``, still hands over every element."""
    from commrt.fx.scatter_kernels import partitioned_index_add
    from commrt.fx.scatter_narrow import narrow_index_add

    width, op = (16, narrow_index_add) if kernels == "narrow" else (100, partitioned_index_add)
    g = torch.Generator(device="cuda").manual_seed(3)
    rows, n = 1031, 20011
    src = torch.randn(rows, width, device="cuda", generator=g)
    vals = torch.randn(n, width, device="cuda", generator=g)
    idx = torch.randint(0, rows, (n,), device="cuda", generator=g)
    ref = src.double().index_add(0, idx, vals.double())
    dst = torch.zeros_like(src)

    def call():
        dst.zero_()
        _slow_copy[(triton.cdiv(src.numel(), 1024),)](dst, src, src.numel(), NS=SPIN_NS,
                                                      BLOCK=1024)
        return op(dst, idx, vals, 16, wait_first=True)

    _matches_eager_and_in_graph(call, ref)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not has_pdl(torch.device("cuda")),
                    reason="needs a CUDA GPU with programmatic dependent launch (sm90+)")
@pytest.mark.parametrize("kernels", ["narrow", "wide"])
def test_scatter_after_scatter_reads_its_output(kernels):
    """Scatters in a chain, each ``self`` the last one's output: each first kernel
    (``wait_first``) waits for the last one's ``_sum``, which may return without waiting
    for its ``_scatter`` (few values a row: one copy, nothing left to sum)."""
    from commrt.fx.scatter_kernels import partitioned_index_add
    from commrt.fx.scatter_narrow import narrow_index_add

    width, op = (16, narrow_index_add) if kernels == "narrow" else (100, partitioned_index_add)
    g = torch.Generator(device="cuda").manual_seed(5)
    rows, n, links = 40961, 30011, 6
    x = torch.randn(rows, width, device="cuda", generator=g)
    vals = [torch.randn(n, width, device="cuda", generator=g) for _ in range(links)]
    idx = [torch.randint(0, rows, (n,), device="cuda", generator=g) for _ in range(links)]
    ref = x.double()
    for i, v in zip(idx, vals, strict=True):
        ref = ref.index_add(0, i, v.double())

    def chain():
        y = x
        for i, v in zip(idx, vals, strict=True):
            y = op(y, i, v, 16, wait_first=True)
        return y

    _matches_eager_and_in_graph(chain, ref)
