"""nccl_symm (NCCL's symmetric kernels) on the CPU: the probe, agreement across ranks, the
dispatcher's eligibility and fallbacks, the config, table schema, bench and tuner."""

import dataclasses
from types import SimpleNamespace

import pytest
import torch
import torch.distributed._symmetric_memory as symm
from test_dispatch import PROFILE, facts, q, table_data

from commrt import bench, config
from commrt import communicator as comm_mod
from commrt.dispatch import table as tbl
from commrt.dispatch.dispatcher import decide, why_not
from commrt.errors import ConfigError
from commrt.symm_mem import nccl_symm

KIB, MIB = 1024, 1 << 20
NEW = (2, 28, 9)  # the lent H200 machines' NCCL


def ok_facts(env=None, table=True, **over):
    """Facts of a group where nccl_symm can run (NCCL-backed workspace, agreed);
    ``table``: True (test_dispatch's table), False (none) or a Table."""
    over.setdefault("nccl_symm_blocked", "")
    f = facts(env, table=table is True, **over)
    return f if isinstance(table, bool) else dataclasses.replace(f, table=table)


def symm_table(first="nccl_symm"):
    data = table_data()
    data["ops"]["all_reduce"]["graph"][0]["ranking"].insert(0, {"algorithm": first,
                                                                "config": {}, "us": 3.0})
    return tbl.parse(data)


# ----- the per-rank probe and the agreement --------------------------------------------
@pytest.mark.parametrize("version,api,backend,registered,needle", [
    ((2, 26, 5), True, "NCCL", True, "NCCL 2.26.5 (symmetric kernels need 2.27"),
    (None, True, "NCCL", True, "no NCCL"),
    (NEW, False, "NCCL", True, "no set_backend"),
    (NEW, True, "CUDA", True, "backend is CUDA, not NCCL (set COMMRT_SYMM_BACKEND=nccl"),
    (NEW, True, "NCCL", False, "registration failed"),
])
def test_probe_names_what_is_missing(version, api, backend, registered, needle, monkeypatch):
    monkeypatch.setattr(nccl_symm, "nccl_version", lambda: version)  # whatever torch has
    assert needle in nccl_symm.probe(backend, registered, api=api)


def test_probe_passes_on_nccl_2_27_with_a_registered_nccl_workspace():
    assert nccl_symm.probe("NCCL", True, version=(2, 27, 3), api=True) == ""
    assert nccl_symm.probe("NCCL", True, version=NEW, api=True) == ""


def test_agreement_names_the_rank_that_cannot():
    assert nccl_symm.agree(["", "", ""]) == ""
    assert nccl_symm.agree(["", "registration failed"]) == "registration failed on rank 1"
    assert nccl_symm.agree(["old", "old"]) == "old"  # the same everywhere: as it is
    got = nccl_symm.agree(["", "NCCL 2.26.5 (x)", "registration failed", ""])
    assert got == "NCCL 2.26.5 (x) on rank 1 (and 1 more ranks)"


def test_use_nccl_backend_switches_only_a_process_not_yet_using_symmetric_memory(monkeypatch):
    state = {"backend": "CUDA", "used": False}

    def set_backend(name):
        if state["used"] and name != state["backend"]:
            raise RuntimeError("Backend can not be changed after use.")
        state["backend"] = name

    monkeypatch.setattr(nccl_symm, "nccl_version", lambda: NEW)
    monkeypatch.setattr(symm, "set_backend", set_backend)
    monkeypatch.setattr(symm, "get_backend", lambda device: state["backend"])
    dev = torch.device("cpu")
    assert nccl_symm.use_nccl_backend(dev) == "" and state["backend"] == "NCCL"
    assert nccl_symm.use_nccl_backend(dev) == ""  # already NCCL: nothing to do
    state.update(backend="CUDA", used=True)  # e.g. the user's own symm_mem.empty ran first
    why = nccl_symm.use_nccl_backend(dev)
    assert "could not switch" in why and "from CUDA" in why and "can not be changed" in why
    monkeypatch.setattr(nccl_symm, "nccl_version", lambda: (2, 21, 5))
    state["used"] = False
    assert "2.21.5" in nccl_symm.use_nccl_backend(dev) and state["backend"] == "CUDA"


# ----- dispatcher ----------------------------------------------------------------------
def test_eligible_only_where_the_agreed_probe_passed_on_nvlink():
    assert why_not("nccl_symm", q(64 * KIB), ok_facts()) is None
    assert why_not("nccl_symm", q(64 * KIB), facts()) == "not probed"  # default: off
    agreed = "registration failed on rank 1"
    assert why_not("nccl_symm", q(64 * KIB), facts(nccl_symm_blocked=agreed)) == agreed


