"""The tuner's correctness gate: rounding of any summation order passes, a lost rank fails."""

import pytest
import torch

from commrt.bench import sum_bound


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("world", [2, 4, 8])
def test_ring_and_single_rounding_pass_a_dropped_rank_fails(dtype, world):
    g = torch.Generator().manual_seed(world)
    xs = [torch.randn(100_003, generator=g).to(dtype) for _ in range(world)]
    exact = sum(x.double() for x in xs)
    mag = sum(x.double().abs() for x in xs)
    ring = xs[0]
    for x in xs[1:]:  # every partial sum rounded to dtype, as NCCL's ring does
        ring = (ring.float() + x.float()).to(dtype)
    once = sum(x.float() for x in xs).to(dtype)  # fp32 accumulation, one rounding
    bound = sum_bound(mag, dtype, world)
    assert bool(((ring.double() - exact).abs() <= bound).all())
    assert bool(((once.double() - exact).abs() <= bound).all())
    dropped = sum(x.float() for x in xs[1:]).to(dtype)
    assert ((dropped.double() - exact).abs() > bound).double().mean() > 0.5
    stale = once.clone()
    stale[::7] = float("nan")
    assert int((~((stale.double() - exact).abs() <= bound)).sum()) == len(range(0, 100_003, 7))


def test_bench_inputs_start_at_the_rounds_offset_16_byte_aligned():
    from types import SimpleNamespace

    from commrt import bench

    comm = SimpleNamespace(device=torch.device("cpu"), rank=1)
    for dtype in (torch.bfloat16, torch.float32):
        xs = [bench._input(comm, bench.Variant("a", "a"), 1001, dtype, 3, shift=r)
              for r in range(3)]
        assert all(torch.equal(x, xs[0]) and x.numel() == 1001 for x in xs)
        assert [x.storage_offset() * x.element_size() for x in xs] == [0, 128, 256]


def test_bench_rounds_reorder_the_variants_alike_on_every_rank():
    from commrt.bench import _round_order

    labels = [f"v{i}" for i in range(12)]
    orders = [_round_order(list(labels), r) for r in range(5)]
    assert orders[0] == labels and all(sorted(o) == sorted(labels) for o in orders)
    assert orders == [_round_order(list(labels), r) for r in range(5)]  # deterministic
    before = {tuple(o[o.index("v5") - 1:o.index("v5")]) for o in orders}
    assert len(before) > 1  # v5 does not always follow the same variant


def test_eager_rounds_go_over_every_size_graph_rounds_stay_with_one(monkeypatch):
    from types import SimpleNamespace

    from commrt import bench

    timed = []
    fake = {"eager": {"a": [9, 5, 7], "b": [4, 6, 8]}, "graph": {"a": [9, 5, 7], "b": [4, 6, 8]}}

    def time_(comm, fn, mode):
        timed.append((mode, *fn))
        label, nbytes = fn
        return fake[mode][label][sum(1 for t in timed if t == (mode, label, nbytes)) - 1]

    monkeypatch.setattr(bench, "_eligible", lambda *a: True)
    monkeypatch.setattr(bench, "_wrong", lambda *a: 0)
    shifts = []

    def input_(comm, v, numel, dtype, seed, shift=0):
        shifts.append(shift)
        return numel * 4

    monkeypatch.setattr(bench, "_input", input_)
    monkeypatch.setattr(bench, "_make_call", lambda comm, v, nbytes: (v.label, nbytes))
    monkeypatch.setattr(bench, "_time", time_)
    comm = SimpleNamespace(device=torch.device("cpu"), dispatcher=SimpleNamespace(
        decide=lambda *a: SimpleNamespace(algorithm="a")))
    variants = [bench.Variant("a", "a"), bench.Variant("b", "b")]
    rows = bench.run_bench(comm, [64, 128], torch.float32, ["eager", "graph"], variants,
                           rounds=3)
    sizes = [nbytes for mode, _, nbytes in timed if mode == "eager"]
    assert sizes == [64, 64, 128, 128] * 3  # every size once a round
    sizes = [nbytes for mode, _, nbytes in timed if mode == "graph"]
    assert sizes == [64] * 6 + [128] * 6  # a size's rounds back to back
    assert shifts[-12:] == [0, 0, 1, 1, 2, 2] * 2  # fresh inputs, a new offset each round
    assert [r["us"] for r in rows] == [{"a": 5, "b": 4}] * 2 + [{"a": 7, "b": 6}] * 2
    assert [(r["mode"], r["bytes"]) for r in rows] == [("eager", 64), ("eager", 128),
                                                       ("graph", 64), ("graph", 128)]


