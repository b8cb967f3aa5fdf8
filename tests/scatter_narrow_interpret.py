"""Run under TRITON_INTERPRET=1 (``test_fx_scatter`` starts it): the narrow-row kernels of
``commrt::partitioned_index_put`` on CPU tensors against a float64 index_add, and the
plan they make from the indices, against a count in Python."""

from unittest import mock

import torch
from kernel_cases import SCATTER_TOL as TOL
from kernel_cases import finite_error

from commrt.fx import scatter_narrow as sn
from commrt.fx.scatter_narrow import ROW_BLOCKS, narrow_index_add, state_numel
from commrt.fx.scatter_rule import HOT_SHARE, NARROW_SAMPLE, NARROW_SPREAD
from commrt.fx.scatter_scratch import zeroed
from commrt.symm_mem.launch import next_pow2


def indices(dist: str, rows: int, n: int, g) -> torch.Tensor:
    idx = torch.randint(0, rows, (n,), generator=g)
    if dist == "hot":  # half into one row
        idx[torch.rand(n, generator=g) < 0.5] = rows // 3
    elif dist == "few":  # everything into three rows
        idx = torch.tensor([1, rows - 1, rows // 2])[torch.randint(0, 3, (n,), generator=g)]
    return idx


def plan_reference(idx: torch.Tensor, rows: int, copies: int, pair_sample: int,
                   hot_min: int, hot_adds: int, per_address: int, min_copies: int,
                   spread: int = NARROW_SPREAD) -> tuple[int, set]:
    """(copies, hot rows) that ``_plan`` must make: counted row by row in Python, in
    float32 in the kernel's order of operations."""
    f32 = torch.float32
    n = idx.numel()

    def sample(size: int, offset: bool) -> list:
        step = max(n // size, 1)
        at = [k * step + (step // 2 if offset else 0) for k in range(size)]
        got = [int(idx[a]) + (rows if int(idx[a]) < 0 else 0) if a < n else None for a in at]
        return [r if r is not None and 0 <= r < rows else None for r in got], \
            sum(a < n for a in at)

    a, sampled = sample(NARROW_SAMPLE, False)
    pairs = copies > 1 and pair_sample > 0
    b = sample(pair_sample, True)[0] if pairs else []
    sampled = torch.tensor(float(max(sampled, 1)), dtype=f32)
    count = {r: a.count(r) for r in a if r is not None}

    def heavy(r: int) -> bool:
        c = count.get(r, 0)
        adds_row = torch.tensor(float(n), dtype=f32) * c / sampled
        return bool(c >= hot_min and adds_row > hot_adds and
                    (adds_row > copies * hot_adds or c * HOT_SHARE >= sampled))

    hot = {r for r in count if heavy(r)}
    rest = [r for r in a if r is not None and r not in hot]
    m = torch.tensor(float(len(rest)), dtype=f32)
    same = sum(count[r] - 1 for r in rest) + (sum(b.count(r) for r in rest) if pairs else 0)
    npairs = m * (m - 1.0)
    if pairs:
        npairs = npairs + m * len([r for r in b if r is not None and r not in hot])
    n_rest = torch.tensor(float(n), dtype=f32) * m / sampled
    adds = n_rest * same / torch.clamp(npairs, min=1.0)
    adds = max(float(adds), float(n_rest / rows))
    p = min(min_copies, copies)
    while p * spread < adds and p < copies:
        p *= 2
    return (1 if adds <= per_address else min(p, copies)), hot


def plans(g) -> int:
    """The plan each call stores (copies and hot rows) against ``plan_reference``, with and
    without a second sample, on uniform, skewed, hot and few-row indices."""
    cases = 0
    for trial in range(24):
        rows = int(torch.randint(2, 3000, (1,), generator=g))
        n = int(torch.randint(100, 5000, (1,), generator=g))
        idx = torch.randint(0, rows, (n,), generator=g)
        if trial % 4 == 1:  # most indices into a few percent of the rows
            few = torch.rand(n, generator=g) < 0.9
            idx[few] = torch.randint(0, max(1, rows // 30), (int(few.sum()),), generator=g)
        elif trial % 4 == 2:
            idx[torch.rand(n, generator=g) < 0.5] = rows // 3
        elif trial % 4 == 3:
            idx = torch.randint(0, min(rows, 12), (n,), generator=g)
        idx[::9] -= rows  # negative indices count from the end
        vals = torch.randn(n, generator=g)
        for copies, pair_sample, hot_adds in ((16, 64, 256), (64, 128, 64), (1, 64, 64),
                                              (8, 0, 256)):
            state = torch.zeros(state_numel(16), dtype=torch.int32)
            narrow_index_add(torch.zeros(rows), idx, vals, copies, per_address=16,
                             min_copies=2, hot_min=4, hot_adds=hot_adds, state=state,
                             pair_sample=pair_sample, spread=8)
            want = plan_reference(idx, rows, copies, pair_sample, 4, hot_adds, 16, 2, 8)
            got = int(state[0]), set(state[3:3 + int(state[2])].tolist())
            assert got == want, (trial, rows, n, copies, pair_sample, got, want)
            cases += 1
    return cases


def half_adds(g) -> None:
    """fp16 rows added in their own dtype (the interpreter has no bf16 atomics): plain and
    with hot rows (their fp32 sums added by the last program) against float64, no worse
    than torch's own fp16 ``index_add``; an index out of range poisons; refused cases."""
    for rows, width, n, dist in ((300, 4, 2003, "uniform"), (57, 16, 1500, "hot"),
                                 (40, 5, 999, "few"), (61, 100, 700, "hot"),
                                 (211, 40, 900, "uniform")):
        base = torch.randn(rows, width, generator=g).half()
        idx = indices(dist, rows, n, g)
        vals = torch.randn(n, width, generator=g).half()
        ref = base.double().index_add(0, idx, vals.double())
        torch_err = float((base.index_add(0, idx, vals).double() - ref).norm() / ref.norm())
        for hot in (0, 16) if dist == "uniform" else (16,):  # plain fp16 adds lose digits
            state = torch.full((state_numel(16),), -7, dtype=torch.int32)
            got = narrow_index_add(base, idx, vals, 1, hot=hot, hot_adds=64, state=state,
                                   half_adds=True)
            err = float((got.double() - ref).norm() / ref.norm())
            nhot = int(state[2])
            assert got.dtype == torch.float16 and err < max(TOL[torch.float16], 2 * torch_err), \
                (rows, width, dist, hot, err, torch_err)
            assert (nhot > 0) == (hot > 0 and dist != "uniform"), (dist, hot, state)
            if nhot:  # every program counted itself done
                programs = -(-n // max(16, ROW_BLOCKS[0] // next_pow2(width)))
                assert int(state[3 + 16]) == programs, (programs, state)
    bad = torch.tensor([0, 1, 99] * 50)
    out = narrow_index_add(torch.zeros(4, 4).half(), bad, torch.ones(150, 4).half(), 1,
                           half_adds=True)
    assert out.isnan().all(), "an index out of range must poison the result"
    for args, word in (((torch.zeros(4, 4), torch.ones(3, 4), 1), "float32"),
                       ((torch.zeros(4, 4).half(), torch.ones(3, 4).half(), 2), "2 copies")):
        try:
            narrow_index_add(args[0], torch.tensor([0, 1, 2]), args[1], args[2],
                             half_adds=True)
            raise AssertionError(f"half_adds must refuse {word}")
        except ValueError as e:
            assert word in str(e), e


def own_adds(g) -> None:
    """fp16 rows on one copy that the plan adds in their own dtype where it finds no hot
    row and few adds an address, else through the fp32 copy (``_sum`` a no-op on the
    first): the plan's choice, against float64, no worse than torch's own fp16
    ``index_add``; an index out of range poisons either way; refused cases."""
    for rows, width, n, dist, own in ((300, 4, 2003, "uniform", 1), (1031, 16, 9001, "uniform", 1),
                                      (57, 16, 1500, "hot", 0), (400, 5, 4000, "few", 0)):
        base = torch.randn(rows, width, generator=g).half()
        idx = indices(dist, rows, n, g)
        vals = torch.randn(n, width, generator=g).half()
        ref = base.double().index_add(0, idx, vals.double())
        torch_err = float((base.index_add(0, idx, vals).double() - ref).norm() / ref.norm())
        state = torch.full((state_numel(16),), -7, dtype=torch.int32)
        got = narrow_index_add(base, idx, vals, 1, state=state, pair_sample=0, own_adds=32)
        err = float((got.double() - ref).norm() / ref.norm())
        assert got.dtype == torch.float16 and err < max(TOL[torch.float16], 2 * torch_err), \
            (rows, width, dist, err, torch_err)
        assert int(state[4 + 16]) == own, (dist, state)
        bad = idx.clone()
        bad[n // 2] = rows
        out = narrow_index_add(base, bad, vals, 1, pair_sample=0, own_adds=32)
        assert out.isnan().all(), (dist, "an index out of range must poison the result")
    # one equal pair in the sample does not tip the choice, two do: of 70,400 indices into
    # 65,536 rows, each pair counted reads as 35 adds an address (over 32)
    rows, n = 65536, 64 * 1100
    base = torch.randn(rows, 4, generator=g).half()
    vals = torch.randn(n, 4, generator=g).half()
    for pairs, own in ((0, 1), (1, 1), (2, 0)):
        idx = torch.randint(0, rows, (n,), generator=g)
        idx[::n // 64] = torch.randperm(rows, generator=g)[:64]
        for k in range(pairs):
            idx[(2 * k + 1) * (n // 64)] = idx[2 * k * (n // 64)]
        state = torch.full((state_numel(16),), -7, dtype=torch.int32)
        got = narrow_index_add(base, idx, vals, 1, state=state, pair_sample=0, own_adds=32)
        ref = base.double().index_add(0, idx, vals.double())
        assert finite_error(got, ref, (pairs, own)) < TOL[torch.float16], (pairs, own)
        assert int(state[4 + 16]) == own and int(state[2]) == 0, (pairs, state[:24])
    for args, word in (((torch.zeros(4, 4), torch.ones(3, 4), 1, {}), "float32"),
                       ((torch.zeros(4, 4).half(), torch.ones(3, 4).half(), 2, {}), "2 copies"),
                       ((torch.zeros(4, 4).half(), torch.ones(3, 4).half(), 1,
                         {"half_adds": True}), "half_adds")):
        try:
            narrow_index_add(args[0], torch.tensor([0, 1, 2]), args[1], args[2], own_adds=32,
                             **args[3])
            raise AssertionError(f"own_adds must refuse {word}")
        except ValueError as e:
            assert word in str(e), e


def local_sums(g) -> None:
    """Rows of a block that share an index summed and added once (no plan, one copy), found
    before or after waiting for ``_init``: against float64 for rows of blocks of 32 and of
    16 rows, fp32 and fp16 (in fp32 or in its own dtype), negative indices, an infinity and
    a NaN in their own rows, an index out of range; refused on rows whose blocks hold too
    many rows to compare."""
    for rows, width, n, dist in ((1000, 65, 700, "hot"), (37, 300, 400, "few"),
                                 (500, 100, 300, "uniform"), (5, 1024, 90, "hot")):
        for dtype, own in ((torch.float32, False), (torch.float16, False),
                           (torch.float16, True)):
            base = torch.randn(rows, width, generator=g).to(dtype)
            idx = indices(dist, rows, n, g)
            idx[::5] -= rows
            vals = torch.randn(n, width, generator=g).to(dtype)
            vals[3, 7], vals[11, 2] = float("inf"), float("nan")
            ref = base.double().index_add(0, idx % rows, vals.double())
            torch_err = finite_error(base.index_add(0, idx % rows, vals), ref, dtype)
            # the shared rows found before waiting for _init, or after (local_early)
            for local, itype, early in ((2, torch.int64, True), (3, torch.int32, False),
                                        (4, torch.int64, True)):
                got = narrow_index_add(base, idx.to(itype), vals, 1, hot=0, local=local,
                                       half_adds=own, local_early=early)
                err = finite_error(got, ref, (rows, width, dist, dtype, own, local))
                assert got.dtype == dtype and err < max(TOL[dtype], 2 * torch_err), \
                    (rows, width, dist, dtype, own, local, err, torch_err)
    out = narrow_index_add(torch.zeros(4, 80), torch.tensor([0, 0, 0, 9]), torch.ones(4, 80),
                           1, hot=0, local=2)
    assert out.isnan().all(), "an index out of range must poison the result"
    for width, local in ((16, 2), (100, 1)):
        try:
            narrow_index_add(torch.zeros(4, width), torch.tensor([0, 1]),
                             torch.ones(2, width), 1, hot=0, local=local)
            raise AssertionError(f"local={local} on rows of {width} must be refused")
        except ValueError as e:
            assert f"local={local}" in str(e), e


def column_blocks(g) -> None:
    """Rows wider than a block's ``columns`` split over programs (axis 1): block-local sums,
    fp16 hot rows added by the last program (every column of them), and copies with hot
    rows, against float64; a column count that is not a power of two refused."""
    for rows, width, n, dist in ((37, 300, 400, "few"), (61, 100, 700, "hot")):
        base0 = torch.randn(rows, width, generator=g)
        idx = indices(dist, rows, n, g)
        vals0 = torch.randn(n, width, generator=g)
        for dtype, kw in ((torch.float32, dict(hot=0, local=4, warps=2)),
                          (torch.float16, dict(hot=0, local=3, half_adds=True)),
                          (torch.float16, dict(hot=4, hot_min=16, hot_adds=64,
                                               half_adds=True)),
                          (torch.float32, dict(partitions=8, per_address=1, min_copies=2,
                                               hot=4, hot_min=16, hot_adds=64))):
            kw = dict(kw)
            P = kw.pop("partitions", 1)
            base, vals = base0.to(dtype), vals0.to(dtype)
            ref = base.double().index_add(0, idx, vals.double())
            torch_err = finite_error(base.index_add(0, idx, vals), ref, dtype)
            for cols in (64, 128) if kw.get("local") else (16, 64):
                state = torch.zeros(state_numel(kw["hot"]), dtype=torch.int32)
                got = narrow_index_add(base, idx, vals, P, state=state, columns=cols, **kw)
                err = finite_error(got, ref, (rows, width, dist, dtype, kw, cols))
                assert got.dtype == dtype and err < max(TOL[dtype], 2 * torch_err), \
                    (rows, width, dist, dtype, kw, cols, err, torch_err)
                if kw["hot"] and dist == "hot":
                    assert int(state[2]) > 0, ("the hot row must be found", state)
            if P == 1 and not kw["hot"]:  # rows on axis 0 (too many programs for axis 1)
                with mock.patch.object(sn, "MAX_GRID_Y", 0):
                    got = narrow_index_add(base, idx, vals, 1, columns=64, **kw)
                err = finite_error(got, ref, (rows, width, dist, dtype, kw, "rows first"))
                assert err < max(TOL[dtype], 2 * torch_err), (rows, width, dtype, kw, err)
    try:
        narrow_index_add(torch.zeros(4, 80), torch.tensor([0, 1]), torch.ones(2, 80), 1,
                         columns=48)
        raise AssertionError("columns=48 must be refused")
    except ValueError as e:
        assert "columns=48" in str(e), e


def scratch_left_zero(g) -> None:
    """The extra copies come zero from ``scatter_scratch`` and go back zero: after calls
    with many copies (read in steps, and up to 64 allowed, the few chosen in one tile),
    with an index out of range, and with copies but nothing to add; the call after each is
    right."""
    rows, n = 50, 4000
    base = torch.randn(rows, 3, generator=g)
    for copies in (16, 64):
        for idx in (indices("few", rows, n, g), torch.tensor([0, 1, 99] * 50),
                    torch.zeros(0, dtype=torch.int64), indices("uniform", rows, n, g)):
            vals = torch.randn(idx.numel(), 3, generator=g)
            state = torch.zeros(state_numel(16), dtype=torch.int32)
            got = narrow_index_add(base, idx, vals, copies, per_address=1, min_copies=2,
                                   hot=0, state=state)
            if int(state[1]):
                assert got.isnan().all(), "an index out of range must poison the result"
            else:
                ref = base.double().index_add(0, idx, vals.double())
                assert float((got.double() - ref).norm() / ref.norm()) < TOL[torch.float32]
                assert idx.numel() == 0 or state[0] > 1, state  # contended: copies
            left = zeroed(torch.device("cpu"), (copies - 1) * rows * 3)
            assert not left.any(), f"{int(left.count_nonzero())} scratch elements left nonzero"


def int32s(g) -> int:
    """int32 values summed in int32, narrow rows and rows of 100: equal to torch's
    index_add (sums past 2**31 wrap as its do), plain, on copies, with hot rows; the copies
    left zero; refused options."""
    cases = 0
    for rows, shape, n in ((300, (), 5003), (40, (1,), 2001), (57, (3,), 1500),
                           (20, (16,), 999), (40, (100,), 600)):
        for dist in ("uniform", "hot", "few"):
            for big in (False, True):
                base = torch.randint(-1000, 1000, (rows, *shape), generator=g,
                                     dtype=torch.int32)
                idx = indices(dist, rows, n, g)
                idx[::7] -= rows
                lo, hi = (1 << 30, (1 << 31) - 1) if big else (-8, 9)
                vals = torch.randint(lo, hi, (n, *shape), generator=g, dtype=torch.int32)
                ref = base.index_add(0, idx % rows, vals)
                itype = torch.int32 if big else torch.int64
                for rule in ((1, 256, 0), (8, 1, 0), (4, 1, 16), (1, 64, 16)):
                    state = torch.full((state_numel(rule[2]),), -7, dtype=torch.int32)
                    got = narrow_index_add(base, idx.to(itype), vals, rule[0],
                                           per_address=rule[1], min_copies=2, hot=rule[2],
                                           hot_min=4, hot_adds=rule[1], state=state)
                    assert got.dtype == torch.int32 and torch.equal(got, ref), \
                        (rows, shape, dist, big, rule)
                    p, bad, nhot = state[:3].tolist()
                    assert bad == 0 and 1 <= p <= rule[0], state
                    if rule[2] and dist != "uniform":
                        assert nhot > 0, (dist, state)
                    if rule[1] == 1 and rule[0] > 1 and dist == "uniform":
                        assert p > 1, state  # contended: copies
                    if rule[0] > 1:
                        left = zeroed(torch.device("cpu"), (rule[0] - 1) * base.numel())
                        assert not left.any(), "int32 copies left nonzero"
                    cases += 1
    for base, vals, options, word in (
            (torch.zeros(4, 4), torch.ones(3, 4, dtype=torch.int32), {}, "torch.float32"),
            (torch.zeros(4, 4, dtype=torch.int32), torch.ones(3, 4, dtype=torch.int32),
             {"local": 2}, "local"),
            (torch.zeros(4, 4, dtype=torch.int32), torch.ones(3, 4, dtype=torch.int32),
             {"half_adds": True}, "half_adds")):
        try:
            narrow_index_add(base, torch.tensor([0, 1, 2]), vals, 1, **options)
            raise AssertionError(f"int32 values with {word} must be refused")
        except ValueError as e:
            assert word in str(e), e
    return cases


def main() -> None:
    g = torch.Generator().manual_seed(0)
    cases = 0
    # (rows, row shape, indices); () is 1-D values
    for rows, shape, n in ((300, (), 5003), (40, (1,), 2001), (57, (3,), 1500),
                           (20, (16,), 999), (40, (100,), 600)):
        for dist in ("uniform", "hot", "few"):
            for dtype in TOL:
                base = torch.randn(rows, *shape, generator=g).to(dtype)
                idx = indices(dist, rows, n, g)
                idx[::7] -= rows  # negative indices count from the end
                vals = torch.randn(n, *shape, generator=g).to(dtype)
                ref = base.double().index_add(0, idx % rows, vals.double())
                for itype in (torch.int64, torch.int32):
                    # (copies, adds an address, hot rows): plain; copies; hot rows + copies;
                    # hot rows (each of the "few" rows takes about 330 adds: over 64)
                    for rule in ((1, 256, 0), (8, 1, 0), (4, 1, 16), (1, 64, 16)):
                        state = torch.full((state_numel(rule[2]),), -7, dtype=torch.int32)
                        got = narrow_index_add(base, idx.to(itype), vals, rule[0],
                                               per_address=rule[1], min_copies=2,
                                               hot=rule[2], hot_min=4, hot_adds=rule[1],
                                               state=state)
                        err = float((got.double() - ref).norm() / ref.norm())
                        assert got.dtype == dtype and got.shape == base.shape and \
                            err < TOL[dtype], (rows, shape, dist, dtype, itype, rule, err)
                        p, bad, nhot = state[:3].tolist()
                        hot = set(state[3:3 + nhot].tolist())
                        assert bad == 0 and 1 <= p <= rule[0], state
                        if rule[2]:  # the plan names the rows that take most of the sample
                            want = {rows // 3} if dist == "hot" else \
                                {1, rows - 1, rows // 2} if dist == "few" else set()
                            assert want <= hot and (dist != "uniform" or rows < 64 or
                                                    not hot), (dist, rows, hot)
                        if rule[1] == 1 and rule[0] > 1 and dist == "uniform":
                            assert p > 1, state  # contended: copies
                        cases += 1
    # ten rows of 9% each: copies take them where allowed, else they are hot rows
    idx = torch.randint(0, 1000, (20000,), generator=g)
    few = torch.rand(20000, generator=g) < 0.9
    idx[few] = torch.randint(0, 10, (int(few.sum()),), generator=g)
    base, vals = torch.randn(1000, generator=g), torch.randn(20000, generator=g)
    ref = base.double().index_add(0, idx, vals.double())
    for copies, want_copies in ((8, True), (1, False)):
        state = torch.zeros(state_numel(16), dtype=torch.int32)
        got = narrow_index_add(base, idx, vals, copies, per_address=512, min_copies=2,
                               hot_adds=1024, state=state)
        assert float((got.double() - ref).norm() / ref.norm()) < TOL[torch.float32]
        p, _, nhot = state[:3].tolist()
        assert (p > 1 and nhot == 0) if want_copies else (p == 1 and nhot >= 5), state
    # about 1,800 adds an address: copies bring them under ``spread`` (up to the most copies)
    for spread, want_p in ((1024, 2), (256, 8), (64, 16)):
        state = torch.zeros(state_numel(16), dtype=torch.int32)
        got = narrow_index_add(base, idx, vals, 16, per_address=512, min_copies=2,
                               hot_adds=1 << 20, spread=spread, state=state)
        assert float((got.double() - ref).norm() / ref.norm()) < TOL[torch.float32]
        assert state[0] == want_p, (spread, state)
    # up to 64 copies allowed: _sum reads few copies in one tile, many in steps
    for spread, fit in ((64, True), (8, False)):
        state = torch.zeros(state_numel(16), dtype=torch.int32)
        got = narrow_index_add(base, idx, vals, 64, per_address=512, min_copies=2,
                               hot_adds=1 << 20, spread=spread, state=state)
        assert float((got.double() - ref).norm() / ref.norm()) < TOL[torch.float32]
        assert (2 <= state[0] <= 33) if fit else state[0] == 64, (spread, state)
    # every add on 64 rows (256 each), but the strided sample sees each of them once: its
    # pairs with the second sample show the contention (by itself it would say one copy)
    n = 64 * 256
    idx = torch.randint(0, 64, (n,), generator=g)
    idx[::n // 64] = torch.arange(64)
    base, vals = torch.randn(1000, generator=g), torch.randn(n, generator=g)
    ref = base.double().index_add(0, idx, vals.double())
    state = torch.zeros(state_numel(16), dtype=torch.int32)
    got = narrow_index_add(base, idx, vals, 16, min_copies=2, state=state)
    assert float((got.double() - ref).norm() / ref.norm()) < TOL[torch.float32]
    assert state[0] == 4, state  # about 256 adds an address: 4 copies bring them under 64
    narrow_index_add(base, idx, vals, 16, min_copies=2, state=state, pair_sample=0)
    assert state[0] == 1, state  # the first sample alone sees no pair
    try:  # a second sample shorter than the first would share entries with it
        narrow_index_add(base, idx, vals, 16, pair_sample=32)
        raise AssertionError("a second sample of 32 indices must be refused")
    except ValueError as e:
        assert "pair_sample=32" in str(e), e
    try:  # more rows can take 2 of 64 samples than 16 hot rows hold
        narrow_index_add(base, idx, vals, 8, hot=16, hot_min=2)
        raise AssertionError("hot rows that cannot hold every candidate must be refused")
    except ValueError as e:
        assert "hot_min=2" in str(e), e
    try:  # the state holds the hot rows and the planner's copy of its sample
        narrow_index_add(base, idx, vals, 16, state=state[:state_numel(16) - 1])
        raise AssertionError("a state too short for the plan must be refused")
    except ValueError as e:
        assert "state holds" in str(e) and str(state_numel(16)) in str(e), e
    got = narrow_index_add(base, idx, vals, 16, min_copies=2, state=state, pair_sample=128)
    assert float((got.double() - ref).norm() / ref.norm()) < TOL[torch.float32]
    assert state[0] == 4, state  # a longer second sample sees the same contention
    # an infinity and a NaN stay in their own rows: plain, copies, hot rows
    base, idx = torch.randn(57, 3, generator=g), indices("hot", 57, 1500, g)
    for dtype in TOL:
        vals = torch.randn(1500, 3, generator=g).to(dtype)
        vals[5, 2], vals[9, 1] = float("inf"), float("nan")
        vals[idx == 57 // 3] = float("-inf")  # the hot row
        ref = base.double().index_add(0, idx, vals.double())
        for rule in ((1, 256, 0), (8, 1, 0), (1, 64, 16)):
            got = narrow_index_add(base.to(dtype), idx, vals, rule[0], per_address=rule[1],
                                   min_copies=2, hot=rule[2], hot_min=4,
                                   hot_adds=rule[1])
            err = finite_error(got, ref, (dtype, rule))
            assert err < TOL[dtype], (dtype, rule, err)
    cases += plans(g)
    cases += int32s(g)
    half_adds(g)
    own_adds(g)
    local_sums(g)
    column_blocks(g)
    scratch_left_zero(g)
    out = narrow_index_add(torch.zeros(4, 2), torch.tensor([0, 1, 99]), torch.ones(3, 2), 2)
    assert out.isnan().all(), "an index out of range must poison the result"
    out = narrow_index_add(torch.zeros(4), torch.tensor([0, -9]), torch.ones(2), 1)
    assert out.isnan().all(), "an index out of range must poison the result"
    print(f"ok {cases}")


if __name__ == "__main__":
    main()