@pytest.mark.parametrize("over,query,needle", [
    (dict(profile=dataclasses.replace(PROFILE, link="none", full_mesh=False)), q(4096),
     "linked by none"),  # mixed hosts
    (dict(profile=dataclasses.replace(PROFILE, link="pcie")), q(4096), "linked by pcie"),
    (dict(custom_blocked="process group only"), q(4096), "process group only"),
    ({}, q(65 * MIB), "exceeds the 67108864 B workspace"),
    ({}, q(4096, torch.float64), "dtype torch.float64"),
    ({}, q(4096, op="max"), "op max"),
    ({}, q(4096, device_type="cpu"), "on cpu"),
    ({}, q(4096, kind="all_reduce_residual_rmsnorm", row=1024), "ours only"),
])
def test_fallbacks_say_why(over, query, needle):
    assert needle in why_not("nccl_symm", query, ok_facts(**over))


def test_disable_forcing_and_the_conservative_rule():
    assert "COMMRT_DISABLE" in why_not("nccl_symm", q(4096),
                                       ok_facts({"COMMRT_DISABLE": "nccl_symm"}))
    assert "nccl_symm" in config.load({"COMMRT_DISABLE": "all"}).disable
    forced = decide(q(4096), ok_facts({"COMMRT_ALGO": "nccl_symm"}))
    assert forced.algorithm == "nccl_symm" and forced.config == {}
    with pytest.raises(ConfigError, match="COMMRT_ALGO='nccl_symm' cannot run.*rank 1"):
        decide(q(4096), facts({"COMMRT_ALGO": "nccl_symm"},
                              nccl_symm_blocked="registration failed on rank 1"))
    for n in (16, 64 * KIB, MIB, 64 * MIB):  # no table: never nccl_symm
        for mode in ("graph", "eager"):
            assert decide(q(n, mode=mode), ok_facts(table=False)).algorithm != "nccl_symm"


def test_a_table_may_choose_it_and_an_ineligible_group_skips_it_with_the_reason():
    assert decide(q(4096), ok_facts(table=symm_table())).algorithm == "nccl_symm"
    d = decide(q(4096), ok_facts(table=symm_table(),
                                 nccl_symm_blocked="registration failed on rank 1"))
    assert d.algorithm == "one_shot_push"
    assert "nccl_symm: registration failed on rank 1" in d.reason
    resident = decide(q(4096, resident=True), ok_facts(table=symm_table()))
    assert resident.algorithm == "nccl_symm"  # in place on a comm.empty tensor: no copy


def test_schema_accepts_nccl_symm_and_config_names_it():
    assert symm_table().rows("all_reduce", "graph")[0].ranking[0].algorithm == "nccl_symm"
    assert config.load({"COMMRT_ALGO": "NCCL_SYMM"}).algo == "nccl_symm"
    assert config.load({}).symm_backend == "auto"
    assert config.load({"COMMRT_SYMM_BACKEND": "NCCL"}).symm_backend == "nccl"
    with pytest.raises(ConfigError, match="COMMRT_SYMM_BACKEND='nvshmem'.*auto, nccl"):
        config.load({"COMMRT_SYMM_BACKEND": "nvshmem"})


# ----- communicator: facts and agreement (mocked ranks) --------------------------------
def fake_comm(rank=0, world=2, env=None, profile=PROFILE):
    c = object.__new__(comm_mod.Communicator)
    c.rank, c.world_size, c.group, c.group_name = rank, world, None, "0"
    c.config = config.load(env or {})
    c.device, c.backend, c.profile, c.workspace = torch.device("cuda", 0), "nccl", profile, None
    return c


def fake_ws(*args, **kwargs):
    return SimpleNamespace(multicast_ptr=0, data_bytes=64 * MIB, slot_bytes=MIB)


@pytest.fixture
def new_nccl(monkeypatch):
    """This process as on the H200 machines: NCCL 2.28.9, torch with set_backend, backend
    as ``state`` says; Workspace.allocate as ``state["allocate"]``."""
    from commrt.symm_mem import workspace

    state = {"backend": "CUDA", "allocate": fake_ws}
    monkeypatch.setattr(nccl_symm, "nccl_version", lambda: NEW)
    monkeypatch.setattr(nccl_symm, "current_backend", lambda device: state["backend"])
    monkeypatch.setattr(symm, "set_backend", lambda name: state.update(backend=name))
    monkeypatch.setattr(workspace.Workspace, "allocate",
                        classmethod(lambda cls, *a: state["allocate"](*a)))
    monkeypatch.setattr(comm_mod._table, "find", lambda *a: None)
    return state


def test_facts_follow_the_backend_and_the_opt_in_switches_it(new_nccl):
    f = fake_comm()._facts()
    assert f.custom_blocked == "" and "backend is CUDA, not NCCL" in f.nccl_symm_blocked
    assert new_nccl["backend"] == "CUDA"  # never switched without COMMRT_SYMM_BACKEND=nccl
    f = fake_comm(env={"COMMRT_SYMM_BACKEND": "nccl"})._facts()
    assert new_nccl["backend"] == "NCCL" and f.nccl_symm_blocked == ""


