"""The process-group path end to end: two gloo processes on the CPU."""

import ranks_gloo
import spawn


def test_all_reduce_semantics_match_float64_sums():
    res = spawn.run(ranks_gloo.semantics, 2)
    for r in res:
        assert r["bad"] == []
        assert r["plan"][0] == "nccl" and "gloo" in r["plan"][1]
        assert r["maxplan"][0] == "nccl"


def test_torch_compile_fullgraph_traces_the_op_module_call_and_method():
    res = spawn.run(ranks_gloo.compiled, 2)
    for r in res:
        assert r.pop("value") is True
        assert all(r.values()), r


def test_check_mode_raises_on_every_rank():
    res = spawn.run(ranks_gloo.check_mode, 2, env={"COMMRT_CHECK": "1"})
    for r in res:
        assert "rank 0: shape (4, 8)" in r["first"] and "rank 1: shape (4, 9)" in r["first"]
        assert "float64" in r["second"]
        assert r["ok"] == [2.0, 2.0, 2.0]
        assert "weight must be the same on every rank" in r["third"] and r["fused_ok"]


def test_bad_input_gets_a_clear_error():
    res = spawn.run(ranks_gloo.bad_input, 2)
    for r in res:
        assert "meta" in r["meta"] and "gloo" in r["meta"]
        assert "out must match" in r["out"]
        assert "no symmetric workspace" in r["empty"]


def test_rank_disagreement_falls_back_with_one_warning():
    res = spawn.run(ranks_gloo.disagree, 2, env_by_rank=[{"COMMRT_MAX_CUSTOM_BYTES": "1MiB"},
                                                       {"COMMRT_MAX_CUSTOM_BYTES": "2MiB"}])
    for r in res:
        assert r["blocked"].startswith("ranks disagree on") and "config" in r["blocked"]
        assert r["sum"] == [2.0] * 4
    assert len(res[0]["warned"]) == 1 and res[1]["warned"] == []


def test_fx_fusion_pass_keeps_numerics_with_two_ranks():
    res = spawn.run(ranks_gloo.fx_fused_numerics, 2)
    assert all(r["fused"] == 2 and r["close"] for r in res), res


def test_fx_overlap_pass_keeps_numerics_with_two_ranks():
    res = spawn.run(ranks_gloo.fx_overlap_numerics, 2)
    for r in res:
        assert r["bitwise"] and r["close"] and r["before"] == 4, r


def test_data_parallel_bench_step_is_bitwise_the_plain_compile():
    res = spawn.run(ranks_gloo.dp_training_step, 2)
    for r in res:
        assert r["bitwise"] and r["close"] and r["buckets"] >= 1 and r["hoisted"] >= 1, r


def test_tensor_parallel_bench_step_is_the_unsharded_models_and_compiles():
    res = spawn.run(ranks_gloo.tp_training_step, 2)
    for r in res:  # 2 layers x (2 forward + 2 backward all-reduces)
        assert r["grads"] and r["compiled"] and r["collectives"] == 8, r


def test_fx_bucketed_all_gather_and_reduce_scatter_are_exact():
    res = spawn.run(ranks_gloo.fx_bucket_gather_scatter, 2)
    assert all(r["buckets"] == 2 and r["equal"] for r in res), res


def test_tuner_gate_passes_the_process_group_and_catches_a_kernel_that_never_sums():
    res = spawn.run(ranks_gloo.tuner_gate, 3)
    for r in res:
        assert r["pg"] == [0, 0, 0]
        assert r["noop"] > 4097 * 3 // 2  # summed over ranks: most elements of each rank
        assert r["forced"] == ("forced by COMMRT_ALGO", "auto", True)
        # two passes, ascending then descending; rows ascending
        assert r["eager"] == ([4096, 8192], ["nccl", "nccl"], True,
                              [(4096, 0), (8192, 0), (8192, 0), (4096, 0)])


def test_copy_engine_group_and_the_pass_on_it_match_float64_and_ranks_agree():
    from multiprocessing import shared_memory

    from commrt.symm_mem.workspace import Workspace

    data = 64 * 1024  # 16 Ki float32 elements: the 40,000-element case takes three pieces
    blocks = [shared_memory.SharedMemory(create=True, size=Workspace.total_bytes(2, data, 256))
              for _ in range(2)]
    try:
        res = spawn.run(ranks_gloo.copy_engine_group, 2, [b.name for b in blocks], data,
                        env={"TRITON_INTERPRET": "1"})
    finally:
        for b in blocks:
            b.close()
            b.unlink()
    for r in res:
        assert r["backend"] == "commrt_ce"
        assert r["bad"] == [] and r["err"] == 0
        assert "supports sum and avg" in r["max"]
        assert r["gather_ok"] == [True] * 3
        # world size 2: exchanges (the landing buffers grew at the larger totals)
        assert r["exchange_ok"] == [True] * 4 and r["landing_grown"] >= 2
        refused = r["exchange_refused"]
        assert len(refused) == 3 and "not 16-aligned" in refused[0]
        assert "outside a 1024 B landing buffer" in refused[1] and "one dtype" in refused[2]
        assert r["compiled_close"], r["compiled_err"]
        assert r["compiled_moved"] == 3 - r["compiled_buckets"]
        assert sum(r["compiled_exchanged"]) == 3 * 8 * 32  # every element, once
    assert res[0]["results"] == res[1]["results"]  # bitwise: each chunk summed once
    assert res[0]["compiled"] == res[1]["compiled"]
