"""Run under TRITON_INTERPRET=1 (``test_fx_scatter`` starts it): the CUDA kernels of
``commrt::partitioned_index_put`` on CPU tensors against a float64 index_add."""

import torch
from kernel_cases import SCATTER_TOL as TOL
from kernel_cases import finite_error

from commrt.fx import scatter_scratch
from commrt.fx.scatter_kernels import hot_bin, partitioned_index_add
from commrt.fx.scatter_rule import WIDE_HOT_SAMPLE


def main() -> None:
    g = torch.Generator().manual_seed(0)
    cases = 0
    # (rows, row width, indices, k): every index in 0..k; width 1 is a vector
    for rows, d, n, k in ((11, 5, 300, 0), (11, 5, 300, 3), (40, 3, 777, 39),
                          (9, 130, 200, 8), (7, 1, 100, 6)):
        for dtype in TOL:
            for itype in (torch.int64, torch.int32):
                base = torch.randn(rows, d, generator=g).to(dtype)
                idx = torch.randint(0, k + 1, (n,), generator=g)
                idx[::7] -= rows  # negative indices count from the end
                vals = torch.randn(n, d, generator=g).to(dtype)
                ref = base.double().index_add(0, idx % rows, vals.double())
                # (copies, adds an address, fewest copies, most distinct indices to combine)
                # fp16 rows also combined as fp16 products, as on a GPU (the interpreter's
                # bf16 products are wrong)
                halves = (False, True) if dtype == torch.float16 else (False,)
                for rule in ((1, 512, 1, -1), (4, 512, 1, 4), (4, 1, 1, 32), (8, 512, 16, 0)):
                    for half in halves if rule[3] >= 0 else (False,):
                        got = partitioned_index_add(base, idx.to(itype), vals, *rule,
                                                    half_products=half)
                        err = float((got.double() - ref).norm() / ref.norm())
                        assert got.dtype == dtype and err < TOL[dtype], (
                            rows, d, n, k, dtype, itype, rule, half, err)
                        cases += 1
    # the copies chosen from the sample: every index on one row, spread, sorted into 4 runs;
    # cycling over 61 rows, 134 a row, where the strided sample holds no equal pair: the
    # copies an even spread asks for (64 adds an address: 4)
    n, state = 1024, torch.zeros(3, dtype=torch.int32)
    for idx, rows, want in ((torch.zeros(n, dtype=torch.long), 64, 8),
                            (torch.arange(n), n, 1),
                            (torch.arange(n) * 4 // n, 4, 8),
                            (torch.arange(8192) % 61, 61, 4)):
        vals = torch.randn(idx.numel(), 2, generator=g)
        got = partitioned_index_add(torch.zeros(rows, 2), idx, vals, 8, per_address=64,
                                    min_copies=2, leaders=-1, state=state)
        assert int(state[0]) == want, (rows, int(state[0]), want)
        assert torch.allclose(got, torch.zeros(rows, 2).index_add(0, idx, vals), atol=1e-4)
    # fp16 added in its own dtype (the interpreter has no bf16 atomics) where the plan
    # expects at most own_adds adds an address (state[3]), else through the fp32 copies, no
    # worse than torch's own fp16 index_add; an index out of range poisons either way
    for d in (5, 130):
        for rows, k, want in ((4096, 4095, 1), (40, 2, 0)):
            base = torch.randn(rows, d, generator=g).half()
            idx = torch.randint(0, k + 1, (1024,), generator=g)
            vals = torch.randn(1024, d, generator=g).half()
            ref = base.double().index_add(0, idx, vals.double())
            torch_err = float((base.index_add(0, idx, vals).double() - ref).norm() / ref.norm())
            state = torch.full((4,), -1, dtype=torch.int32)
            got = partitioned_index_add(base, idx, vals, 4, per_address=64, min_copies=2,
                                        state=state, own_adds=64)
            err = float((got.double() - ref).norm() / ref.norm())
            assert got.dtype == torch.float16 and err < max(TOL[torch.float16], 2 * torch_err), \
                (d, rows, err, torch_err)
            assert int(state[3]) == want and (int(state[0]) == 1 or not want), (d, rows, state)
            idx[7] = rows
            bad = partitioned_index_add(base, idx, vals, 4, per_address=64, own_adds=64)
            assert bad.isnan().all(), (d, rows, "an index out of range must poison the result")
            cases += 2
    for args, kw, word in (((torch.zeros(4, 4), torch.ones(3, 4)), {}, "float32"),
                           ((torch.zeros(4, 4).half(), torch.ones(3, 4)), {}, "float32"),
                           ((torch.zeros(4, 4).half(), torch.ones(3, 4).half()),
                            {"per_address": 16}, "per_address=16")):
        try:
            partitioned_index_add(args[0], torch.tensor([0, 1, 2]), args[1], 4, own_adds=32, **kw)
            raise AssertionError(f"own_adds must refuse {word}")
        except ValueError as e:
            assert word in str(e), e
    # an infinity and a NaN stay in their own rows, rows combined or not
    base, idx = torch.randn(11, 5, generator=g), torch.randint(0, 4, (300,), generator=g)
    for dtype in TOL:
        vals = torch.randn(300, 5, generator=g).to(dtype)
        vals[5, 2], vals[9, 4] = float("inf"), float("nan")
        vals[7, 2], vals[11, 0] = float("-inf"), float("-inf")  # inf - inf: NaN
        idx[7] = idx[5]
        ref = base.double().index_add(0, idx, vals.double())
        for rule, half in (((1, 512, 1, -1), False), ((4, 1, 1, 32), False),
                           ((4, 1, 1, 32), dtype == torch.float16)):
            got = partitioned_index_add(base.to(dtype), idx, vals, *rule, half_products=half)
            err = finite_error(got, ref, (dtype, rule, half))
            assert err < TOL[dtype], (dtype, rule, half, err)
    # hot rows (hot=16): where the plan's strided sample of indices holds at most 16 distinct
    # rows, _hot sums them as products and, in a second pass, the rows the sample skipped
    # (row rows - 1 here, at places the sample never reads); elsewhere the plan as before
    for rows, d, n, k, hot in ((40, 20, 3000, 5, 16), (40, 130, 1500, 0, 16),
                               (40, 20, 3000, 15, 16), (40, 20, 3000, 39, 16),
                               (70, 20, 3000, 31, 32)):
        step = n // WIDE_HOT_SAMPLE
        for dtype in TOL:
            for itype in (torch.int64, torch.int32):
                base = torch.randn(rows, d, generator=g).to(dtype)
                idx = torch.randint(0, k + 1, (n,), generator=g)
                idx[1::step][::9] = rows - 1  # skipped by the sample
                idx[::5] -= rows  # negative indices count from the end
                vals = torch.randn(n, d, generator=g).to(dtype)
                ref = base.double().index_add(0, idx % rows, vals.double())
                state = torch.full((5 + hot,), -2, dtype=torch.int32)
                got = partitioned_index_add(base, idx.to(itype), vals, 8, hot=hot, state=state)
                err = float((got.double() - ref).norm() / ref.norm())
                assert got.dtype == dtype and err < TOL[dtype], (rows, d, k, dtype, itype, err)
                found = k + 1 if k < hot else 0
                listed = state[5:].tolist()
                assert int(state[4]) == found, (k, state)
                assert listed[:found] == list(range(found)), (k, state)
                assert int(state[0]) == 1 or not found, (k, state)
                # 40 rows fill 40 of the hash's bins: the quick no, no list written;
                # else -1 after the last row listed
                assert listed[found:] == [-2 if not found else -1] * (hot - found), (k, state)
                cases += 1
    # 20 rows in two of the hash's 128 bins pass the quick check; the list then finds
    # more than 16 rows: none hot, the sum as before
    crowded = torch.tensor([r for r in range(1500) if hot_bin(r) in (3, 77)][:20])
    idx = crowded[torch.randint(0, 20, (3000,), generator=g)]
    vals, base = torch.randn(3000, 20, generator=g), torch.randn(1500, 20, generator=g)
    state = torch.full((21,), -2, dtype=torch.int32)
    got = partitioned_index_add(base, idx, vals, 8, hot=16, state=state)
    assert finite_error(got, base.double().index_add(0, idx, vals.double()),
                        "crowded bins") < TOL[torch.float32]
    assert int(state[4]) == 0 and state[5:].tolist() == crowded[:16].tolist(), state
    cases += 1
    vals = torch.randn(3000, 20, generator=g)
    vals[5, 2], vals[9, 4], vals[700, 0] = float("inf"), float("nan"), float("-inf")
    idx = torch.randint(0, 6, (3000,), generator=g)
    ref = torch.zeros(40, 20).double().index_add(0, idx, vals.double())
    got = partitioned_index_add(torch.zeros(40, 20), idx, vals, 8, hot=16)
    assert finite_error(got, ref, "hot") < TOL[torch.float32]
    idx[2999] = 40
    assert partitioned_index_add(torch.zeros(40, 20), idx, vals, 8, hot=16).isnan().all(), \
        "an index out of range must poison the result (hot rows)"
    for hot, kw in ((8, {}), (24, {}), (16, {"own_adds": 8})):
        try:
            partitioned_index_add(torch.zeros(4, 4).half(), torch.tensor([0, 1, 2]),
                                  torch.ones(3, 4).half(), 4, hot=hot, **kw)
            raise AssertionError(f"hot={hot} {kw} must be refused")
        except ValueError as e:
            assert "hot" in str(e), e
    cases += 2
    for d in (2, 7):  # copies' rows padded from 7 to 8 elements: poisoned all the same
        out = partitioned_index_add(torch.zeros(4, d), torch.tensor([0, 1, 99] * 40),
                                    torch.ones(120, d), 8, per_address=1, min_copies=8)
        assert out.isnan().all(), ("an index out of range must poison the result", d)
    # the copies' rows D apart (pad_rows=False), as before they were padded
    base, idx = torch.randn(11, 7, generator=g), torch.randint(0, 3, (500,), generator=g)
    vals = torch.randn(500, 7, generator=g)
    ref = base.double().index_add(0, idx, vals.double())
    for pad in (True, False):
        got = partitioned_index_add(base, idx, vals, 4, 1, 1, 32, pad_rows=pad)
        assert finite_error(got, ref, pad) < TOL[torch.float32], pad
        cases += 1
    # the extra copies came zero from the scratch and went back zero, poisoned call included
    assert not any(b.any() for b in scatter_scratch._buffers.values())
    print(f"ok {cases}")


if __name__ == "__main__":
    main()
