"""Stream memory operations (``cuStreamWriteValue32`` / ``cuStreamWaitValue32``): a
flag write and a flag wait that the GPU's front end performs in stream order, on no SM.

Used by ``copy_engine``'s barriers, so that a collective whose data the copy engines move
never waits for an SM behind a matmul. Loaded from the driver library by ``ctypes``;
``available()`` is False where the driver lacks them (or on a machine without CUDA).
"""

from __future__ import annotations

import ctypes
import functools

WAIT_EQ = 0x1  # CU_STREAM_WAIT_VALUE_EQ
WRITE_DEFAULT = 0x0  # CU_STREAM_WRITE_VALUE_DEFAULT: a memory fence before the write


@functools.cache
def _driver():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    fns = {}
    for name in ("cuStreamWriteValue32", "cuStreamWaitValue32"):
        fn = getattr(lib, name + "_v2", None) or getattr(lib, name, None)
        if fn is None:
            return None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        fn.restype = ctypes.c_int
        fns[name] = fn
    return fns


def available() -> bool:
    return _driver() is not None


def _check(res: int, what: str) -> None:
    if res != 0:
        raise RuntimeError(f"{what} failed with CUresult {res}")


def write32(stream: int, addr: int, value: int) -> None:
    """Enqueue ``*addr = value`` on ``stream`` (after a fence: earlier work is visible)."""
    _check(_driver()["cuStreamWriteValue32"](stream, addr, value, WRITE_DEFAULT),
           "cuStreamWriteValue32")


def wait32(stream: int, addr: int, value: int) -> None:
    """Enqueue a wait on ``stream`` until ``*addr == value``."""
    _check(_driver()["cuStreamWaitValue32"](stream, addr, value, WAIT_EQ),
           "cuStreamWaitValue32")
