"""COMMRT_* parsing: every variable, every error names the variable, value and choices."""

import pytest

from commrt import config
from commrt.errors import ConfigError


def test_defaults():
    cfg = config.load({})
    assert cfg.algo == "auto" and cfg.disable == frozenset() and cfg.table is None
    assert cfg.max_custom_bytes == 64 * 1024**2 and not cfg.log and not cfg.check
    assert cfg.spin_timeout == 30.0


@pytest.mark.parametrize("text,value", [
    ("4096", 4096), ("64KB", 64_000), ("64KiB", 65536), ("64MB", 64_000_000),
    ("1GiB", 1 << 30), ("2 mib", 2 << 20), ("1.5KiB", 1536),
])
def test_sizes(text, value):
    assert config.parse_bytes(text) == value
    assert config.load({"COMMRT_MAX_CUSTOM_BYTES": text}).max_custom_bytes == value


@pytest.mark.parametrize("env,needle", [
    ({"COMMRT_ALGO": "twoshot"}, "COMMRT_ALGO='twoshot'"),
    ({"COMMRT_ALGO": "twoshot"}, "one_shot_push"),
    ({"COMMRT_DISABLE": "one_shot,bogus"}, "unknown algorithm bogus"),
    ({"COMMRT_DISABLE": "all,two_shot"}, "'all' cannot be combined"),
    ({"COMMRT_DISABLE": "nccl"}, "cannot be disabled"),
    ({"COMMRT_TABLE": "/nonexistent/table.json"}, "COMMRT_TABLE"),
    ({"COMMRT_MAX_CUSTOM_BYTES": "lots"}, "COMMRT_MAX_CUSTOM_BYTES='lots'"),
    ({"COMMRT_MAX_CUSTOM_BYTES": "0"}, "greater than zero"),
    ({"COMMRT_MAX_CUSTOM_BYTES": "1.5B"}, "whole number"),
    ({"COMMRT_LOG": "maybe"}, "COMMRT_LOG='maybe'"),
    ({"COMMRT_CHECK": "2"}, "expected one of 1, 0"),
    ({"COMMRT_SPIN_TIMEOUT": "-1"}, "COMMRT_SPIN_TIMEOUT"),
    ({"COMMRT_SPIN_TIMEOUT": "soon"}, "number of seconds"),
    ({"COMMRT_ALGO_TYPO": "1"}, "not a commrt variable"),
    ({"COMMRT_FX_COMM_CTAS": "few"}, "COMMRT_FX_COMM_CTAS='few'"),
    ({"COMMRT_FX_COMM_CTAS": "65"}, "0 (no limit) to 64"),
    ({"COMMRT_ALGO": "one_shot", "COMMRT_DISABLE": "one_shot"}, "drop it from one"),
    ({"COMMRT_ALGO": "all_gather:two_shot"}, "'two_shot' is not an all_gather algorithm"),
    ({"COMMRT_ALGO": "gather:ag_bw"}, "unknown operation 'gather'"),
    ({"COMMRT_ALGO": "ag_bw,all_gather:ag_push"}, "all_gather is named twice"),
    ({"COMMRT_ALGO": "all_gather:bogus"}, "all_gather: ag_push, ag_bw"),
    ({"COMMRT_ALGO": "reduce_scatter:rs_push", "COMMRT_DISABLE": "rs_push"}, "names rs_push"),
    ({"COMMRT_DISABLE": "ag_bw,rs_bogus"}, "unknown algorithm rs_bogus"),
])
def test_every_bad_value_raises_a_config_error_that_says_what_is_wrong(env, needle):
    with pytest.raises(ConfigError) as exc:
        config.load(env)
    assert needle in str(exc.value)


def test_disable_all_keeps_only_the_process_group():
    cfg = config.load({"COMMRT_DISABLE": "all"})
    assert "nccl" not in cfg.disable and {"one_shot", "two_shot", "multimem"} <= cfg.disable


def test_forcing_is_per_operation():
    bare = config.load({"COMMRT_ALGO": "two_shot"})
    assert bare.algo == "two_shot" and bare.algo_for("all_gather") == "auto"
    assert bare.algo_for("all_reduce_residual_rmsnorm") == "two_shot"
    pairs = config.load({"COMMRT_ALGO": "all_gather:ag_bw, reduce_scatter:RS_PUSH,all_reduce:auto"})
    assert pairs.algo == "auto" and pairs.forced == (("all_gather", "ag_bw"),
                                                     ("reduce_scatter", "rs_push"))
    mixed = config.load({"COMMRT_ALGO": "rs_pull,all_reduce:one_shot"})
    assert mixed.algo_for("reduce_scatter") == "rs_pull" and mixed.algo == "one_shot"
    every = config.load({"COMMRT_ALGO": "nccl"})
    assert {every.algo_for(op) for op in config.OPS} == {"nccl"}
    assert config.load({"COMMRT_ALGO": "auto"}).forced == ()
    off = config.load({"COMMRT_DISABLE": "all"}).disable
    assert {"ag_push", "ag_bw", "rs_pull", "rs_push", "symm_rs", "multimem_ag"} <= off
    assert config.load({"COMMRT_DISABLE": "ag_push"}).disable == {"ag_push"}


def test_bools_and_forced_algorithm(tmp_path):
    table = tmp_path / "t.json"
    table.write_text("{}")
    cfg = config.load({"COMMRT_LOG": "yes", "COMMRT_CHECK": "1", "COMMRT_ALGO": "Two_Shot",
                       "COMMRT_TABLE": str(table)})
    assert cfg.log and cfg.check and cfg.algo == "two_shot" and cfg.table == str(table)
    assert config.load({}).fx_comm_ctas == 0
    assert config.load({"COMMRT_FX_COMM_CTAS": "8"}).fx_comm_ctas == 8
    assert config.load({"COMMRT_FX_COPY_ENGINE": "1"}).fx_copy_engine is True
    assert config.load({"COMMRT_FX_COPY_ENGINE": "off"}).fx_copy_engine is False
    assert config.load({}).fx_copy_engine is False  # off unless asked
    assert config.load({"COMMRT_FX_COPY_ENGINE": "AUTO"}).fx_copy_engine is None
    with pytest.raises(ConfigError, match=r"COMMRT_FX_COPY_ENGINE='sometimes'.*expected auto"):
        config.load({"COMMRT_FX_COPY_ENGINE": "sometimes"})


def test_multicast_switch_is_read_never_written():
    assert config.multicast_disabled_by_env({"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"})
    assert not config.multicast_disabled_by_env({})
    assert not config.multicast_disabled_by_env({"TORCH_SYMM_MEM_DISABLE_MULTICAST": "0"})


def test_torchrun_detection():
    assert config.torchrun_env({}) is None
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "LOCAL_RANK": "1"}
    assert config.torchrun_env(env) == {"rank": 1, "world_size": 2, "local_rank": 1}