def test_eager_timing_runs_the_calls_without_stopping_and_drops_the_first_burst():
    import time

    from commrt.timing import time_eager

    calls = []

    def fn():  # slow through the warm-up and the untimed burst, fast in the timed one
        calls.append(None)
        time.sleep(0.05 if len(calls) <= 5 + 4 else 0.001)

    us = time_eager(fn, torch.device("cpu"), iters=4, warmup=5, burst=4)
    assert len(calls) == 5 + 4 + 4  # warm-up, the untimed burst, the timed one
    assert 1_000 <= us < 20_000


def test_pair_timing_alternates_which_goes_first_and_gives_the_ratio():
    import time

    from commrt.timing import time_pair

    calls = []

    def slow():
        calls.append("a")
        time.sleep(0.004)

    def fast():
        calls.append("b")
        time.sleep(0.002)

    ratio = time_pair(slow, fast, torch.device("cpu"), "eager", burst=2, pairs=4)
    assert "".join(calls) == "aabb" "bbaa" "aabb" "bbaa"
    assert 1.5 < ratio < 2.5


def test_auto_is_paired_with_the_fastest_ordinary_variant_unless_it_is_that(monkeypatch):
    from types import SimpleNamespace

    from commrt import bench

    paired = []
    monkeypatch.setattr(bench, "_input", lambda comm, v, *a, **k: v.label)
    monkeypatch.setattr(bench, "_make_call", lambda comm, v, x: x)
    monkeypatch.setattr(bench.dist, "barrier", lambda group: None)
    monkeypatch.setattr(bench, "agree_median", lambda us, group, device: us)

    def pair(fa, fb, device, mode, burst, pairs, group):
        paired.append((fa, fb, mode, burst))
        return 1.01

    monkeypatch.setattr(bench, "time_pair", pair)
    comm = SimpleNamespace(device=torch.device("cpu"), group=None)
    chosen = {k: bench.Variant(k, k) for k in ("auto", "nccl", "x", "x@ws")}
    row = {"count": 4, "us": {"auto": 10.2, "nccl": 20.0, "x": 10.0, "x@ws": 5.0}}
    got = bench._paired(comm, row, chosen, torch.bfloat16, "eager", 30, 7)
    assert got == {"against": "x", "auto_over": 1.01, "pairs": 30, "burst": 100}
    assert paired == [("auto", "x", "eager", 100)]
    assert bench.auto_paired({"paired": got}) == "1.010 (x)"
    row["us"]["auto"] = 9.9  # auto is the fastest: nothing to pair
    assert bench._paired(comm, row, chosen, torch.bfloat16, "graph", 30, 7) is None
    assert bench.auto_paired({"paired": None}) == "-" and len(paired) == 1


def test_the_printed_table_shows_auto_timed_beside_the_fastest_other_variant():
    from commrt import bench

    rows = [{"bytes": 4096, "count": 1024, "dtype": "float32", "mode": "eager",
             "auto_algorithm": "nccl", "us": {"auto": 600.0, "nccl": 500.0}, "wrong": {},
             "paired": {"against": "nccl", "auto_over": 1.004, "pairs": 100, "burst": 4}},
            {"bytes": 8192, "count": 2048, "dtype": "float32", "mode": "eager",
             "auto_algorithm": "nccl", "us": {"auto": 400.0, "nccl": 500.0}, "wrong": {},
             "paired": None}]
    lines = bench.format_table(rows, 2).splitlines()
    assert lines[0].endswith("auto/paired")
    assert lines[2].endswith("1.004 (nccl)") and lines[3].endswith(" -")


@pytest.mark.parametrize("backend, device, hip, label", [
    ("gloo", "cpu", None, "gloo"), ("nccl", "cuda", None, "nccl"),
    ("nccl", "cuda", "6.2", "rccl"), ("cpu:gloo,cuda:nccl", "cpu", None, "gloo"),
    ("cpu:gloo,cuda:nccl", "cuda", None, "nccl"),
])
def test_bench_names_the_process_group_column_after_its_backend(monkeypatch, backend, device,
                                                                hip, label):
    from types import SimpleNamespace

    from commrt import bench

    monkeypatch.setattr(torch.version, "hip", hip)
    comm = SimpleNamespace(backend=backend, device=torch.device(device))
    assert bench.process_group_label(comm) == label
    assert bench.standard_variants(comm, include_ws=False)[0] == bench.Variant(label, "nccl")


