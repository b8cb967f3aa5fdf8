"""Run under TRITON_INTERPRET=1 (``test_fx_scatter`` starts it): the integer atomics of
``commrt::partitioned_index_put`` (``int_index_add``, and ``int_flat_index_add``'s one
element a thread into copies) on CPU tensors, equal to torch's index_add."""

import torch

import commrt.fx.scatter_ints as ints
from commrt.fx.scatter_ints import int_flat_index_add, int_index_add


def main() -> None:
    g = torch.Generator().manual_seed(0)
    cases = 0
    # (rows, row shape, indices); () is 1-D values; rows wider than a step's columns
    for rows, shape, n in ((1024, (), 5003), (3, (1,), 777), (1031, (4,), 1500),
                           (40, (100,), 999), (7, (2,), 1), (65, (1300,), 70)):
        for dtype in (torch.int64, torch.int32):
            for big in (False, True):  # big: int32 sums past 2**31
                base = torch.randint(-1000, 1000, (rows, *shape), generator=g).to(dtype)
                idx = torch.randint(0, rows, (n,), generator=g)
                idx[::7] -= rows  # negative indices count from the end
                lo, hi = (1 << 30, 1 << 31) if big else (-8, 9)
                vals = torch.randint(lo, hi, (n, *shape), generator=g).to(dtype)
                ref = base.index_add(0, idx % rows, vals)
                for itype, partitions in ((torch.int64, 1), (torch.int32, 1),
                                          (torch.int64, 8)):
                    got = int_index_add(base, idx.to(itype), vals, partitions)
                    assert got.dtype == dtype and torch.equal(got, ref), \
                        (rows, shape, dtype, big, itype, partitions)
                    cases += 1
                for itype, partitions in ((torch.int64, 1), (torch.int32, 4),
                                          (torch.int64, 8)):
                    # twice: the copies are left zero for the next call
                    for _ in range(2):
                        got = int_flat_index_add(base, idx.to(itype), vals, partitions)
                        assert got.dtype == dtype and torch.equal(got, ref), \
                            ("flat", rows, shape, dtype, big, itype, partitions)
                    cases += 1
    # several steps of columns, and several programs
    kept = ints.MAX_COLUMNS, ints.ELEMENTS
    ints.MAX_COLUMNS, ints.ELEMENTS = 32, 64
    ints._launch.cache_clear()
    base = torch.randint(-9, 9, (50, 70), generator=g)
    idx = torch.randint(0, 50, (300,), generator=g)
    vals = torch.randint(-9, 9, (300, 70), generator=g)
    assert torch.equal(int_index_add(base, idx, vals, 4), base.index_add(0, idx, vals))
    ints.MAX_COLUMNS, ints.ELEMENTS = kept
    ints._launch.cache_clear()
    cases += 1
    # the flat adds on blocks of 64 elements: a row across programs, several sum steps
    for partitions in (1, 2, 64):
        got = int_flat_index_add(base, idx, vals, partitions, block=64, warps=2)
        assert torch.equal(got, base.index_add(0, idx, vals)), ("flat blocks", partitions)
        cases += 1
    base = torch.randint(-9, 9, (8, 4), generator=g)
    assert torch.equal(int_flat_index_add(base, torch.zeros(0, dtype=torch.long),
                                          torch.zeros(0, 4, dtype=torch.int64), 4), base)
    empty = int_index_add(base, torch.zeros(0, dtype=torch.long),
                          torch.zeros(0, 4, dtype=torch.int64))
    assert torch.equal(empty, base), "no indices must leave self as it is"
    try:
        int_index_add(torch.zeros(8), torch.tensor([0]), torch.ones(1))
        raise AssertionError("float values must be refused")
    except TypeError as e:
        assert "torch.float32" in str(e), e
    print(f"ok {cases}")


if __name__ == "__main__":
    main()
