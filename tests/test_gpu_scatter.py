"""The partitioned-scatter pass on a GPU, one case per regime of ``scatter_rule.decide``,
against float64 (``pytest -m gpu tests/test_gpu_scatter.py``)."""

import subprocess
import sys

import pytest
import torch
from kernel_cases import SCATTER_TOL as TOL
from kernel_cases import finite_error

import commrt.fx

CASES = [  # (op, dtype, row width (0: 1-D), rows, indices, expected choice)
    ("index_add", torch.float32, 100, 501, 600_011, "commrt"),  # wide rows that contend
    ("index_add", torch.bfloat16, 16, 8, 100_000, "commrt"),  # bf16 rows of 16: few rows
    ("index_put", torch.float32, 16, 8, 262_147, "commrt"),  # ... fp32 index_put
    ("index_put", torch.bfloat16, 16, 16, 262_144, "inductor_partitioned"),  # ... not 16 rows
    ("index_put", torch.float32, 0, 8, 1 << 20, "commrt"),  # 1-D, eight rows: few rows
    ("index_put", torch.float32, 4, 8, (1 << 20) + 3, "commrt"),  # rows of 4: few rows
    ("index_add", torch.bfloat16, 3, 16, 300_007, "commrt"),  # ... 16 rows, bf16
    ("index_add", torch.float32, 4, 1 << 20, 1 << 20, "commrt"),  # narrow, spread
    ("index_put", torch.float32, 4, 1024, 1 << 20, "commrt"),  # narrow, 1024 a row: spread
    ("index_put", torch.float32, 16, 4096, 262_147, "commrt"),  # 64 copies at most, 2 samples
    ("index_put", torch.bfloat16, 4, 1024, 1 << 20, "inductor_partitioned"),  # ... bf16
    ("index_put", torch.bfloat16, 16, 1 << 16, 1 << 15, "inductor"),  # bf16, half a row
    ("index_put", torch.bfloat16, 4, 1 << 16, 1 << 20, "commrt"),  # bf16 adds where uncontended
    ("index_put", torch.float32, 100, 1024, 200_000, "inductor_partitioned"),  # wide
    ("index_put", torch.float32, 1024, 1 << 14, 1024, "inductor"),  # wide, no contention
    ("index_put", torch.float32, 100, 1 << 16, 40_000, "commrt"),  # wide, one copy
    ("index_put", torch.float32, 100, 1024, 40_000, "commrt"),  # wide, 40 a row
    ("index_put", torch.float32, 100, 4096, 80_000, "commrt"),  # wide, 19 a row
    ("index_put", torch.bfloat16, 100, 8, 40_000, "commrt"),  # small, crowded: products
    ("index_add", torch.float32, 100, 8, 40_003, "commrt"),  # ... fp32
    ("index_put", torch.float16, 100, 8, 40_000, "inductor_partitioned"),  # ... not fp16
    ("index_add", torch.bfloat16, 100, 8192, 300_000, "commrt"),  # _sum loops over the plane
    ("index_add", torch.bfloat16, 100, 1 << 16, 40_000, "commrt"),  # one copy, bf16 adds
    ("index_add", torch.bfloat16, 16, 1 << 18, 1 << 17, "commrt"),  # ... fewer than the rows
    ("index_put", torch.bfloat16, 1024, 4099, 8191, "commrt"),  # ... rows of 1024
    ("index_put", torch.float32, 256, 1024, 16_001, "commrt"),  # block-local sums, 128 columns
    ("index_put", torch.float32, 1024, 1024, 4099, "commrt"),  # ... rows of 1024
    ("index_add", torch.float32, 1024, 8, 40_009, "commrt"),  # ... into 8 rows, 1 warp
    ("index_add", torch.bfloat16, 1024, 1024, 4099, "commrt"),  # ... bf16, added in bf16
    ("index_add", torch.bfloat16, 300, 1031, 16_001, "commrt"),  # ... rows of 300
    ("index_add", torch.float32, 100, 4096, 40_001, "commrt"),  # ... blocks of 32 rows
    ("index_put", torch.bfloat16, 1024, 1024, 4099, "commrt"),  # ... an index_put too
    ("index_put", torch.bfloat16, 100, 1031, 41_947, "commrt"),  # bf16 adds where uncontended
    ("index_put", torch.float16, 100, 1031, 41_947, "commrt"),  # ... fp16
    ("index_put", torch.bfloat16, 99, 1031, 42_367, "commrt"),  # odd rows: summed in fp32
    ("index_add", torch.bfloat16, 99, 1 << 16, 42_367, "commrt"),  # ... one fp32 copy
    ("index_add", torch.float16, 15, 1 << 16, 65_537, "commrt"),  # ... narrow rows
    ("index_put", torch.float32, 99, 1031, 42_367, "commrt"),  # fp32 odd rows: padded copies
    ("index_put", torch.float32, 64, 1024, 65_536, "commrt"),  # 64 a row: the wide kernels
    ("index_put", torch.float32, 50, 1024, 83_881, "commrt"),  # ... rows of 40 to 63 too
    ("index_put", torch.bfloat16, 56, 1024, 74_893, "commrt"),  # ... bf16 of 40 to 63: fp32
    ("scatter_add", torch.bfloat16, 40, 1024, 104_801, "commrt"),
    ("index_add", torch.bfloat16, 33, 1021, 100_003, "commrt"),  # aten's kernel: 32 to 63
    ("index_add", torch.bfloat16, 40, 1 << 16, 131_101, "commrt"),  # 2M elements: one copy
    ("scatter_add", torch.bfloat16, 32, 1 << 16, 131_101, "commrt"),  # ... added in bf16
    ("index_put", torch.float16, 50, 1 << 16, 83_887, "commrt"),  # ... fp16
    ("index_put", torch.float32, 40, 1 << 16, 52_433, "commrt"),  # ... fp32, hot rows found
    ("scatter_add", torch.float32, 0, 8, 1 << 20, "commrt"),  # token counts: few rows
    ("scatter_add", torch.float32, 1, 20_011, 1 << 20, "commrt"),  # shared sums
    ("scatter_add", torch.bfloat16, 16, 1024, 262_147, "inductor_partitioned"),  # inlined
    ("scatter_add", torch.bfloat16, 4, 1021, (1 << 20) + 5, "commrt"),  # spread, fp32 copies
    ("index_add", torch.bfloat16, 4, 1021, (1 << 20) + 5, "commrt"),  # ... index_add too
    ("scatter_add", torch.float16, 4, 1021, (1 << 20) + 5, "commrt"),  # ... fp16 too
    ("scatter_add", torch.float32, 100, 1024, 40_000, "commrt"),  # wide, 39 a row
    ("scatter_add", torch.bfloat16, 100, 1031, 41_947, "commrt"),  # ... bf16 adds
    ("scatter_add", torch.float32, 1024, 1 << 16, 1024, "inductor"),  # left alone
]
OPS = {"index_add": lambda o, i, v: o.index_add(0, i, v),
       "index_put": lambda o, i, v: o.index_put((i,), v, accumulate=True),
       # a row index broadcast along the row (message passing), or 1-D values
       "scatter_add": lambda o, i, v: o.scatter_add(
           0, i.view(-1, 1).expand_as(v) if v.dim() > 1 else i, v)}


