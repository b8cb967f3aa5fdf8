"""Run under TRITON_INTERPRET=1 (``test_fx_scatter`` starts it): the spread kernels of
``commrt::partitioned_index_put`` on CPU tensors against a float64 index_add, and the
scratch they leave zero."""

import torch
from kernel_cases import SCATTER_TOL as TOL
from kernel_cases import finite_error

from commrt.fx.scatter_scratch import zeroed
from commrt.fx.scatter_spread import spread_index_add


def scratch_clear(device, numel: int) -> bool:
    return not zeroed(device, numel).any()


def main() -> None:
    g = torch.Generator().manual_seed(0)
    cases = 0
    # (rows, row shape, indices, copies); () is 1-D values; small blocks: many programs
    for rows, shape, n, p in ((1024, (4,), 5003, 128), (37, (), 20_011, 16), (9, (3,), 777, 1),
                              (300, (16,), 4099, 64), (5, (7,), 1, 8)):
        for dist in ("uniform", "hot"):
            for dtype in TOL:
                base = torch.randn(rows, *shape, generator=g).to(dtype)
                idx = torch.randint(0, rows, (n,), generator=g)
                if dist == "hot":  # half into one row
                    idx[torch.rand(n, generator=g) < 0.5] = rows // 3
                idx[::7] -= rows  # negative indices count from the end
                vals = torch.randn(n, *shape, generator=g).to(dtype)
                ref = base.double().index_add(0, idx % rows, vals.double())
                for itype, block, tile, kw in (
                        (torch.int64, 1024, 8192, {}), (torch.int32, 64, 256, {}),
                        (torch.int64, 256, 8192, dict(hot=2, hot_min=16)),
                        (torch.int32, 256, 256, dict(hot=4, hot_min=2)),
                        # warp sums asked for: none without a GPU (has_warp_sums)
                        (torch.int64, 1024, 8192, dict(hot=2, hot_min=16, busy=1,
                                                       busy_hot_min=1 << 30))):
                    got = spread_index_add(base, idx.to(itype), vals, p, block=block,
                                           sum_tile=tile, **kw)
                    err = float((got.double() - ref).norm() / ref.norm())
                    assert got.dtype == dtype and got.shape == base.shape and \
                        err < TOL[dtype], (rows, shape, dist, dtype, itype, p, kw, err)
                    plane = base.numel()
                    assert scratch_clear(base.device, p * plane + 2), (rows, shape, p)
                    cases += 1
    # no indices: the output is self
    base = torch.randn(8, 4, generator=g)
    empty = spread_index_add(base, torch.zeros(0, dtype=torch.long), torch.zeros(0, 4), 4)
    assert torch.equal(empty, base), "no indices must leave self as it is"
    # an infinity and a NaN stay in their own elements
    idx = torch.randint(0, 64, (3000,), generator=g)
    for dtype in TOL:
        vals = torch.randn(3000, 3, generator=g).to(dtype)
        vals[5, 2], vals[9, 1] = float("inf"), float("nan")
        base = torch.randn(64, 3, generator=g).to(dtype)
        ref = base.double().index_add(0, idx, vals.double())
        err = finite_error(spread_index_add(base, idx, vals, 32), ref, dtype)
        assert err < TOL[dtype], (dtype, err)
    # an index out of range poisons that call only, and the next call is right again
    for bad, kw in ((8, {}), (-9, {}), (8, dict(hot=2, hot_min=1))):
        out = spread_index_add(torch.zeros(8, 2), torch.tensor([0, 1, bad]), torch.ones(3, 2), 2,
                               **kw)
        assert out.isnan().all(), "an index out of range must poison the result"
        assert scratch_clear(out.device, 2 * 16 + 2), "the flag must be cleared"
        ok = spread_index_add(torch.zeros(8, 2), torch.tensor([0, 1, 1]), torch.ones(3, 2), 2)
        assert torch.equal(ok, torch.tensor([[1.0, 1], [2, 2]] + [[0, 0]] * 6)), ok
    for p in (3, 0):
        try:
            spread_index_add(torch.zeros(8, 2), torch.tensor([0]), torch.ones(1, 2), p)
            raise AssertionError("copies that are not a power of two must be refused")
        except ValueError as e:
            assert f"got {p}" in str(e), e
    print(f"ok {cases}")


if __name__ == "__main__":
    main()
