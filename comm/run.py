"""Run an unmodified script with torch's all-reduces going through commrt.

    torchrun --nproc-per-node 2 -m commrt.run train.py --lr 3e-4
    python -m commrt.run -m my_package.serve --port 8000

``commrt.patch()`` first, then the script as ``__main__``, exactly as ``python train.py
...`` would run it (``sys.argv``, ``sys.path[0]``, ``__file__``). ``COMMRT_PATCH=0`` runs
it through the same command unpatched (for an A/B comparison); ``COMMRT_LOG=1`` prints
``commrt.stats()`` on rank 0 at exit.
"""

from __future__ import annotations

import os
import runpy
import sys

USAGE = "usage: python -m commrt.run (script.py | -m module) [args ...]"


def _prepare() -> None:
    from commrt import config, stats
    from commrt.patch import patch

    cfg = config.get()
    if cfg.patch:
        patch()
    if cfg.log:
        stats.print_at_exit()


def main(argv: list[str] | None = None) -> None:
    """Patch, then run ``argv`` (default: this command's arguments) as ``__main__``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print(USAGE, file=sys.stderr if argv[:1] != ["-h"] else sys.stdout)
        raise SystemExit(0 if argv[:1] in (["-h"], ["--help"]) else 2)
    _prepare()
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return
    script = argv[0]
    if not os.path.isfile(script):
        raise SystemExit(f"commrt.run: no such script {script!r}\n{USAGE}")
    sys.argv = argv
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