def _with_pass(fn, *args) -> tuple:
    """(``fn(*args)`` compiled with the scatter pass alone, the pass's report)."""
    import torch._inductor.config as ic

    torch._dynamo.reset()
    commrt.fx.last_reports.clear()
    with ic.patch(fx_graph_cache=False), commrt.fx.installed(
            fuse_rmsnorm=False, overlap=False, partitioned_scatter=True):
        got = torch.compile(fn, dynamic=False)(*args)
    return got, [r for k, r in commrt.fx.last_reports if k == "partitioned_scatter"][-1]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("op,dtype,width,rows,n,choice", CASES)
@pytest.mark.parametrize("dist", ["uniform", "hot"])
def test_pass_on_gpu_against_float64(op, dtype, width, rows, n, choice, dist):
    import torch._inductor.config as ic

    g = torch.Generator(device="cuda").manual_seed(rows + n)
    shape = (rows,) if width == 0 else (rows, width)
    out = torch.randn(shape, device="cuda", generator=g).to(dtype)
    vals = torch.randn((n, *shape[1:]), device="cuda", generator=g).to(dtype)
    idx = torch.randint(0, rows, (n,), device="cuda", generator=g)
    if dist == "hot":
        idx[::2] = rows // 3
    if op == "index_put":  # index_put counts negative indices from the end; index_add
        idx[::7] -= rows     # refuses them (a device-side assert)
    fn = OPS[op]
    ref = fn(out.double(), idx, vals.double())

    def err(t):
        return float((t.double() - ref).norm() / ref.norm())
    torch._dynamo.reset()
    with ic.patch(fx_graph_cache=False):
        plain = torch.compile(fn, dynamic=False)(out, idx, vals)
    got, rep = _with_pass(fn, out, idx, vals)
    assert rep.scatters == 1 and rep.decisions[0].split(": ")[1].startswith(choice), rep
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    # left to Inductor: the same graph as plain's, whose bf16 atomics add in another order
    # each run (its error moved 1.85x between two runs of one hot case)
    slack = 3.0 if choice == "inductor" else 1.5
    if choice == "inductor":
        assert rep.rewritten == 0 and rep.inductor_partitioned == 0, rep
    assert got.dtype == dtype and err(got) <= max(tol, slack * err(plain)), (err(got), err(plain))


def _indices(dist: str, rows: int, n: int, g) -> torch.Tensor:
    idx = torch.randint(0, rows, (n,), device="cuda", generator=g)
    if dist == "hot":  # half into one row
        idx[torch.rand(n, device="cuda", generator=g) < 0.5] = rows // 3
    elif dist == "skewed":  # 90% into the first 1% of rows
        few = torch.randint(0, max(1, rows // 100), (n,), device="cuda", generator=g)
        idx = torch.where(torch.rand(n, device="cuda", generator=g) < 0.9, few, idx)
    return idx


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(), (1,), (3,), (16,)])  # 1-D values, narrow rows
@pytest.mark.parametrize("rows", [8, 1031, 65_537])
def test_narrow_kernels_against_float64(dtype, shape, rows):
    """The narrow-row kernels on the GPU, eager and in a CUDA graph, five calls each: every
    index distribution and dtype, plain atomics, copies and hot rows, against float64; the
    plan names a row that takes half the indices."""
    from commrt.fx.scatter_narrow import narrow_index_add, state_numel

    g = torch.Generator(device="cuda").manual_seed(rows + len(shape))
    n = 300_007
    tol = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}[dtype]
    for dist in ("uniform", "skewed", "hot"):
        base = torch.randn(rows, *shape, device="cuda", generator=g).to(dtype)
        idx = _indices(dist, rows, n, g)
        idx[::5] -= rows  # negative indices count from the end
        vals = torch.randn(n, *shape, device="cuda", generator=g).to(dtype)
        ref = base.double().index_add(0, idx % rows, vals.double())
        # no worse than torch's own scatter (fp32 atomics into one row lose digits)
        torch_err = float((base.index_add(0, idx % rows, vals).double() - ref).norm()
                          / ref.norm())
        for itype in (torch.int64, torch.int32):
            i = idx.to(itype)
            # (copies, adds an address, hot rows, half adds): as shipped; plain; forced
            # copies; fp16/bf16 rows added in their own dtype, one copy
            rules = [(64, 128, 16, False), (1, 256, 0, False), (16, 1, 0, False)]
            if dtype != torch.float32 and shape == (16,):
                rules.append((1, 128, 16, True))
            for rule in rules:
                state = torch.empty(state_numel(rule[2]), device="cuda", dtype=torch.int32)

                # programmatic dependent launch where the GPU has it (int64), and not
                def call(rule=rule, i=i, state=state, base=base, vals=vals):
                    return narrow_index_add(base, i, vals, rule[0], per_address=rule[1],
                                            hot=rule[2], state=state,
                                            pdl=i.dtype == torch.int64, half_adds=rule[3])
                outs = [call() for _ in range(5)]
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    captured = call()
                for _ in range(5):
                    captured.zero_()
                    graph.replay()
                    outs.append(captured.clone())
                for out in outs:
                    err = float((out.double() - ref).norm() / ref.norm())
                    # a forced plan may add a hot row with plain fp32 atomics: on 8 rows,
                    # skewed, 270,000 adds on one address, whose order moves the error
                    # (5.4e-5 in one of ten calls against torch's 8.9e-6 in one)
                    bound = max(tol, 1.5 * torch_err) if rule[2] else 10 * max(tol, torch_err)
                    assert out.dtype == dtype and err < bound, (dist, itype, rule, err, torch_err)
                p, bad, nhot = state[:3].tolist()
                assert bad == 0 and 1 <= p <= rule[0], state
                if rule[2] and dist == "hot":
                    assert rows // 3 in state[3:3 + nhot].tolist(), state
                if rule[1] == 1 and dist == "uniform" and rows < 2000:
                    assert p == 16, state  # one add an address: as many copies as allowed
    from commrt.fx import scatter_scratch

    torch.cuda.synchronize()  # the copies' scratch, eager and captured, is left zero
    assert not any(b.any() for b in scatter_scratch._buffers.values())


def _case(dist: str, rows: int, n: int, shape: tuple, dtype, g) -> tuple:
    """(self, indices with every fifth negative, values, the float64 sum, the float64 sum
    of magnitudes): one row of 300,000 values summed in fp32 cancels to a few hundred (on
    one H200, 1.4e-5 of the result), so errors are measured against the magnitudes."""
    base = torch.randn(rows, *shape, device="cuda", generator=g).to(dtype)
    idx = _indices(dist, rows, n, g)
    idx[::5] -= rows  # negative indices count from the end
    vals = torch.randn(n, *shape, device="cuda", generator=g).to(dtype)
    ref = base.double().index_add(0, idx % rows, vals.double())
    scale = base.double().abs().index_add(0, idx % rows, vals.double().abs()).norm()
    return base, idx, vals, ref, scale


