"""All-gather and reduce-scatter through commrt on two gloo processes: torch's semantics."""

import ranks_collectives_api
import spawn


def test_all_gather_and_reduce_scatter_match_torch_bitwise():
    res = spawn.run(ranks_collectives_api.semantics, 2)
    for r in res:
        assert r["bad"] == [], r["bad"]
        assert r["strided_rs"]
        # 6 dtypes x 5 shapes x 7 spellings; sum/max/product run on gloo (avg where gloo
        # takes it, failing alike elsewhere)
        assert r["gathers"] == 6 * 5 * 7
        assert r["scatters"] >= 6 * 5 * 3 * 5
        counts = r["counts"]  # every call of ours, torch's own not
        assert counts["all_gather"] == {"nccl": 6 * 5 * 7}, counts
        assert counts["reduce_scatter"] == {"nccl": 6 * 5 * 4 * 5 + 1}, counts
        errors = r["errors"]
        assert "world size times the input's elements" in errors["ag size"], errors
        assert "output (4,) torch.float64, input (2,) torch.float32" in errors["ag dtype"]
        assert "needs the input to hold world size times the output's" in errors["rs size"]
        assert errors["rs type"].startswith("TypeError")
        assert r["plan"].startswith("nccl") and "gloo" in r["plan"], r["plan"]
        assert r["work"] not in ("NoneType", "_DoneWork")  # the process group's handle


def test_torch_compile_fullgraph_traces_the_ops_module_calls_and_methods():
    res = spawn.run(ranks_collectives_api.compiled, 2)
    for r in res:
        assert all(r.values()), r


def test_a_group_of_one_copies():
    res = spawn.run(ranks_collectives_api.world_one, 2)
    for r in res:
        assert r["ag"] and r["rs"]
        assert r["counts"] == {"all_gather": {"identity": 1},
                               "reduce_scatter": {"identity": 1}}, r["counts"]
