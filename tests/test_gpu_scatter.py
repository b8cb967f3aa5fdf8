"""The partitioned-scatter pass on a GPU, one case per regime of ``scatter_rule.decide``,
against float64 (``pytest -m gpu tests/test_gpu_scatter.py``)."""

import pytest
import torch

import commrt.fx

CASES = [  # (op, dtype, row width (0: 1-D), rows, indices, expected choice)
    ("index_add", torch.float32, 100, 501, 600_011, "commrt"),  # wide rows that contend
    ("index_put", torch.bfloat16, 16, 8, 100_000, "commrt"),  # bf16 rows, fp32 sums
    ("index_put", torch.float32, 0, 1000, 1 << 20, "inductor_partitioned"),  # 1-D, many a row
    ("index_add", torch.float32, 4, 1 << 20, 1 << 20, "inductor"),  # narrow, spread
    ("index_put", torch.float32, 1024, 1 << 14, 1024, "inductor"),  # wide, no contention
]
OPS = {"index_add": lambda o, i, v: o.index_add(0, i, v),
       "index_put": lambda o, i, v: o.index_put((i,), v, accumulate=True)}


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
    torch._dynamo.reset()
    commrt.fx.last_reports.clear()
    with ic.patch(fx_graph_cache=False), commrt.fx.installed(
            fuse_rmsnorm=False, overlap=False, partitioned_scatter=True):
        got = torch.compile(fn, dynamic=False)(out, idx, vals)
    rep = [r for k, r in commrt.fx.last_reports if k == "partitioned_scatter"][-1]
    assert rep.scatters == 1 and rep.decisions[0].split(": ")[1].startswith(choice), rep
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert got.dtype == dtype and err(got) <= max(tol, 1.5 * err(plain)), (err(got), err(plain))