def _eager_and_graph(fn, args: tuple, calls: int) -> list:
    """``calls`` outputs of ``fn(*args)`` eager, then ``calls`` replays of it in a CUDA
    graph."""
    outs = [fn(*args) for _ in range(calls)]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fn(*args)
    for _ in range(calls):
        captured.zero_()
        graph.replay()
        outs.append(captured.clone())
    return outs


def _checked_cases(call, dtype, rows: int, n: int, width: int, g, state_entries: int = 0,
                   check_state=None) -> list:
    """``call(base, idx, vals[, state])`` checked against float64 for each index
    distribution, with int64 and int32 indices (``_eager_and_graph``, three calls each),
    no worse than torch's own scatter; returns each distribution's ``(dist, base, idx,
    vals)``. ``state_entries``: a fresh int32 ``state`` of that many entries a call (0:
    none), handed with the distribution and the indices to ``check_state(dist, idx,
    state)``."""
    tol, cases = TOL[dtype], []
    for dist in ("uniform", "skewed", "hot"):
        base, idx, vals, ref, scale = _case(dist, rows, n, (width,), dtype, g)
        torch_err = float((base.index_add(0, idx % rows, vals).double() - ref).norm() / scale)
        for itype in (torch.int64, torch.int32):
            args = (base, idx.to(itype), vals)
            if state_entries:
                state = torch.empty(state_entries, device="cuda", dtype=torch.int32)
                args += (state,)
            for out in _eager_and_graph(call, args, 3):
                err = float((out.double() - ref).norm() / scale)
                assert out.dtype == dtype and err < max(tol, 1.5 * torch_err), (
                    dist, itype, err, torch_err)
            if check_state is not None:
                check_state(dist, idx, state)
        cases.append((dist, base, idx, vals))
    return cases


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
# 1-D values, narrow rows (selects), wider rows (one-hot products)
@pytest.mark.parametrize("shape", [(), (1,), (3,), (4,), (8,), (16,), (100,)])
@pytest.mark.parametrize("rows", [1, 8, 13, 16])
def test_few_rows_kernels_against_float64(dtype, shape, rows):
    """The few-rows kernels on the GPU, eager and in a CUDA graph, five calls each: every
    index distribution, dtype and index dtype against float64, bit-identical from call to
    call (no atomics); an index out of range poisons the output."""
    from commrt.fx.scatter_few import few_rows_index_add

    g = torch.Generator(device="cuda").manual_seed(rows + len(shape))
    tol = TOL[dtype]
    for n, dist in ((1_000_003, "uniform"), (300_007, "skewed"), (77, "hot")):
        base, idx, vals, ref, scale = _case(dist, rows, n, shape, dtype, g)
        for itype in (torch.int64, torch.int32):
            i = idx.to(itype)
            outs = _eager_and_graph(few_rows_index_add, (base, i, vals), 5)
            err = float((outs[0].double() - ref).norm() / scale)
            assert outs[0].dtype == dtype and err < tol, (n, dist, itype, err)
            assert all(torch.equal(out, outs[0]) for out in outs), (n, dist, itype)
    idx[n // 2] = rows
    assert few_rows_index_add(base, idx, vals).isnan().all()


def _check_integers(fn, dist: str, rows: int, n: int, shape: tuple, dtype, big: bool, g,
                    calls: int) -> None:
    """``fn(self, index, values)`` on integers (``big``: int32 sums past 2**31), with
    every fifth index negative, equal to torch's index_add with int64 and int32 indices
    (``_eager_and_graph``, ``calls`` calls each)."""
    base = torch.randint(-1000, 1000, (rows, *shape), device="cuda", generator=g).to(dtype)
    idx = _indices(dist, rows, n, g)
    idx[::5] -= rows
    lo, hi = (1 << 30, 1 << 31) if big else (-8, 9)
    vals = torch.randint(lo, hi, (n, *shape), device="cuda", generator=g).to(dtype)
    ref = base.index_add(0, idx % rows, vals)
    for itype in (torch.int64, torch.int32):
        outs = _eager_and_graph(fn, (base, idx.to(itype), vals), calls)
        assert all(out.dtype == dtype and torch.equal(out, ref) for out in outs), \
            (n, dist, itype)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("shape", [(), (1,), (4,), (16,)])
@pytest.mark.parametrize("rows", [1, 8, 13, 16])
def test_few_rows_integers_equal_torch(dtype, shape, rows):
    """Integer values into few rows on the GPU, eager and in a CUDA graph, five calls each:
    equal to torch's index_add for every index distribution and index dtype, int32 sums
    past 2**31 wrapping as torch's do."""
    from commrt.fx.scatter_few import few_rows_index_add

    g = torch.Generator(device="cuda").manual_seed(rows + len(shape))
    for n, dist, big in ((1_000_003, "uniform", False), (300_007, "skewed", True),
                         (77, "hot", False)):
        _check_integers(few_rows_index_add, dist, rows, n, shape, dtype, big, g, 5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("shape,rows,partitions", [
    (shape, rows, p) for shape, rows in (((), 1031), ((17,), 1031), ((100,), 8), ((99,), 8),
                                         ((100,), 1031), ((1000,), 1031), ((1000,), 65_537))
    for p in (1, 8)] + [((99,), 8, 128), ((100,), 8, 128), ((7,), 9, 32)])  # planes: 792, 800, 63
def test_integer_flat_adds_equal_torch(dtype, shape, rows, partitions):
    """Integer values one element a thread into copies summed after (``int_flat_index_add``),
    eager and in a CUDA graph, three calls each: equal to torch's index_add for every index
    distribution and index dtype, int32 sums past 2**31 wrapping as torch's do; the copies,
    16-element strides apart whatever the plane, left zero (their gaps too) for the next
    call."""
    from commrt.fx.scatter_ints import int_flat_index_add

    g = torch.Generator(device="cuda").manual_seed(rows + len(shape) + partitions)
    n = (1 << 22) // (shape[0] if shape else 1) + 3
    for dist, big in (("uniform", False), ("skewed", True), ("hot", False)):
        _check_integers(lambda b, i, v: int_flat_index_add(b, i, v, partitions), dist, rows,
                        n, shape, dtype, big, g, 3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("shape", [(), (1,), (4,), (100,), (1300,)])
@pytest.mark.parametrize("rows", [1031, 65_537])
@pytest.mark.parametrize("partitions", [1, 16])
def test_integer_atomics_equal_torch(dtype, shape, rows, partitions):
    """Integer values with native atomics on the GPU, eager and in a CUDA graph, three
    calls each: equal to torch's index_add for every index distribution and index dtype,
    int32 sums past 2**31 wrapping as torch's do."""
    from commrt.fx.scatter_ints import int_index_add

    g = torch.Generator(device="cuda").manual_seed(rows + len(shape))
    n = (1 << 20) // (shape[0] if shape else 1) + 3
    for dist, big in (("uniform", False), ("skewed", True), ("hot", False)):
        _check_integers(lambda b, i, v: int_index_add(b, i, v, partitions), dist, rows, n,
                        shape, dtype, big, g, 3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("shape,rows", [(s, r) for s in ((), (1,), (4,), (16,))
                                        for r in (1031, 65_537, 1 << 20)] +
                         [(s, r) for s in ((100,), (1000,)) for r in (8, 1031, 65_537)])
@pytest.mark.parametrize("partitions", [1, 16])
def test_narrow_int32_equal_torch(shape, rows, partitions):
    """int32 rows on the narrow kernels (hot rows and copies chosen on the GPU, summed in
    int32; rows over 16 elements on blocks of 16 columns), eager and in a CUDA graph,
    three calls each: equal to torch's index_add for every index distribution and index
    dtype, sums past 2**31 wrapping as torch's do."""
    from commrt.fx.scatter_narrow import narrow_index_add
    from commrt.fx.scatter_rule import pair_sample

    g = torch.Generator(device="cuda").manual_seed(rows + len(shape))
    n = (1 << 22) // (shape[0] if shape else 1) + 3

    def fn(b, i, v):
        return narrow_index_add(b, i, v, partitions, pair_sample=pair_sample(rows))

    for dist, big in (("uniform", False), ("skewed", True), ("hot", False)):
        _check_integers(fn, dist, rows, n, shape, torch.int32, big, g, 3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("width", [17, 100, 1024])
@pytest.mark.parametrize("rows", [1031, 65_537])
def test_wide_int32_rows_equal_torch(width, rows):
    """int32 rows wider than the narrow ones on the narrow kernels with one copy (hot rows
    found on the GPU; the pass leaves them to Inductor), eager and in a CUDA graph, three
    calls each: equal to torch's index_add."""
    from commrt.fx.scatter_narrow import narrow_index_add

    g = torch.Generator(device="cuda").manual_seed(rows + width)
    n = (1 << 22) // width + 3

    def fn(b, i, v):
        return narrow_index_add(b, i, v, 1, pair_sample=0)

    for dist, big in (("uniform", False), ("skewed", True), ("hot", False)):
        _check_integers(fn, dist, rows, n, (width,), torch.int32, big, g, 3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,rows,width", [
    (torch.int64, 8, 0), (torch.int64, 8, 4), (torch.int64, 1024, 0),
    (torch.int64, 1 << 20, 1), (torch.int64, 1024, 100), (torch.int32, 8, 4),
    (torch.int32, 65536, 0), (torch.int32, 1 << 20, 1), (torch.int32, 65536, 16)])
def test_pass_gives_integer_scatters_to_commrt(dtype, rows, width):
    """The pass under torch.compile on integer scatters (token counts, histograms): the op
    commrt's, the result equal to torch's."""
    shape = (rows,) if width == 0 else (rows, width)
    n = (1 << 22) // max(1, width)
    g = torch.Generator(device="cuda").manual_seed(rows)
    out = torch.randint(-5, 5, shape, device="cuda", generator=g).to(dtype)
    idx = torch.randint(0, rows, (n,), device="cuda", generator=g)
    vals = torch.randint(-5, 5, (n, *shape[1:]), device="cuda", generator=g).to(dtype)

    def f(o, i, v):
        return o.index_put((i,), v, accumulate=True)

    got, rep = _with_pass(f, out, idx, vals)
    assert rep.rewritten == 1 and rep.decisions[0].split(": ")[1].startswith("commrt"), rep
    assert torch.equal(got, f(out, idx, vals))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("call,rows", [
    ("from commrt.fx.scatter_few import few_rows_index_add as f; args = ()", 8),
    ("from commrt.fx.scatter_narrow import narrow_index_add as f; args = (16,)", 4099)])
def test_integer_scatters_refuse_an_index_out_of_range(call, rows):
    """An integer index out of range is a device-side assert (no NaN to poison the sum
    with), as torch's own op's, into few rows and on the narrow kernels; in a process of
    its own (the assert ends its CUDA context)."""
    code = ("import torch\n"
            f"{call}\n"
            f"idx = torch.randint(0, {rows}, (100_000,), device='cuda')\n"
            f"idx[50_000] = {rows}\n"
            "v = torch.ones(100_000, dtype=torch.int32, device='cuda')\n"
            f"out = f(torch.zeros({rows}, dtype=torch.int32, device='cuda'), idx, v, *args)\n"
            "torch.cuda.synchronize()\n"
            "print('no error', out.tolist())\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0 and "no error" not in r.stdout, r.stdout + r.stderr
    assert "index out of range in a commrt scatter" in r.stderr or \
        "device-side assert" in r.stderr, r.stderr[-2000:]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("width", [16, 100])
def test_few_rows_products_keep_infinities_in_their_rows(dtype, width):
    """Rows summed by one-hot products (0 * inf is NaN in every row a product reaches; fp32
    rows of 16 take selects): an infinity and a NaN among the values reach only their own
    rows, as torch's sum does; the other rows keep their float64 sums."""
    from commrt.fx.scatter_few import few_rows_index_add

    g = torch.Generator(device="cuda").manual_seed(width)
    base, idx, vals, ref, scale = _case("uniform", 8, 200_003, (width,), dtype, g)
    vals[1000, 3], vals[150_000, width - 1] = float("inf"), float("nan")
    ref = base.double().index_add(0, idx % 8, vals.double())
    got = few_rows_index_add(base, idx, vals).double()
    assert torch.equal(got.isnan(), ref.isnan()) and torch.equal(got.isinf(), ref.isinf())
    fin = ref.isfinite()
    err = float((got[fin] - ref[fin]).norm() / scale)
    assert err < TOL[dtype], err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(), (4,), (16,), (100,)])  # 1-D values, rows
@pytest.mark.parametrize("rows,copies", [(1024, 128), (8, 64), (1031, 16)])
def test_spread_kernels_against_float64(dtype, shape, rows, copies):
    """The spread kernels (value j to copy j % p) on the GPU, eager and in a CUDA graph,
    three calls each: every index distribution, index dtype and negative indices against
    float64, with and without PDL, with and without hot rows summed first; an index
    out of range poisons that call only; the scratch is left zero."""
    from commrt.fx.scatter_scratch import zeroed
    from commrt.fx.scatter_spread import spread_index_add

    g = torch.Generator(device="cuda").manual_seed(rows + copies + len(shape))
    tol = TOL[dtype]
    plane = rows * (shape[0] if shape else 1)
    for n, dist in ((1_000_003, "uniform"), (300_007, "skewed"), (200_001, "hot"),
                    (4097, "uniform")):
        base, idx, vals, ref, scale = _case(dist, rows, n, shape, dtype, g)
        for itype, kw in ((torch.int64, {}), (torch.int32, dict(pdl=False)),
                          (torch.int32, dict(hot=2, hot_min=16)),
                          (torch.int64, dict(hot=4, hot_min=4, block=4096))):
            i = idx.to(itype)
            outs = _eager_and_graph(lambda *a, kw=kw: spread_index_add(*a, **kw),
                                    (base, i, vals, copies), 3)
            for out in outs:
                err = float((out.double() - ref).norm() / scale)
                assert out.dtype == dtype and out.shape == base.shape and err < tol, (
                    n, dist, itype, kw, err)
            assert not zeroed(base.device, copies * plane + 2).any()
    idx[n // 2] = rows
    assert spread_index_add(base, idx, vals, copies).isnan().all()
    assert spread_index_add(base, idx, vals, copies, hot=4, hot_min=2).isnan().all()
    idx[n // 2] = 0
    err = float((spread_index_add(base, idx, vals, copies).double() -
                 base.double().index_add(0, idx % rows, vals.double())).norm() / scale)
    assert err < tol, err
    assert not zeroed(base.device, copies * plane + 2).any()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(4,), (8,), (16,), (100,), (3,)])  # (3,): no warp sums
@pytest.mark.parametrize("rows", [1024, 7, 1031])
def test_spread_warp_sums_against_float64(dtype, shape, rows):
    """The spread kernels with warp sums (a warp's values of one row summed before one
    atomic) on the GPU, eager and in a CUDA graph, three calls each: as the pass calls
    them, and with every block through the warp sums, on every index distribution and
    index dtype against float64; an infinity and a NaN reach only their own elements; an
    index out of range poisons that call only; the scratch is left zero."""
    from commrt.dispatch.profile import has_warp_sums
    from commrt.fx.scatter_rule import (
        SPREAD_BUSY,
        SPREAD_BUSY_HOT_MIN,
        SPREAD_HOT,
        SPREAD_HOT_MIN,
    )
    from commrt.fx.scatter_scratch import zeroed
    from commrt.fx.scatter_spread import spread_index_add

    if not has_warp_sums(torch.device("cuda")):
        pytest.skip("warp sums need sm90 or newer")
    g = torch.Generator(device="cuda").manual_seed(rows + shape[0])
    tol, copies, plane = TOL[dtype], 64, rows * shape[0]
    rule = dict(hot=SPREAD_HOT, hot_min=SPREAD_HOT_MIN, busy=SPREAD_BUSY,
                busy_hot_min=SPREAD_BUSY_HOT_MIN)
    every = dict(hot=1, busy=1, busy_hot_min=1 << 30)  # a block's first row hits itself
    for n, dist in ((1_000_003, "skewed"), (300_007, "hot"), (200_001, "uniform"),
                    (4097, "skewed")):
        n = max(4097, n * 4 // shape[0])
        base, idx, vals, ref, scale = _case(dist, rows, n, shape, dtype, g)
        for itype, kw in ((torch.int64, rule), (torch.int32, every),
                          (torch.int64, dict(every, pdl=False))):
            outs = _eager_and_graph(lambda *a, kw=kw: spread_index_add(*a, **kw),
                                    (base, idx.to(itype), vals, copies), 3)
            for out in outs:
                err = float((out.double() - ref).norm() / scale)
                assert out.dtype == dtype and out.shape == base.shape and err < tol, (
                    n, dist, itype, kw, err)
            assert not zeroed(base.device, copies * plane + 2).any()
    vals[1000, 1], vals[n // 2, shape[0] - 1] = float("inf"), float("nan")
    ref = base.double().index_add(0, idx % rows, vals.double())
    for kw in (rule, every):
        got = spread_index_add(base, idx, vals, copies, **kw).double()
        assert torch.equal(got.isnan(), ref.isnan()) and torch.equal(got.isinf(), ref.isinf())
        fin = ref.isfinite()
        assert float((got[fin] - ref[fin]).norm() / scale) < tol
    vals = vals.nan_to_num(0.0, 0.0, 0.0)
    idx[n // 3] = rows
    assert spread_index_add(base, idx, vals, copies, **every).isnan().all()
    idx[n // 3] = 0
    err = float((spread_index_add(base, idx, vals, copies, **every).double() -
                 base.double().index_add(0, idx % rows, vals.double())).norm() / scale)
    assert err < tol, err
    assert not zeroed(base.device, copies * plane + 2).any()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(), (1,)])  # 1-D values, rows of 1
@pytest.mark.parametrize("rows", [17, 1000, 16384, 20011, 32768, 40009, 65536])
def test_shared_sums_kernels_against_float64(dtype, shape, rows):
    """The shared-memory sums on the GPU (one program an SM on 16 warps past 16,384 rows;
    fp32 added to the output there, in two windows past 32,768 rows), eager and in a CUDA
    graph, three calls each: every index distribution (a hot row summed in registers),
    index dtype and negative indices against float64; an index out of range poisons the
    output."""
    from commrt.fx.scatter_rule import SHARED_PLANE
    from commrt.fx.scatter_shared import shared_sums_index_add

    g = torch.Generator(device="cuda").manual_seed(rows + 7 * len(shape))
    if rows > SHARED_PLANE and dtype != torch.float32:
        base, idx, vals, _, _ = _case("uniform", rows, 4097, shape, dtype, g)
        with pytest.raises(ValueError, match="at most 32768 elements"):
            shared_sums_index_add(base, idx, vals)
        return
    tol = TOL[dtype]
    for n, dist in ((1_000_003, "uniform"), (300_007, "skewed"), (4_111_111, "hot"),
                    (4097, "uniform")):
        base, idx, vals, ref, scale = _case(dist, rows, n, shape, dtype, g)
        for itype in (torch.int64, torch.int32):
            i = idx.to(itype)
            for out in _eager_and_graph(shared_sums_index_add, (base, i, vals), 3):
                err = float((out.double() - ref).norm() / scale)
                assert out.dtype == dtype and out.shape == base.shape and err < tol, (
                    n, dist, itype, err)
    idx[n // 2] = rows
    assert shared_sums_index_add(base, idx, vals).isnan().all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("width,n", [(100, 40_009), (1024, 8191), (99, 40_009), (40, 20_011),
                                     (33, 20_011)])
def test_one_copy_wide_rows_against_float64(dtype, width, n):
    """Wide rows on one copy as the pass sends them (fp32: ``one_copy``; fp16/bf16:
    ``half_copy``, added in their dtype where their rows pair up, else through an fp32
    copy), eager and in a CUDA graph, three calls each: every index distribution and index
    dtype against float64, no worse than torch's own scatter; the plan names a row that
    takes half the indices; an index out of range poisons."""
    from commrt.fx.scatter_narrow import narrow_index_add, state_numel
    from commrt.fx.scatter_rule import ONE_COPY_HOT, ONE_COPY_HOT_MIN, half_pairs

    g = torch.Generator(device="cuda").manual_seed(width + n)
    rows = 4099

    def call(base, i, vals, state=None):
        return narrow_index_add(base, i, vals, 1, hot=ONE_COPY_HOT, hot_min=ONE_COPY_HOT_MIN,
                                state=state, pdl=i.dtype == torch.int64,
                                half_adds=dtype != torch.float32 and half_pairs(width))

    def check(dist, idx, state):
        p, bad, nhot = state[:3].tolist()
        assert p == 1 and bad == 0, state
        if dist == "hot":
            assert rows // 3 in state[3:3 + nhot].tolist(), state
    _, base, idx, vals = _checked_cases(call, dtype, rows, n, width, g,
                                        state_numel(ONE_COPY_HOT), check)[-1]
    idx[n // 2] = rows
    assert call(base, idx, vals).isnan().all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("width,rows,n,local", [(100, 4096, 40_009, 4), (1024, 1024, 4099, 3),
                                                (300, 1031, 16_001, 2), (1024, 8, 40_009, 4)])
def test_block_local_sums_against_float64(dtype, width, rows, n, local):
    """Rows of a block that share an index summed and added once, with no plan (as the
    pass sends them: wide rows in blocks of part of a row, bf16 rows of over 128 added in
    bf16, blocks on one warp comparing indices before the wait; else fp16/bf16 through an
    fp32 copy), eager and in a CUDA graph, three calls each: every index distribution and
    index dtype against float64, no worse than torch's own scatter; an index out of range
    poisons."""
    from commrt.fx.scatter_narrow import narrow_index_add
    from commrt.fx.scatter_rule import half_adds, local_blocks

    own = half_adds(rows, width, n, 1, dtype)
    columns, warps = local_blocks(rows, width, own)

    g = torch.Generator(device="cuda").manual_seed(width + n)

    def call(base, i, vals):
        return narrow_index_add(base, i, vals, 1, hot=0, local=local, columns=columns,
                                warps=warps, half_adds=own, pdl=i.dtype == torch.int64,
                                local_early=warps == 1)
    _, base, idx, vals = _checked_cases(call, dtype, rows, n, width, g)[-1]
    idx[n // 2] = rows
    assert call(base, idx, vals).isnan().all()


def _plan_adds(idx: torch.Tensor, rows: int, n: int) -> float:
    """The adds an address the narrow plan expects from its one sample where no row is
    hot: equal ordered pairs among NARROW_SAMPLE strided indices, no fewer than an even
    spread."""
    from commrt.fx.scatter_rule import NARROW_SAMPLE

    a = (idx[::max(n // NARROW_SAMPLE, 1)][:NARROW_SAMPLE] % rows).tolist()
    same = sum(a.count(x) - 1 for x in a)
    return max(n * same / (len(a) * (len(a) - 1)), n / rows)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("width,rows,n", [(4, 65_537, 1 << 20), (16, 16_411, 262_147),
                                          (7, 4099, 50_001)])
def test_own_adds_against_float64(dtype, width, rows, n):
    """fp16/bf16 narrow rows on one copy as the pass sends them past ``half_adds``: the
    plan adds uniform indices in their dtype and skewed or hot ones through the fp32 copy,
    eager and in a CUDA graph, three calls each, every index dtype, against float64, no
    worse than torch's own scatter; an index out of range poisons either way."""
    from commrt.fx.scatter_narrow import narrow_index_add, state_numel
    from commrt.fx.scatter_rule import HOT, OWN_ADDS

    g = torch.Generator(device="cuda").manual_seed(width + rows)

    def call(base, i, vals, state=None):
        return narrow_index_add(base, i, vals, 1, state=state, own_adds=OWN_ADDS,
                                pdl=i.dtype == torch.int64)

    def check(dist, idx, state):
        want = dist == "uniform" and _plan_adds(idx, rows, n) <= OWN_ADDS
        assert state[4 + HOT].item() == want, (dist, state)
    for dist, base, idx, vals in _checked_cases(call, dtype, rows, n, width, g,
                                                state_numel(), check):
        idx[n // 2] = rows
        assert call(base, idx, vals).isnan().all(), dist


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("width,rows,n,copies", [(100, 1031, 41_947, 32), (100, 8, 40_009, 128),
                                                 (257, 1024, 16_001, 16), (1024, 8, 4099, 1),
                                                 (99, 1031, 41_947, 32), (99, 1024, 40_009, 1)])
@pytest.mark.parametrize("sum_pdl", [True, False])
def test_wide_kernels_against_float64(dtype, width, rows, n, copies, sum_pdl):
    """The wide kernels, their ``_sum`` a programmatic dependent of ``_scatter`` or a plain
    launch, eager and in a CUDA graph, three calls each: every index distribution and index
    dtype against float64, no worse than torch's own scatter (rows of 99 and 257 through
    copies whose rows are padded to 16 bytes); an index out of range poisons."""
    from commrt.fx.scatter_kernels import partitioned_index_add

    g = torch.Generator(device="cuda").manual_seed(width + rows + n)

    def call(base, i, vals):
        return partitioned_index_add(base, i, vals, copies, sum_pdl=sum_pdl)
    _, base, idx, vals = _checked_cases(call, dtype, rows, n, width, g)[-1]
    idx[n // 2] = rows
    assert call(base, idx, vals).isnan().all()
    idx[n // 2] = -rows - 1
    assert call(base, idx, vals).isnan().all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("width,rows,n", [(100, 501, 600_011), (257, 40, 60_013)])
def test_wide_hot_rows_against_float64(dtype, width, rows, n):
    """The wide kernels with hot rows (``hot=32``): indices from 0..k, where the plan lists
    the k + 1 rows for k under 32 and ``_hot`` sums them (and, in a second pass, a row the
    plan's sample skipped), from every row (the plan's quick check says no), and from 40
    rows that share two of its hash bins (its list says no); eager and in a CUDA
    graph, three calls each, int64 and int32 indices, against float64, no worse than
    torch's own scatter; an infinity and a NaN stay in their elements; an index out of
    range poisons."""
    from commrt.fx.scatter_kernels import HOT_AT, hot_bin, partitioned_index_add
    from commrt.fx.scatter_rule import WIDE_HOT_SAMPLE

    g = torch.Generator(device="cuda").manual_seed(width + rows)
    step = n // WIDE_HOT_SAMPLE

    def call(base, i, vals, state):
        return partitioned_index_add(base, i, vals, 32, hot=32, state=state)

    crowded = torch.tensor([r for r in range(4000) if hot_bin(r) in (3, 77)][:40])
    for k in (0, 7, 31, rows - 1, "crowded"):
        if k == "crowded":  # 40 rows in two hash bins: the list holds 32 of them, none hot
            rows, k = 4000, 32
            idx = crowded.cuda()[torch.randint(0, 40, (n,), device="cuda", generator=g)]
        else:
            idx = torch.randint(0, k + 1, (n,), device="cuda", generator=g)
            idx[1::step][::9] = rows - 1  # never in the plan's strided sample
        base = torch.randn(rows, width, device="cuda", generator=g).to(dtype)
        idx[::5] -= rows  # negative indices count from the end
        vals = torch.randn(n, width, device="cuda", generator=g).to(dtype)
        ref = base.double().index_add(0, idx % rows, vals.double())
        scale = base.double().abs().index_add(0, idx % rows, vals.double().abs()).norm()
        torch_err = float((base.index_add(0, idx % rows, vals).double() - ref).norm() / scale)
        for itype in (torch.int64, torch.int32):
            state = torch.full((HOT_AT.value + 33,), -2, device="cuda", dtype=torch.int32)
            for out in _eager_and_graph(call, (base, idx.to(itype), vals, state), 3):
                err = float((out.double() - ref).norm() / scale)
                assert out.dtype == dtype and err < max(TOL[dtype], 1.5 * torch_err), (
                    k, itype, err, torch_err)
            assert int(state[HOT_AT.value]) == (k + 1 if k < 32 else 0), (k, state)
            listed = state[HOT_AT.value + 1:].tolist()
            if rows == 4000:  # the quick check passed them, the list found too many
                assert listed == crowded[:32].tolist(), state
            elif k == rows - 1:  # every row: the hash's bins say no, no list written
                assert listed == [-2] * 32, state
        if k == 7:
            vals[1000, 3], vals[n // 3, width - 1] = float("inf"), float("nan")
            idx[1000], idx[n // 3] = 1, 2
            ref = base.double().index_add(0, idx % rows, vals.double())
            bound = 5 * max(1e-5, finite_error(base.index_add(0, idx % rows, vals), ref))
            state = torch.empty(HOT_AT.value + 33, device="cuda", dtype=torch.int32)
            assert finite_error(call(base, idx, vals, state), ref) < bound
            assert int(state[HOT_AT.value]) == 8, state
            idx[n // 2] = rows
            assert call(base, idx, vals, state).isnan().all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_wide_hot_64_rows_against_float64():
    """64 hot rows (the seed benchmark's k = 63): listed in order, the sum against float64
    eager and in a CUDA graph; 65 rows refused, the sum as before."""
    from commrt.fx.scatter_kernels import HOT_AT, partitioned_index_add
    from commrt.fx.scatter_rule import WIDE_HOT_SAMPLE

    def call(base, i, vals, state):
        return partitioned_index_add(base, i, vals, 32, hot=64, state=state)

    g = torch.Generator(device="cuda").manual_seed(64)
    rows, width, n = 501, 100, 400_009
    for k in (63, 64):
        r = torch.randint(0, k + 1, (n,), device="cuda", generator=g)
        # the plan's strided sample holds every one of the k + 1 rows
        r[::n // WIDE_HOT_SAMPLE][:WIDE_HOT_SAMPLE] = torch.arange(WIDE_HOT_SAMPLE,
                                                                   device="cuda") % (k + 1)
        idx = r * 7 % rows
        base = torch.randn(rows, width, device="cuda", generator=g)
        vals = torch.randn(n, width, device="cuda", generator=g)
        ref = base.double().index_add(0, idx, vals.double())
        state = torch.full((HOT_AT.value + 65,), -2, device="cuda", dtype=torch.int32)
        for out in _eager_and_graph(call, (base, idx, vals, state), 2):
            assert finite_error(out, ref) < TOL[torch.float32], k
        assert int(state[HOT_AT.value]) == (64 if k == 63 else 0), (k, state)
        if k == 63:
            want = sorted({q * 7 % rows for q in range(64)})
            assert state[HOT_AT.value + 1:].tolist() == want, state


def _wide_plan_adds(idx: torch.Tensor, rows: int, n: int) -> float:
    """The adds an address the wide plan expects with ``own_adds``: equal pairs of
    OWN_SAMPLE strided indices with OWN_SHIFTS shifts of them, at least an even spread's."""
    from commrt.fx.scatter_rule import OWN_SAMPLE as SAMPLE
    from commrt.fx.scatter_rule import OWN_SHIFTS as SHIFTS

    step = max(n // SAMPLE, 1)
    pos = torch.arange(SAMPLE, device=idx.device)
    a = idx[(pos * step).clamp(max=n - 1)] % rows
    equal = pairs = 0
    for s in range(SHIFTS):
        q = (pos + 1 + s * (SAMPLE // (2 * SHIFTS))) % SAMPLE
        both = (pos * step < n) & (q * step < n)
        equal += int((both & (a == a[q])).sum())
        pairs += int(both.sum())
    return n * max(equal / max(pairs, 1), 1 / rows)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("width,rows,n", [(100, 1031, 41_947), (1024, 1024, 4099),
                                          (98, 1031, 41_947)])  # 98: copies' rows padded
@pytest.mark.parametrize("sum_pdl", [True, False])
def test_wide_own_adds_against_float64(dtype, width, rows, n, sum_pdl):
    """fp16/bf16 wide rows as the pass sends them with ``own_adds``: the plan adds in their
    dtype where it expects few adds an address (skewed and hot indices never) and through
    the fp32 copies elsewhere, eager and in a CUDA graph, three calls each, every index
    dtype, against float64, no worse than torch's own scatter; an index out of range
    poisons either way."""
    from commrt.fx.scatter_kernels import partitioned_index_add
    from commrt.fx.scatter_rule import WIDE_OWN_ADDS, partitions_for

    g = torch.Generator(device="cuda").manual_seed(width + rows + n)
    memory = torch.cuda.get_device_properties(0).total_memory
    copies = partitions_for(rows, n, 4 * width, memory)

    def call(base, i, vals, state=None):
        return partitioned_index_add(base, i, vals, copies, state=state, sum_pdl=sum_pdl,
                                     own_adds=WIDE_OWN_ADDS)

    def check(dist, idx, state):
        want = _wide_plan_adds(idx, rows, n) <= WIDE_OWN_ADDS
        assert state[3].item() == want and (dist == "uniform" or not want), (dist, state)
    for dist, base, idx, vals in _checked_cases(call, dtype, rows, n, width, g, 4, check):
        idx[n // 2] = rows
        assert call(base, idx, vals).isnan().all(), dist


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_narrow_index_out_of_range_poisons():
    from commrt.fx.scatter_narrow import narrow_index_add

    idx = torch.arange(100_000, device="cuda") % 50
    idx[77_777] = 50
    for p in (1, 8):
        out = narrow_index_add(torch.zeros(50, 3, device="cuda"), idx,
                               torch.ones(100_000, 3, device="cuda"), p)
        assert out.isnan().all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("early", [True, False])
def test_index_out_of_range_poisons_where_sum_has_nothing_to_do(early):
    """Distinct indices with copies allowed: the plan picks one fp32 copy, so that ``_sum``
    returns at once (``sum_early``) and ``_scatter`` must poison the output itself; narrow
    and wide rows, and the same calls with a ``_sum`` that waits."""
    from commrt.fx.scatter_kernels import partitioned_index_add
    from commrt.fx.scatter_narrow import narrow_index_add, state_numel

    rows, n = 1 << 15, 20_011
    idx = torch.randperm(rows, device="cuda")[:n]
    idx[7_777] = rows
    for width, call, numel in ((3, narrow_index_add, state_numel()),
                               (100, partitioned_index_add, 3)):
        state = torch.zeros(numel, device="cuda", dtype=torch.int32)
        out = call(torch.zeros(rows, width, device="cuda"), idx,
                   torch.ones(n, width, device="cuda"), 8, state=state, sum_early=early)
        assert state[0].item() == 1, (width, state[:3].tolist())  # one copy
        assert out.isnan().all(), width


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
# 1-D and narrow: narrow kernels; 100: wide (fp16/bf16 rows combined by products in their
# dtype)
@pytest.mark.parametrize("width,dtype", [(0, torch.float32), (3, torch.float32),
                                         (100, torch.float32), (100, torch.bfloat16),
                                         (100, torch.float16)])
def test_infinities_and_nans_stay_in_their_rows(width, dtype):
    """An inf and a NaN among contended values (wide rows combined by a product, narrow
    ones on copies and hot rows) poison their own output element only."""
    from commrt.fx.scatter_kernels import partitioned_index_add
    from commrt.fx.scatter_narrow import narrow_index_add

    g = torch.Generator(device="cuda").manual_seed(width)
    rows, n = 64, 200_003
    shape = (rows,) if width == 0 else (rows, width)
    base = torch.randn(shape, device="cuda", generator=g).to(dtype)
    idx = _indices("hot", rows, n, g)
    vals = torch.randn((n, *shape[1:]), device="cuda", generator=g).to(dtype)
    flat = vals.view(n, -1)
    flat[1000, -1], flat[2000, 0] = float("inf"), float("nan")
    idx[1000], idx[2000] = 1, 2  # two rows (1-D values: one inf, one NaN)
    ref = base.double().index_add(0, idx, vals.double())
    assert ref.isinf().any() and ref.isnan().any()
    # plain atomics lose digits (fp16/bf16: torch adds in their dtype)
    bound = 5 * max(1e-5, finite_error(base.index_add(0, idx, vals), ref))
    if width == 100:  # rows combined where they contend, or not
        calls = [lambda: partitioned_index_add(base, idx, vals, 8, per_address=1, leaders=32),
                 lambda: partitioned_index_add(base, idx, vals, 1, leaders=-1)]
    else:
        calls = [lambda rule=rule: narrow_index_add(base, idx, vals, rule[0],
                                                    per_address=rule[1], hot=rule[2])
                 for rule in ((64, 128, 16), (1, 256, 0), (16, 1, 0))]
    for call in calls:
        err = finite_error(call(), ref, width)
        assert err < bound, (err, bound)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_unfenced_shared_sums_fall_back(monkeypatch):
    """Where this Triton's code for the shared sums uses shared memory beside them
    (``usable`` false), they raise ``Unfenced`` and the op takes its next route, against
    float64."""
    from commrt.fx import scatter_shared as ss
    from commrt.fx.scatter import copies, forget_shapes

    rows, n = 1000, 100_003
    g = torch.Generator(device="cuda").manual_seed(rows + n)
    base, idx, vals, ref, scale = _case("uniform", rows, n, (), torch.float32, g)
    P = copies(rows, 1, n, torch.float32, torch.cuda.get_device_properties(0).total_memory)
    monkeypatch.setattr(ss, "usable", lambda kernel, meta: False)
    ss._launches.cache_clear()  # what was checked before
    forget_shapes()  # and a replay of the shape's shared sums
    try:
        with pytest.raises(ss.Unfenced, match="uses shared memory beside its sums"):
            ss.shared_sums_index_add(base, idx, vals)
        out = torch.ops.commrt.partitioned_index_put(base, idx, vals, P)
    finally:
        ss._launches.cache_clear()  # the refusal, for later tests
        forget_shapes()
    err = float((out.double() - ref).norm() / scale)
    assert err < TOL[torch.float32], err


FAST_CASES = [  # (dtype, row width (0: 1-D), rows, indices): one a route of the op
    (torch.float32, 100, 1031, 40_009),  # the wide kernels
    (torch.bfloat16, 100, 1031, 41_947),  # ... adding bf16 where uncontended
    (torch.float32, 16, 4096, 262_147),  # the narrow kernels, two samples
    (torch.float32, 4, 8, (1 << 20) + 3),  # few rows
    (torch.float32, 1, 20_011, 1 << 20),  # shared sums added to the output
    (torch.bfloat16, 0, 1000, 1 << 20),  # shared sums, a partial a program
    (torch.float32, 4, 1024, 1 << 20),  # spread
    (torch.float32, 1024, 1024, 4099),  # block-local sums
]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,width,rows,n", FAST_CASES)
def test_fast_launches_against_float64(dtype, width, rows, n):
    """Calls after the first skip Triton's argument binding (``symm_mem.launch``), and
    once every launch has a direct path the op replays the route (``scatter._replays``):
    fresh data at new addresses each call, every output against float64; values 4 bytes
    off 16-byte alignment take another specialisation, not the replay; a shape forgotten
    (``scatter.forget_shapes``) takes the full path again."""
    from commrt.fx import (
        scatter,
        scatter_few,
        scatter_kernels,
        scatter_narrow,
        scatter_shared,
        scatter_spread,
    )
    from commrt.fx.scatter import copies
    from commrt.symm_mem import launch

    launchers = [v for m in (scatter_few, scatter_kernels, scatter_narrow, scatter_shared,
                             scatter_spread) for v in vars(m).values()
                 if isinstance(v, launch.Launcher)]
    P = copies(rows, max(1, width), n, dtype, torch.cuda.get_device_properties(0).total_memory)
    g = torch.Generator(device="cuda").manual_seed(rows * 7 + n)
    shape = (width,) if width else ()
    before = sum(lau.fast_calls for lau in launchers)
    replayed = scatter.replayed
    kept = []
    for k, dist in enumerate(("uniform", "skewed", "hot", "uniform", "skewed")):
        base, idx, vals, ref, scale = _case(dist, rows, n, shape, dtype, g)
        if k == 4:  # the values 4 (fp32) or 2 (bf16) bytes past a 16-byte boundary
            off = torch.empty(vals.numel() + 1, device="cuda", dtype=dtype)[1:]
            vals = off.view(vals.shape).copy_(vals)
            replayed = scatter.replayed
        out = torch.ops.commrt.partitioned_index_put(base, idx, vals, P)
        kept.append((base, idx, vals, out))  # the next call's tensors lie elsewhere
        err = float((out.double() - ref).norm() / scale)
        torch_err = float((base.index_add(0, idx % rows, vals).double() - ref).norm() / scale)
        assert err < max(TOL[dtype], 1.5 * torch_err), (dist, err, torch_err)
        if k == 3:
            assert scatter.replayed > replayed, "the op did not replay a shape it had seen"
        if k == 4:
            assert scatter.replayed == replayed, "misaligned values took an aligned replay"
    scatter.forget_shapes()  # then the shape takes the full path once more
    replayed = scatter.replayed
    base, idx, vals, ref, scale = _case("uniform", rows, n, shape, dtype, g)
    out = torch.ops.commrt.partitioned_index_put(base, idx, vals, P)
    assert scatter.replayed == replayed, "the op replayed a shape it was told to forget"
    err = float((out.double() - ref).norm() / scale)
    torch_err = float((base.index_add(0, idx % rows, vals).double() - ref).norm() / scale)
    assert err < max(TOL[dtype], 1.5 * torch_err), (err, torch_err)
    assert launch.FAST and launch.why_slow == "", launch.why_slow
    assert sum(lau.fast_calls for lau in launchers) > before, "no launch took the fast path"
