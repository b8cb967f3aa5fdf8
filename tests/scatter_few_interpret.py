"""Run under TRITON_INTERPRET=1 (``test_fx_scatter`` starts it): the few-rows kernels of
``commrt::partitioned_index_put`` on CPU tensors against a float64 index_add."""

import torch
from kernel_cases import SCATTER_TOL as TOL
from kernel_cases import finite_error

import commrt.fx.scatter_few as few
from commrt.fx.scatter_few import few_rows_index_add


def main() -> None:
    g = torch.Generator().manual_seed(0)
    cases = 0
    # (rows, row shape, indices); () is 1-D values
    # rows wider than FEW_WIDTH: one-hot products
    for rows, shape, n in ((8, (), 5003), (1, (1,), 777), (5, (3,), 1500), (16, (4,), 999),
                           (3, (2,), 1), (8, (16,), 3001), (16, (8,), 2049), (7, (13,), 1000),
                           (8, (20,), 3001), (13, (100,), 777), (2, (128,), 40),
                           (5, (5,), 17)):
        for dist in ("uniform", "one"):
            for dtype in TOL:
                base = torch.randn(rows, *shape, generator=g).to(dtype)
                idx = torch.randint(0, rows, (n,), generator=g)
                if dist == "one":  # every index into one row
                    idx[:] = rows // 2
                idx[::7] -= rows  # negative indices count from the end
                vals = torch.randn(n, *shape, generator=g).to(dtype)
                ref = base.double().index_add(0, idx % rows, vals.double())
                # small tiles: several blocks a program (the launches are cached by
                # shape: cleared around the change)
                for itype, tile in ((torch.int64, None), (torch.int32, 256)):
                    kept = few.TILE, few.FP32_TILE, few.DOT_SM_BYTES
                    if tile:
                        few._launches.cache_clear()
                        few.TILE = few.FP32_TILE = few.DOT_SM_BYTES = tile
                    got = few_rows_index_add(base, idx.to(itype), vals)
                    few.TILE, few.FP32_TILE, few.DOT_SM_BYTES = kept
                    few._launches.cache_clear()
                    err = float((got.double() - ref).norm() / ref.norm())
                    assert got.dtype == dtype and got.shape == base.shape and \
                        err < TOL[dtype], (rows, shape, dist, dtype, itype, tile, err)
                    cases += 1
    # integers: summed in their dtype, equal to torch's (int32 wrapping as its sums do)
    for rows, shape, n in ((8, (), 5003), (16, (4,), 999), (5, (3,), 1500), (8, (16,), 3001),
                           (3, (2,), 1)):
        for dtype in (torch.int32, torch.int64):
            for big in (False, True):
                base = torch.randint(-1000, 1000, (rows, *shape), generator=g).to(dtype)
                idx = torch.randint(0, rows, (n,), generator=g)
                idx[::7] -= rows
                lo = 1 << 30 if big else -8  # big: int32 sums past 2**31
                vals = torch.randint(lo, lo + 17 if not big else 1 << 31, (n, *shape),
                                     generator=g).to(dtype)
                ref = base.index_add(0, idx % rows, vals)
                for itype, tile in ((torch.int64, None), (torch.int32, 256)):
                    kept = few.TILE, few.FP32_TILE
                    if tile:
                        few._launches.cache_clear()
                        few.TILE = few.FP32_TILE = tile
                    got = few_rows_index_add(base, idx.to(itype), vals)
                    few.TILE, few.FP32_TILE = kept
                    few._launches.cache_clear()
                    assert got.dtype == dtype and torch.equal(got, ref), \
                        (rows, shape, dtype, big, itype, tile)
                    cases += 1
    try:
        few_rows_index_add(torch.zeros(8, 17, dtype=torch.int32), torch.tensor([0]),
                           torch.ones(1, 17, dtype=torch.int32))
        raise AssertionError("integer rows of 17 must be refused")
    except ValueError as e:
        assert "8 rows of 17" in str(e), e
    # no indices: the output is self
    base = torch.randn(8, 4, generator=g)
    empty = few_rows_index_add(base, torch.zeros(0, dtype=torch.long), torch.zeros(0, 4))
    assert torch.equal(empty, base), "no indices must leave self as it is"
    # an infinity and a NaN stay in their own rows (products: 0 * inf would reach every row)
    idx = torch.randint(0, 8, (3000,), generator=g)
    for dtype in TOL:
        for width in (3, 16, 20):
            base = torch.randn(8, width, generator=g)
            vals = torch.randn(3000, width, generator=g).to(dtype)
            vals[5, 2], vals[9, 1] = float("inf"), float("nan")
            ref = base.double().index_add(0, idx, vals.double())
            got = few_rows_index_add(base.to(dtype), idx, vals)
            assert torch.equal(got.isnan(), ref.isnan()), (dtype, width)
            err = finite_error(got, ref, dtype)
            assert err < TOL[dtype], (dtype, width, err)
    for bad in (8, -9):
        for width in (2, 20):
            out = few_rows_index_add(torch.zeros(8, width), torch.tensor([0, 1, bad]),
                                     torch.ones(3, width))
            assert out.isnan().all(), "an index out of range must poison the result"
    for rows, width in ((17, 2), (8, 129)):
        try:
            few_rows_index_add(torch.zeros(rows, width), torch.tensor([0]), torch.ones(1, width))
            raise AssertionError(f"{rows} rows of {width} must be refused")
        except ValueError as e:
            assert f"{rows} rows of {width}" in str(e), e
    print(f"ok {cases}")


if __name__ == "__main__":
    main()
