"""Tables, the dispatcher's decisions and eligibility (multicast gating included), on the CPU."""

import copy
import dataclasses
import json

import pytest
import torch

from commrt import config
from commrt.dispatch import table as tbl
from commrt.dispatch.dispatcher import Dispatcher, Facts, Query, decide, why_not
from commrt.dispatch.profile import DeviceProfile
from commrt.errors import CommrtError, ConfigError

KIB = 1024
PROFILE = DeviceProfile("nvidia", "sm90-h200", "NVIDIA H200", 132, 141 << 30, 2, "nvlink",
                        True, False, "nvml")


def choice(algo, us, **cfg):
    return {"algorithm": algo, "config": cfg, "us": us}


def table_data(**over):
    data = {
        "schema": 1, "generation": "sm90-h200", "world_size": 2,
        "provenance": {"device": "NVIDIA H200", "torch": "2.11", "date": "2026-11-21",
                       "command": "commrt tune", "commrt": "0.1.0"},
        "ops": {"all_reduce": {
            "graph": [
                {"max_bytes": 64 * KIB, "ranking": [choice("one_shot_push", 4.0, block=1024),
                                                     choice("one_shot", 7.0),
                                                     choice("nccl", 9.0)]},
                {"max_bytes": 1024 * KIB, "ranking": [choice("symm_two_shot", 10.0),
                                                       choice("two_shot", 11.0),
                                                       choice("nccl", 17.0)]},
                {"max_bytes": 64 * 1024 * KIB, "ranking": [choice("two_shot", 200.0, blocks=132),
                                                            choice("nccl", 250.0)]},
            ],
            "eager": [{"max_bytes": 64 * 1024 * KIB, "ranking": [choice("nccl", 60.0)]}],
        }},
    }
    data.update(over)
    return data


def facts(env=None, table=True, **over):
    base = dict(profile=PROFILE, world_size=2, config=config.load(env or {}),
                table=tbl.parse(table_data()) if table else None, multicast_ptr=False,
                multicast_env_off=True,
                symm_ops=frozenset({"one_shot_all_reduce", "two_shot_all_reduce_",
                                    "multimem_all_reduce_"}),
                workspace_bytes=64 << 20, push_bytes=1 << 20)
    base.update(over)
    return Facts(**base)


def q(nbytes, dtype=torch.bfloat16, **kw):
    return Query(nbytes, dtype, mode=kw.pop("mode", "graph"), **kw)


# ----- tables ----------------------------------------------------------------------------
@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.update(schema=2), "schema"),
    (lambda d: d.pop("provenance"), "provenance"),
    (lambda d: d["provenance"].pop("command"), "missing command"),
    (lambda d: d.update(world_size=1), "world_size"),
    (lambda d: d["ops"]["all_reduce"]["graph"][0]["ranking"][0].update(algorithm="fast"),
     "algorithm 'fast'"),
    (lambda d: d["ops"]["all_reduce"]["graph"][1].update(max_bytes=1), "ascending"),
    (lambda d: d["ops"]["all_reduce"]["graph"][0]["ranking"][0].update(us=-1), "positive"),
    (lambda d: d["ops"]["all_reduce"].update(weird=[]), "expected modes"),
    (lambda d: d["ops"].update(broadcast={}), "unknown op"),
    (lambda d: d["ops"].update(all_gather={"graph": [{"max_bytes": 1, "ranking": [
        choice("two_shot", 1.0)]}]}), "'two_shot' is not one of ag_push"),
])
def test_schema_errors_name_the_place(mutate, needle):
    data = copy.deepcopy(table_data())
    mutate(data)
    with pytest.raises(ConfigError) as exc:
        tbl.parse(data, "t.json")
    assert "t.json" in str(exc.value) and needle in str(exc.value)


def test_bad_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        tbl.load_file(str(bad))
    other = tmp_path / "h100.json"
    other.write_text(json.dumps(table_data(generation="sm90-h100")))
    with pytest.raises(ConfigError, match="measured for sm90-h100"):
        tbl.find("sm90-h200", 2, str(other))