def test_tuner_times_each_config_on_the_users_path():
    """A tuner variant with a launch config runs through ``all_reduce`` of a view whose
    decisions carry that config (an eager call then pays the host cost a user pays),
    never through ``run_algorithm``; without one the view keeps the table's config."""
    from test_dispatch import facts

    from commrt import bench

    class Comm:
        def __init__(self, f):
            self.config, self.facts, self.seen = f.config, f, []

        def all_reduce(self, x):
            self.seen.append(self.dispatcher.decide(x.numel() * x.element_size(), x.dtype,
                                                    mode="eager"))

        def run_algorithm(self, *args):
            raise AssertionError("the tuner bypassed the user's path")

    comm = Comm(facts())
    cfg = {"block": 512, "warps": 4, "blocks": 32, "pdl": 1}
    v = bench.Variant("one_shot_push", "one_shot_push", config=cfg)
    x = torch.zeros(2048, dtype=torch.bfloat16)
    call = bench._make_call(comm, v, x)
    call()
    call()
    a, b = comm.seen
    assert a is b  # decided once: the second call is one dict get
    assert (a.algorithm, dict(a.config)) == ("one_shot_push", cfg)
    assert "COMMRT_ALGO" in a.reason
    plain = bench.forced_view(comm, "one_shot_push")
    assert dict(plain.dispatcher.decide(4096, torch.bfloat16, mode="graph").config) == \
        {"block": 1024}


def test_collective_tuner_ranks_eager_rows_by_the_faster_of_two_passes(monkeypatch):
    """Graph rows keep each kernel's fastest config; eager rows reuse it and take each
    algorithm's faster time of two passes over the sizes, so a slow host moment in one
    pass does not reorder a row."""
    import collections
    import types

    from commrt import bench

    best = (("block", 1024), ("blocks", 32), ("warps", 4))
    monkeypatch.setattr(bench, "why_not", lambda name, q, f: None
                        if name in ("nccl", "ag_push", "ag_bw") else "not here")
    monkeypatch.setattr(bench, "collective_call", lambda comm, op, name, nbytes, dtype, cfg:
                        ((name, nbytes, cfg and tuple(sorted(cfg.items()))), lambda: 0))
    eager_calls = collections.Counter()

    def fake_time(comm, call, mode):
        name, nbytes, cfg = call
        if mode == "graph":
            return {"nccl": 10.0, "ag_push": 3.0 + (cfg != best), "ag_bw": 5.0}[name]
        assert name != "ag_push" or cfg == best, "eager must reuse the graph-mode best"
        eager_calls[name, nbytes] += 1
        if name == "ag_push" and nbytes == 8192 and eager_calls[name, nbytes] == 1:
            return 50.0  # a slow moment of the host, in the first pass only
        return {"nccl": 40.0, "ag_push": 7.0, "ag_bw": 9.0}[name]

    monkeypatch.setattr(bench, "_time", fake_time)
    comm = types.SimpleNamespace(device=torch.device("cuda"), facts=None)
    section, raw = bench.tune_collective(comm, "all_gather", [4096, 8192], torch.bfloat16)
    for mode, us in (("graph", 3.0), ("eager", 7.0)):
        rows = section[mode]
        assert [r["max_bytes"] for r in rows] == [4096, 8192]
        for r in rows:
            top = r["ranking"][0]
            assert (top["algorithm"], top["us"]) == ("ag_push", us)
            assert tuple(sorted(top["config"].items())) == best
    assert set(eager_calls.values()) == {2}  # every algorithm and size, twice
    assert any(m["us"] == 50.0 for m in raw)


def test_fused_tuner_config_runs_through_the_users_fused_call():
    """A fused config is timed through ``all_reduce_residual_rmsnorm`` of a view forcing
    that kernel with that config (COMMRT_ALGO forces the fused op with the all-reduce)."""
    from test_dispatch import facts

    from commrt import bench

    class Comm:
        device, world_size, rank = torch.device("cpu"), 2, 0

        def __init__(self, f):
            self.config, self.facts, self.seen = f.config, f, []

        def all_reduce_residual_rmsnorm(self, x, res, w, eps, algorithm=None):
            assert algorithm is None, "the tuner named the kernel instead of forcing it"
            self.seen.append(self.dispatcher.decide(x.numel() * x.element_size(), x.dtype,
                                                    "sum", "eager", "cuda",
                                                    bench.FUSED_KIND, x.shape[-1]))
            return x, x

    comm = Comm(facts())
    cfg = {"warps": 8, "blocks": 32, "split": 4}
    call, _ = bench.fused_call(comm, "one_shot_push", 2, 512, torch.bfloat16, config=cfg)
    call()
    (d,) = comm.seen
    assert (d.algorithm, dict(d.config)) == ("one_shot_push", cfg)
