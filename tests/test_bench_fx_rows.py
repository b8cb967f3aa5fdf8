"""``bench_fx_overlap.py --rows``: each entry becomes the options of one commrt.fx row."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_fx_overlap as bench  # noqa: E402


def test_a_row_spec_gives_its_options_in_bytes():
    assert bench._row("ce, budget=4096,no_reorder,cap=128") == {
        "commrt": True, "ce": True, "budget": 4096 << 20, "no_reorder": True,
        "cap": 128 << 20}
    assert bench._row("ctas=8,carveout=8,no_hoist") == {
        "commrt": True, "ctas": 8, "carveout": 8, "no_hoist": True}
    assert bench._row("gather,no_reorder") == {"commrt": True, "gather": True,
                                               "no_reorder": True}
    assert bench._row("nccl") == {"commrt": True, "nccl": True}


@pytest.mark.parametrize("spec", ["budget", "budget=4G", "ce=1", "ctas=", "sms=4", "gather=2"])
def test_an_unknown_or_incomplete_entry_is_refused_by_name(spec):
    with pytest.raises(SystemExit, match="--rows: unknown entry"):
        bench._row(spec)


def test_the_grid_covers_every_level_of_every_factor_at_least_twice():
    import argparse

    from commrt.dispatch.profile import DeviceProfile
    from commrt.fx.cost import CostModel

    for i, levels in enumerate(({16, 64, 256}, {256 << 10, 1 << 20, 8 << 20},
                                {"fp32", "bf16"}, set(bench.COMPUTE))):
        seen = [cell[i] for cell in bench.GRID_DP]
        assert set(seen) == levels and all(seen.count(v) >= 2 for v in levels)
    assert all(n * size <= 512 << 20 for n, size, _, _ in bench.GRID_DP)
    prof = DeviceProfile("nvidia", "sm90-h200", "NVIDIA H200", 132, 141 << 30, 2, "nvlink",
                         True, False, "nvml")
    args = argparse.Namespace(grid_tp_layers=4, grid_tp_tokens=4096, grid_tp_hidden=4096,
                              grid_tp_inter=16384)
    cells = bench._grid_cells(args, CostModel(prof))
    assert len(cells) == len(bench.GRID_DP) + len(bench.GRID_TP)
    dp = [c for c in cells if c["kind"] == "dp"]
    assert all((c["matmuls"] == 0) == (c["compute"] == "none") for c in dp)
    assert all(c["room"] for c in dp if c["compute"] == "heavy")
    assert not any(c["room"] for c in dp if c["compute"] != "heavy")


def test_late_and_no_defer_rows_move_the_waits():
    """``late``: every wait after all the compute its users allow; ``no_defer``: no wait
    deferred. On a gradient synchronisation as Inductor orders it (all-reduces and updates
    first, ``reorder_for_locality``), with an H200's tables."""
    import torch
    import torch.distributed as dist
    from test_fx_buckets import grad_sync
    from torch._inductor.fx_passes.post_grad import reorder_for_locality
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from commrt.dispatch.profile import DeviceProfile
    from commrt.fx.overlap import overlap_and_bucket

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=0, world_size=2, store=FakeStore())
    try:
        n, step = 16, grad_sync(16, 8, dist.group.WORLD)
        h200 = DeviceProfile("nvidia", "sm90-h200", "NVIDIA H200", 132, 141 << 30, 2,
                             "nvlink", True, False, "nvml")

        def placed(defer):
            with torch._subclasses.FakeTensorMode():
                args = [torch.empty(2048, 2048, dtype=torch.bfloat16) for _ in range(2)] + \
                    [torch.empty(1 << 19, dtype=torch.bfloat16) for _ in range(2 * n)]
                gm = make_fx(step, tracing_mode="fake")(*args)
            reorder_for_locality(gm.graph)
            with defer:
                report = overlap_and_bucket(gm, profile=h200)
            order = list(gm.graph.nodes)
            last_mm = max(i for i, x in enumerate(order) if x.target == torch.ops.aten.mm.default)
            waits = [i for i, x in enumerate(order)
                     if x.target == torch.ops._c10d_functional.wait_tensor.default]
            return report, waits, last_mm

        report, waits, last_mm = placed(bench._defer({}))
        assert waits and min(waits) < last_mm  # the pass: just in time, by the tables
        report, waits, last_mm = placed(bench._defer({"late": True}))
        assert report.deferred and min(waits) > last_mm
        report, waits, last_mm = placed(bench._defer({"no_defer": True}))
        assert report.deferred == 0
    finally:
        dist.destroy_process_group()
