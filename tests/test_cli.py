"""A user error in ``commrt``'s CLI is one ``commrt: error:`` line and exit status 2,
never a traceback: in the command's own process and in the ranks it spawns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "tuning_tables" / "sm90-h200_ws2.json"


def commrt_cli(tmp_path: Path, *args: str, timeout: float = 60,
               **env: str) -> subprocess.CompletedProcess:
    """``commrt *args`` in a clean environment plus ``env``, outside the repository root
    (there ``comm/`` would import as ``comm``)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("COMMRT_")}
    return subprocess.run([sys.executable, "-c", "from commrt.cli import main; main()", *args],
                          cwd=tmp_path, env={**base, **env}, capture_output=True, text=True,
                          timeout=timeout)


def assert_user_error(proc: subprocess.CompletedProcess, *names: str) -> None:
    """Exit status 2, no traceback, and one error line, the last, naming each of ``names``."""
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert err and err[-1].startswith("commrt: error: "), proc.stderr
    assert sum("error" in line.lower() for line in err) == 1, proc.stderr
    assert all(n in err[-1] for n in names), err[-1]


def _bad_json(tmp_path: Path) -> str:
    (tmp_path / "bad.json").write_text('{"schema": 1, "generation": ')
    return str(tmp_path / "bad.json")


def _wrong_schema(tmp_path: Path) -> str:
    (tmp_path / "schema.json").write_text(json.dumps({"schema": 1, "rows": []}))
    return str(tmp_path / "schema.json")


@pytest.mark.parametrize("var, value, names", [
    ("COMMRT_ALGO", lambda p: "bogus", ("COMMRT_ALGO", "'bogus'", "two_shot")),
    ("COMMRT_MAX_CUSTOM_BYTES", lambda p: "lots", ("COMMRT_MAX_CUSTOM_BYTES", "64MB")),
    ("COMMRT_TABLE", lambda p: "/nonexistent.json", ("COMMRT_TABLE", "/nonexistent.json")),
    ("COMMRT_TABLE", _bad_json, ("COMMRT_TABLE", "bad.json", "not valid JSON")),
    ("COMMRT_TABLE", _wrong_schema, ("COMMRT_TABLE", "schema.json", "generation")),
], ids=["algo", "bytes", "table-missing", "table-json", "table-schema"])
def test_bad_variable_is_one_line_naming_it(tmp_path, var, value, names):
    assert_user_error(commrt_cli(tmp_path, "info", **{var: value(tmp_path)}), *names)


def test_unknown_flag_is_one_line_naming_it(tmp_path):
    assert_user_error(commrt_cli(tmp_path, "bench", "--bogus"), "--bogus")


@pytest.mark.parametrize("args, names", [
    (("bench", "--min-bytes", "lots"), ("--min-bytes", "'lots'")),
    (("bench", "--modes", "fast"), ("--modes", "graph,eager")),
    (("tune", "--nproc", "0"), ("--nproc",)),
], ids=["size", "modes", "nproc"])
def test_bad_flag_value_is_one_line_naming_it(capsys, args, names):
    from commrt.cli import main

    with pytest.raises(SystemExit) as stop:
        main(list(args))
    err = capsys.readouterr().err
    assert_user_error(subprocess.CompletedProcess(args, stop.value.code, "", err), *names)


@pytest.mark.skipif(torch.cuda.is_available(), reason="spawns the two gloo ranks of a CPU host")
def test_table_refused_in_spawned_ranks_is_one_line(tmp_path):
    """A table for other hardware is refused only once the ranks know their group; the
    ranks report it and the command prints it once."""
    table = json.loads(SHIPPED.read_text())
    table["generation"] = "gfx000-none"
    path = tmp_path / "other.json"
    path.write_text(json.dumps(table))
    proc = commrt_cli(tmp_path, "bench", "--max-bytes", "4KiB", "--nproc", "2", timeout=120,
                      COMMRT_TABLE=str(path))
    assert_user_error(proc, "COMMRT_TABLE", "other.json", "gfx000-none")


@pytest.mark.skipif(torch.cuda.is_available(), reason="spawns the two gloo ranks of a CPU host")
def test_bench_op_all_gather_and_reduce_scatter_on_two_gloo_ranks(tmp_path):
    """``commrt bench --op`` times the process group and ``auto`` per output size, checked
    (#wrong 0), and writes JSON and Markdown; ``--op`` takes only known collectives."""
    for op in ("all_gather", "reduce_scatter"):
        out = tmp_path / f"{op}.json"
        proc = commrt_cli(tmp_path, "bench", "--op", op, "--min-bytes", "1KiB", "--max-bytes",
                          "2KiB", "--all", "--nproc", "2", "--out", str(out), timeout=180)
        assert proc.returncode == 0, proc.stderr[-3000:]
        lines = [ln.split() for ln in proc.stdout.splitlines() if ln.strip()[:1].isdigit()]
        assert [ln[0] for ln in lines] == ["1024", "2048"], proc.stdout
        assert all(ln[4] == "nccl" and ln[-2:] == ["0", "-"] for ln in lines), proc.stdout
        saved = json.loads(out.read_text())
        assert saved["op"] == op and set(saved["results"][0]["us"]) == {"gloo", "auto"}
        assert f"# {op.replace('_', '-')} on 2x" in out.with_suffix(".md").read_text()
    assert_user_error(commrt_cli(tmp_path, "bench", "--op", "broadcast"), "--op", "broadcast")


@pytest.mark.skipif(torch.cuda.is_available(), reason="spawns the two gloo ranks of a CPU host")
def test_info_prints_every_operations_decisions(tmp_path):
    proc = commrt_cli(tmp_path, "info", timeout=120,
                      COMMRT_ALGO="reduce_scatter:nccl")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for needle in ("all_gather decisions (output bytes", "reduce_scatter decisions",
                   " all_gather:", "  ag_push", "  rs_push", '"forced": {"reduce_scatter"'):
        assert needle in proc.stdout, proc.stdout