def test_shipped_tables_parse_and_carry_provenance():
    import importlib.resources

    files = [f for f in importlib.resources.files("commrt.tuning_tables").iterdir()
             if f.name.endswith(".json")]
    for f in files:
        t = tbl.parse(json.loads(f.read_text()), f.name)
        assert t.provenance["measured_by"] == "commrt tune"
        assert f.name == tbl.shipped_name(t.generation, t.world_size)
    assert tbl.find("sm90-unknown", 2) is None
    for ws in (2, 4):  # measured on the lent 2- and 4-GPU H200 machines
        assert tbl.find("sm90-h200", ws).world_size == ws


def test_prediction_interpolates_measured_points():
    t = tbl.parse(table_data())
    assert t.predict_us("all_reduce", "graph", "nccl", 64 * KIB) == 9.0
    mid = t.predict_us("all_reduce", "graph", "nccl", (64 * KIB + 1024 * KIB) // 2)
    assert 9.0 < mid < 17.0
    assert t.predict_us("all_reduce", "graph", "multimem", 1) is None


# ----- decisions -------------------------------------------------------------------------
@pytest.mark.parametrize("nbytes,algo", [
    (16, "one_shot_push"), (64 * KIB, "one_shot_push"), (64 * KIB + 16, "symm_two_shot"),
    (1024 * KIB, "symm_two_shot"), (1024 * KIB + 16, "two_shot"), (1 << 30, "two_shot"),
])
def test_decisions_at_every_row_boundary(nbytes, algo):
    d = decide(q(nbytes), facts())
    assert d.algorithm == algo
    assert "sm90-h200/ws2 graph table" in d.reason


def test_row_config_travels_with_the_decision():
    assert dict(decide(q(4096), facts()).config) == {"block": 1024}
    assert dict(decide(q(1 << 30), facts()).config) == {"blocks": 132}


def test_dtype_the_measured_best_lacks_falls_to_the_next_measured():
    d = decide(q(512 * KIB, torch.float16), facts())
    assert d.algorithm == "two_shot" and "skipped symm_two_shot" in d.reason


def test_odd_sizes_skip_torch_ops():
    d = decide(q(512 * KIB + 2), facts())
    assert d.algorithm == "two_shot" and "multiple of 16" in d.reason


def test_a_comm_empty_tensor_passes_over_algorithms_that_cannot_reduce_in_place():
    data = table_data()
    data["ops"]["all_reduce"]["eager"] = [{"max_bytes": 4096 * KIB, "ranking": [
        choice("one_shot", 16.0), choice("two_shot", 17.0), choice("nccl", 30.0)]}]
    f = dataclasses.replace(facts(), table=tbl.parse(data))
    assert decide(q(2048 * KIB, mode="eager"), f).algorithm == "one_shot"
    d = decide(q(2048 * KIB, mode="eager", resident=True), f)
    assert d.algorithm == "two_shot" and "skipped one_shot" in d.reason
    forced = facts(env={"COMMRT_ALGO": "one_shot"})  # forcing it still runs it
    assert decide(q(2048 * KIB, mode="eager", resident=True), forced).algorithm == "one_shot"
    disp = Dispatcher(f)  # residency is part of the cache key
    assert disp.decide(2048 * KIB, torch.bfloat16, "sum", "eager").algorithm == "one_shot"
    assert disp.decide(2048 * KIB, torch.bfloat16, "sum", "eager",
                       resident=True).algorithm == "two_shot"


def test_modes_have_their_own_rows():
    assert decide(q(4096, mode="eager"), facts()).algorithm == "nccl"


def test_non_sum_ops_and_cpu_tensors_go_to_the_process_group():
    assert decide(q(4096, op="max"), facts()).algorithm == "nccl"
    d = decide(q(4096, device_type="cpu"), facts())
    assert d.algorithm == "nccl" and "cpu" in d.reason
    assert decide(q(4096, dtype=torch.int32), facts()).algorithm == "nccl"


def test_a_kind_the_table_lacks_takes_the_untuned_rule_and_says_so():
    d = decide(q(4096, kind="all_reduce_residual_rmsnorm", row=2048), facts())
    assert d.algorithm == "one_shot"
    assert "sm90-h200/ws2 (its table has no all_reduce_residual_rmsnorm graph rows)" in d.reason


def test_blocked_custom_kernels_say_why():
    d = decide(q(4096), facts(custom_blocked="not every pair has peer access"))
    assert d.algorithm == "nccl" and "peer access" in d.reason


def test_disable_switches_off_one_algorithm_and_all():
    d = decide(q(4096), facts({"COMMRT_DISABLE": "one_shot_push"}))
    assert d.algorithm == "one_shot"
    for n in (16, 512 * KIB, 1 << 30):
        assert decide(q(n), facts({"COMMRT_DISABLE": "all"})).algorithm == "nccl"


def test_forced_algorithm_runs_or_says_why_not():
    assert decide(q(1 << 20), facts({"COMMRT_ALGO": "one_shot"})).algorithm == "one_shot"
    # forced, it still runs with the launch config the table measured for it at that size
    assert decide(q(4096), facts({"COMMRT_ALGO": "one_shot_push"})).config == {"block": 1024}
    assert decide(q(4096), facts({"COMMRT_ALGO": "one_shot_push"}, table=False)).config == {}
    with pytest.raises(ConfigError, match="exceeds the 1048576 B push slots"):
        decide(q(2 << 20), facts({"COMMRT_ALGO": "one_shot_push"}))
    with pytest.raises(ConfigError, match="dtype torch.float16"):
        decide(q(4096, torch.float16), facts({"COMMRT_ALGO": "symm_two_shot"}))
    with pytest.raises(ConfigError, match="peer access"):
        decide(q(4096), facts({"COMMRT_ALGO": "two_shot"}, custom_blocked="no peer access"))
    with pytest.raises(ConfigError, match="workspace"):
        decide(q(128 << 20), facts({"COMMRT_ALGO": "symm_two_shot"}))


def test_untuned_generation_gets_the_conservative_rule():
    f = facts(table=False)
    small, big = decide(q(64 * KIB), f), decide(q(64 * KIB + 16), f)
    assert small.algorithm == "one_shot" and "untuned sm90-h200/ws2" in small.reason
    assert big.algorithm == "nccl" and "untuned" in big.reason


def test_world_size_limits():
    assert why_not("one_shot", q(4096), facts(world_size=8)) is None
    assert "world size 9" in why_not("one_shot", q(4096), facts(world_size=9))


# ----- multicast gating (multimem is never run on the lent machines) -----------------------
def test_multimem_needs_both_a_multicast_pointer_and_the_env_switch_unset():
    assert "TORCH_SYMM_MEM_DISABLE_MULTICAST" in why_not(
        "multimem", q(4096), facts(multicast_ptr=True, multicast_env_off=True))
    assert "no multicast pointer" in why_not(
        "multimem", q(4096), facts(multicast_ptr=False, multicast_env_off=False))
    assert why_not("multimem", q(4096), facts(multicast_ptr=True, multicast_env_off=False)) \
        is None


def test_missing_multicast_disables_only_multimem():
    f = facts(multicast_ptr=False, multicast_env_off=True)
    for name in ("one_shot_push", "one_shot", "two_shot", "symm_one_shot", "symm_two_shot"):
        assert why_not(name, q(4096), f) is None
    with pytest.raises(ConfigError, match="MULTICAST"):
        decide(q(4096), facts({"COMMRT_ALGO": "multimem"}))


def test_dispatcher_caches_decisions_and_reads_configs():
    disp = Dispatcher(facts())
    a = disp.decide(4096, torch.bfloat16, "sum", "graph")
    assert disp.decide(4096, torch.bfloat16, "sum", "graph") is a
    assert disp.config_for("two_shot", 1 << 30) == {"blocks": 132}
    assert disp.config_for("multimem", 1 << 30) == {}
    assert disp.predict_us(1 << 30, torch.bfloat16) is not None


def test_shipped_h200_table_has_a_measured_fused_section():
    t = tbl.find("sm90-h200", 2)
    fused = t.ops["all_reduce_residual_rmsnorm"]
    assert set(fused) == {"graph", "eager"}
    # measured by the tuner: with the whole table, or later with --only fused
    made_by = t.provenance.get("fused_section", t.provenance)
    assert made_by["command"].startswith("commrt tune")
    assert all(row.ranking and row.ranking[0].us > 0 for rows in fused.values() for row in rows)


def test_tune_only_fused_keeps_the_table_in_use(tmp_path):
    """``commrt tune --only fused`` starts from the JSON of the table the group uses:
    the shipped one, or the COMMRT_TABLE file."""
    import types

    from commrt.cli import _base_table

    shipped = tbl.find("sm90-h200", 2)
    comm = types.SimpleNamespace(facts=types.SimpleNamespace(table=shipped))
    base = _base_table(comm)
    assert tbl.parse(base, "again").digest == shipped.digest
    path = tmp_path / "t.json"
    base["provenance"]["note"] = "a copy"
    path.write_text(json.dumps(base))
    comm.facts.table = tbl.load_file(str(path))
    assert _base_table(comm)["provenance"]["note"] == "a copy"
    comm.facts.table = None
    with pytest.raises(CommrtError, match="no table"):
        _base_table(comm)


def test_program_tiles_and_the_tuners_one_round_twins():
    from types import SimpleNamespace

    from commrt.bench import _same_as_one_round
    from commrt.symm_mem.two_shot_push import program_tiles

    # 64 MiB of bf16 over 2 ranks: 16 Mi elements a shard, 4096 tiles of 4096
    assert program_tiles(1 << 25, 2, block=4096, blocks=528) == 8
    assert program_tiles(1 << 25, 2, block=4096, blocks=1056) == 4
    assert program_tiles(7, 2, block=4096, blocks=528) == 1
    comm = SimpleNamespace(workspace=SimpleNamespace(data_bytes=64 << 20, world=2))
    cfg = dict(block=4096, warps=16, blocks=528)
    assert not _same_as_one_round(comm, "two_shot_push", dict(cfg, round_tiles=2), 64 << 20,
                                  torch.bfloat16)
    assert _same_as_one_round(comm, "two_shot_push", dict(cfg, round_tiles=8), 64 << 20,
                              torch.bfloat16)
    assert _same_as_one_round(comm, "two_shot_push", dict(cfg, round_tiles=1), 1 << 20,
                              torch.bfloat16)
    assert not _same_as_one_round(comm, "two_shot_push", dict(cfg, round_tiles=0), 1 << 20,
                                  torch.bfloat16)
    assert not _same_as_one_round(comm, "two_shot", dict(cfg, round_tiles=1), 1 << 20,
                                  torch.bfloat16)


def test_eager_tuning_ranks_by_the_faster_of_two_passes(monkeypatch):
    """A host slowdown in one pass must not reorder a size; a variant that sums wrong in
    either pass is left out."""
    from commrt import bench

    passes = {  # (size, pass) -> {algorithm: µs}; None: wrong in that pass
        (4096, 0): {"one_shot": 20.0, "two_shot": 12.0, "nccl": 30.0},
        (4096, 1): {"one_shot": 10.0, "two_shot": 12.5, "nccl": None},
        (8192, 0): {"one_shot": 11.0, "two_shot": 14.0, "nccl": 25.0},
        (8192, 1): {"one_shot": 18.0, "two_shot": 19.0, "nccl": 26.0},
    }
    seen: list = []

    def fake(comm, nbytes, dtype, best_cfg, raw, excluded):
        k = (nbytes, sum(1 for s in seen if s == nbytes))
        seen.append(nbytes)
        return {a: (us, {}) for a, us in passes[k].items() if us is not None}

    monkeypatch.setattr(bench, "_eager_times", fake)
    rows = bench._tune_eager(None, [4096, 8192], torch.bfloat16, {}, [], [], None)
    assert seen == [4096, 8192, 8192, 4096]
    assert [r["max_bytes"] for r in rows] == [4096, 8192]
    assert [(c["algorithm"], c["us"]) for c in rows[0]["ranking"]] == \
        [("one_shot", 10.0), ("two_shot", 12.0)]
    assert [(c["algorithm"], c["us"]) for c in rows[1]["ranking"]] == \
        [("one_shot", 11.0), ("two_shot", 14.0), ("nccl", 25.0)]


# ----- all-gather and reduce-scatter ------------------------------------------------------
def with_sections(f, **sections):
    """``f`` with the all-reduce table plus measured all_gather / reduce_scatter sections."""
    data = table_data()
    data["ops"].update(sections)
    return dataclasses.replace(f, table=tbl.parse(data))


AG_SECTION = {"graph": [
    {"max_bytes": 256 * KIB, "ranking": [choice("ag_push", 5.0, block=512), choice("ag_bw", 8.0),
                                         choice("nccl", 20.0)]},
    {"max_bytes": 64 << 20, "ranking": [choice("ag_bw", 90.0, blocks=64), choice("nccl", 95.0)]}]}
RS_SECTION = {"graph": [
    {"max_bytes": 64 << 20, "ranking": [choice("symm_rs", 40.0), choice("rs_push", 50.0,
                                                                         round_tiles=2),
                                        choice("nccl", 60.0)]}]}
SYMM_OPS = frozenset({"reduce_scatter_out", "multimem_all_gather_out", "one_shot_all_reduce"})


def cq(kind, nbytes, dtype=torch.bfloat16, **kw):
    return q(nbytes, dtype, kind=kind, **kw)


def test_untuned_collectives_take_a_small_custom_window_and_say_untuned():
    f = facts(table=False)
    # all-gather: the gathered output within 64 KiB; reduce-scatter: its whole input
    small, big = decide(cq("all_gather", 64 * KIB), f), decide(cq("all_gather", 128 * KIB), f)
    assert small.algorithm == "ag_push" and "untuned sm90-h200/ws2" in small.reason
    assert big.algorithm == "nccl" and "beyond the 64 KiB custom window" in big.reason
    assert decide(cq("reduce_scatter", 32 * KIB), f).algorithm == "rs_pull"
    assert decide(cq("reduce_scatter", 32 * KIB + 16), f).algorithm == "nccl"
    ws8 = facts(table=False, world_size=8)
    assert decide(cq("reduce_scatter", 8 * KIB), ws8).algorithm == "rs_pull"
    assert decide(cq("reduce_scatter", 16 * KIB), ws8).algorithm == "nccl"
    # a table without these sections: the same rule, saying which section is missing
    d = decide(cq("all_gather", 4 * KIB), facts())
    assert d.algorithm == "ag_push" and "its table has no all_gather graph rows" in d.reason


def test_collectives_follow_their_own_table_sections():
    f = with_sections(facts(symm_ops=SYMM_OPS), all_gather=AG_SECTION,
                      reduce_scatter=RS_SECTION)
    d = decide(cq("all_gather", 128 * KIB), f)
    assert (d.algorithm, dict(d.config)) == ("ag_push", {"block": 512})
    assert "256 KiB row of the sm90-h200/ws2 graph table" in d.reason
    assert decide(cq("all_gather", 1 << 20), f).algorithm == "ag_bw"
    assert decide(cq("reduce_scatter", 1 << 20), f).algorithm == "symm_rs"
    # the measured best lacks this dtype / size: the next measured one
    assert decide(cq("all_gather", 4 * KIB, torch.int32), f).algorithm == "ag_bw"
    d = decide(cq("reduce_scatter", 4 * KIB, torch.float16), f)
    assert d.algorithm == "rs_push" and dict(d.config) == {"round_tiles": 2}
    assert decide(cq("reduce_scatter", 4 * KIB + 2), f).algorithm == "rs_push"
    # eager rows missing: untuned rule for that mode
    assert "untuned" in decide(cq("all_gather", 4 * KIB, mode="eager"), f).reason


def test_collective_eligibility_reasons():
    f = facts(symm_ops=SYMM_OPS)
    assert why_not("ag_bw", cq("all_gather", 4096, torch.int64), f) is None
    assert "dtype torch.int64" in why_not("ag_push", cq("all_gather", 4096, torch.int64), f)
    assert "dtype torch.bool" in why_not("ag_bw", cq("all_gather", 4096, torch.bool), f)
    assert "op max" in why_not("rs_pull", cq("reduce_scatter", 4096, op="max"), f)
    assert "need CUDA" in why_not("rs_push", cq("reduce_scatter", 4096, device_type="cpu"), f)
    assert "world size 9" in why_not("ag_push", cq("all_gather", 4096), facts(world_size=9))
    assert "peer access" in why_not("rs_pull", cq("reduce_scatter", 4096),
                                    facts(custom_blocked="no peer access"))
    assert "not an all_gather algorithm" in why_not("two_shot", cq("all_gather", 4096), f)
    assert "not an all_reduce algorithm" in why_not("ag_bw", q(4096), f)
    # PyTorch's ops: present, dtype, world size, workspace, alignment, multicast
    assert why_not("symm_rs", cq("reduce_scatter", 4096), f) is None
    assert "not in this torch" in why_not("symm_rs", cq("reduce_scatter", 4096), facts())
    assert "float16" in why_not("symm_rs", cq("reduce_scatter", 4096, torch.float16), f)
    assert "2, 4, 8" in why_not("symm_rs", cq("reduce_scatter", 4096),
                                facts(symm_ops=SYMM_OPS, world_size=6))
    assert "input exceeds" in why_not("symm_rs", cq("reduce_scatter", 40 << 20), f)
    assert "multiple of 16" in why_not("symm_rs", cq("reduce_scatter", 4104), f)
    assert "no multicast pointer" in why_not("multimem_ag", cq("all_gather", 4096),
                                             facts(symm_ops=SYMM_OPS, multicast_env_off=False))
    mc = facts(symm_ops=SYMM_OPS, multicast_ptr=True, multicast_env_off=False)
    assert why_not("multimem_ag", cq("all_gather", 4096), mc) is None
    assert "world * 16" in why_not("multimem_ag", cq("all_gather", 4112), mc)


def test_collectives_are_forced_and_disabled_per_operation():
    f = facts({"COMMRT_ALGO": "all_gather:ag_bw,reduce_scatter:rs_push"})
    assert decide(cq("all_gather", 4096), f).reason == "forced by COMMRT_ALGO"
    assert decide(cq("all_gather", 1 << 30), f).algorithm == "ag_bw"
    assert decide(cq("reduce_scatter", 4096), f).algorithm == "rs_push"
    assert decide(q(4096), f).algorithm == "one_shot_push"  # the all-reduce: its table
    bare = facts({"COMMRT_ALGO": "two_shot"}, table=False)
    assert decide(q(4096), bare).algorithm == "two_shot"
    assert decide(cq("all_gather", 4096), bare).algorithm == "ag_push"  # untouched
    with pytest.raises(ConfigError, match="ALGO='all_gather:ag_push' cannot run.*torch.int32"):
        decide(cq("all_gather", 4096, torch.int32), facts({"COMMRT_ALGO": "ag_push"}))
    assert decide(cq("reduce_scatter", 4096), facts({"COMMRT_ALGO": "nccl"})).algorithm == \
        "nccl"
    off = facts({"COMMRT_DISABLE": "ag_push"}, table=False)
    d = decide(cq("all_gather", 4096), off)
    assert d.algorithm == "nccl" and "switched off by COMMRT_DISABLE" in d.reason
    assert decide(cq("reduce_scatter", 4096), off).algorithm == "rs_pull"
    for kind in ("all_gather", "reduce_scatter"):
        assert decide(cq(kind, 4096), facts({"COMMRT_DISABLE": "all"})).algorithm == "nccl"


def test_non_sum_reduce_scatter_and_cpu_collectives_go_to_the_process_group():
    d = decide(cq("reduce_scatter", 4096, op="avg"), facts(table=False))
    assert d.algorithm == "nccl" and "op avg" in d.reason
    assert decide(cq("all_gather", 4096, device_type="cpu"), facts()).algorithm == "nccl"


def test_dispatcher_predicts_collectives_from_their_sections():
    disp = Dispatcher(with_sections(facts(), all_gather=AG_SECTION))
    assert disp.predict_us(256 * KIB, torch.bfloat16, kind="all_gather") == 5.0
    assert disp.config_for("ag_bw", 1 << 20, kind="all_gather") == {"blocks": 64}
    assert disp.predict_us(4096, torch.bfloat16, kind="reduce_scatter") is None
