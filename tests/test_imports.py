"""The ``commrt`` packages import one way: no cycles, and every module imports alone.

An import inside a function counts like one at the top of the module: a lazy import that
closes a cycle hides the cycle from the interpreter, not from the design.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# folder -> import name, as ``[tool.setuptools.package-dir]`` in pyproject.toml
PACKAGE_DIRS = {"commrt": "comm", "commrt.dispatch": "dispatch",
                "commrt.symm_mem": "symm_mem", "commrt.tuning_tables": "tuning_tables"}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Import name -> (file, whether it is a package's ``__init__``)."""
    mods = {}
    for name, folder in PACKAGE_DIRS.items():
        base = ROOT / folder
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if "__pycache__" in parts:
                continue
            is_pkg = parts[-1] == "__init__"
            mod = ".".join([name, *parts[:-1]] if is_pkg else [name, *parts])
            mods[mod] = (path, is_pkg)
    return mods


def _targets(mod: str, is_pkg: bool, node: ast.Import | ast.ImportFrom, known) -> list[str]:
    """The commrt modules an import statement of ``mod`` loads (``from P import x``: the
    module ``P.x`` if there is one, else ``P``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    if node.level:
        base = mod.split(".")[: len(mod.split(".")) - (not is_pkg) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    out = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known else prefix
           for a in node.names]
    return [t for t in out if t in known]


def import_graph() -> dict[str, dict[str, int]]:
    """Module -> {commrt module it imports: line of the first such import}."""
    known = _modules()
    graph: dict[str, dict[str, int]] = {}
    for mod, (path, is_pkg) in known.items():
        edges = graph.setdefault(mod, {})
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for t in _targets(mod, is_pkg, node, known):
                    if t != mod:
                        edges.setdefault(t, node.lineno)
    return graph


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (as its modules, first repeated last) per edge that closes one."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []
    cycles = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for t in sorted(graph.get(m, {})):
            if state.get(t) == 1:
                cycles.append(path[path.index(t):] + [t])
            elif t not in state:
                visit(t)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return cycles


def _describe(cycle: list[str], graph) -> str:
    """``a (line 3) -> b (line 7) -> a``: each module with the line of its import."""
    steps = zip(cycle[:-1], cycle[1:], strict=True)
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in steps) + f" -> {cycle[-1]}"


def test_package_dirs_match_pyproject():
    tomllib = pytest.importorskip("tomllib")
    with open(ROOT / "pyproject.toml", "rb") as f:
        dirs = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    assert dirs == PACKAGE_DIRS


def test_no_import_cycles():
    graph = import_graph()
    assert "commrt.fx.overlap" in graph and "commrt.dispatch.dispatcher" in graph
    cycles = find_cycles(graph)
    assert not cycles, "import cycles in commrt:\n" + "\n".join(
        _describe(c, graph) for c in cycles)


def test_find_cycles_reports_lazy_import_cycle():
    graph = {"a": {"b": 3}, "b": {"c": 9}, "c": {"a": 40}, "d": {"a": 1}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert _describe(["a", "b", "a"], {"a": {"b": 3}, "b": {"a": 7}}) == \
        "a (line 3) -> b (line 7) -> a"


# Third-party modules loaded once before the forks, so each child pays for commrt alone.
_DRIVER = textwrap.dedent("""
    import os, sys
    import torch, torch._dynamo, torch.distributed, torch.fx
    import triton, triton.language
    failed = []
    for name in sys.argv[1:]:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                __import__(name)
            except BaseException as e:
                print(f"{name}: {type(e).__name__}: {e}", flush=True)
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if status:
            failed.append(name)
    sys.exit(1 if failed else 0)
""")


@pytest.mark.skipif(sys.platform == "win32", reason="forks a process per module")
def test_each_module_imports_alone(tmp_path):
    """Each module imported first, in a process that has imported no commrt module."""
    mods = sorted(_modules())
    proc = subprocess.run([sys.executable, "-c", _DRIVER, *mods], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"modules that fail to import alone:\n{proc.stdout}" \
        f"{proc.stderr[-2000:]}"