def test_facts_of_a_failed_registration_and_of_mixed_hosts(new_nccl):
    def refuse(*a):
        raise RuntimeError("ncclCommWindowRegister failed")

    new_nccl.update(backend="NCCL", allocate=refuse)
    f = fake_comm()._facts()
    assert "ncclCommWindowRegister failed" in f.custom_blocked
    assert f.nccl_symm_blocked == "registration failed"
    mixed = dataclasses.replace(PROFILE, link="none", full_mesh=False)
    f = fake_comm(profile=mixed)._facts()
    assert "peer access on one host" in f.nccl_symm_blocked == f.custom_blocked


def scripted_gather(per_rank):
    def all_gather_object(out, mine, group=None):
        for r, fn in enumerate(per_rank):
            out[r] = fn(mine)
    return all_gather_object


def test_one_ranks_registration_failure_rules_it_out_on_every_rank(monkeypatch):
    c = fake_comm()
    f = ok_facts()
    other = lambda mine: (mine[0], "registration failed")  # noqa: E731
    monkeypatch.setattr(comm_mod.dist, "all_gather_object",
                        scripted_gather([lambda mine: mine, other]))
    agreed = c._agree(f)
    assert agreed.nccl_symm_blocked == "registration failed on rank 1"
    assert agreed.custom_blocked == "" and agreed.table is f.table  # the rest stays
    assert why_not("nccl_symm", q(4096), agreed) == "registration failed on rank 1"
    assert why_not("two_shot", q(4096), agreed) is None


def test_a_rank_without_a_workspace_is_named_when_ranks_disagree(monkeypatch):
    c = fake_comm()
    f = ok_facts()
    broken = lambda mine: ((*mine[0][:2], "symmetric workspace could not be set up (X)",  # noqa: E731
                            *mine[0][3:]), "registration failed")
    monkeypatch.setattr(comm_mod.dist, "all_gather_object",
                        scripted_gather([lambda mine: mine, broken]))
    with pytest.warns(UserWarning, match="custom-kernel availability"):
        agreed = c._agree(f)
    assert "rank 1: symmetric workspace could not be set up (X)" in agreed.custom_blocked
    assert why_not("nccl_symm", q(4096), agreed).startswith("ranks disagree")


# ----- bench and tuner -----------------------------------------------------------------
def test_bench_has_a_nccl_symm_column_beside_the_process_groups():
    comm = SimpleNamespace(backend="nccl", device=torch.device("cuda"))
    labels = [v.label for v in bench.standard_variants(comm)]
    assert labels[0] == "nccl" and {"nccl_symm", "nccl_symm@ws"} <= set(labels)
    plain = {v.label: v for v in bench.standard_variants(comm, include_ws=False)}
    assert plain["nccl_symm"] == bench.Variant("nccl_symm", "nccl_symm", as_user=True)


def test_the_tuner_measures_it_without_a_launch_config_and_its_table_parses(monkeypatch):
    comm = SimpleNamespace(device=torch.device("cuda"), facts=ok_facts(table=False))
    timed = []

    def measure(comm, v, nbytes, dtype, mode):
        timed.append((v.algorithm, v.config))
        return (3.0 if v.algorithm == "nccl_symm" else 5.0), 0

    monkeypatch.setattr(bench, "measure", measure)
    monkeypatch.setattr(bench, "has_pdl", lambda device: False)
    monkeypatch.setattr(bench, "_same_as_one_round", lambda *a: False)
    monkeypatch.setattr(bench, "_tune_eager", lambda *a: [
        {"max_bytes": 4096, "ranking": [{"algorithm": "nccl_symm", "config": {}, "us": 7.0}]}])
    section, raw, excluded = bench.tune(comm, [4096], torch.bfloat16)
    assert ("nccl_symm", None) in timed and not excluded
    assert section["graph"][0]["ranking"][0] == {"algorithm": "nccl_symm", "config": {},
                                                 "us": 3.0}
    data = table_data()
    data["ops"] = {"all_reduce": section}
    assert decide(q(4096), ok_facts(table=tbl.parse(data))).algorithm == "nccl_symm"


# ----- the call: copy in, the process group's all-reduce, copy out ------------------------
def test_the_call_reduces_in_the_workspace_and_skips_copies_for_comm_empty(monkeypatch):
    from commrt import custom
    from commrt.symm_mem.workspace import Workspace

    seen = []

    def pg_all_reduce(t, group=None):  # two ranks holding the same data
        seen.append((t.data_ptr(), group))
        t.mul_(2)

    monkeypatch.setattr(custom.pg, "all_reduce", pg_all_reduce)
    ws = Workspace([torch.zeros(Workspace.total_bytes(1, 4096, 256), dtype=torch.uint8)], 0,
                   4096, 256)
    x = torch.arange(7, dtype=torch.float32)
    out = torch.empty_like(x)
    custom.run("nccl_symm", ws, x, out, {}, 1.0, "group")
    assert torch.equal(out, 2 * x) and torch.equal(x, torch.arange(7.0))  # input kept
    assert seen[-1] == (ws.data_start, "group")  # reduced at the start of the workspace
    resident = ws.empty((7,), torch.float32)
    resident.copy_(x)
    custom.run("nccl_symm", ws, resident, resident, {}, 1.0, "group")
    assert torch.equal(resident, 2 * x) and seen[-1][0] == resident.data_ptr()
