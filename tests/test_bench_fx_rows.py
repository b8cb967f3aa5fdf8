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
