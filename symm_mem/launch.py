"""Launching a compiled Triton kernel without Triton's per-call argument binding.

Eager all-reduces are host-bound: Triton's ``kernel[grid](...)`` binds and specialises
every argument on every call. A ``Launcher`` takes a small key of exactly what Triton
specialises on (dtype, 16-byte alignment of the pointers that vary, ``n == 1`` and
``n % 16``); on a miss it compiles through the normal path and watches that one launch
(a probe): what the JIT passes to ``CompiledKernel.run``, and what that passes to the
driver's C launcher. When both match the arguments given here, later calls with the
key go straight to the C launcher with the recorded constant arguments. The caller
gives the key (``Launcher(...)(key, ...)``: the collectives), or the launcher makes it
from the kernel's signature (``call``: parameters by name; ``prepare``: grid and
constexprs fixed once, the other arguments in signature order: the scatter kernels).

Detection is by feature, not version: the JIT must launch with
``kernel.run(grid, stream, function, packed_metadata, metadata, hooks, *bound_args)``
(Triton 3.3 to 3.9 at least), and each probe must agree. Anything else takes
Triton's normal path; ``why_slow`` says why. Launch hooks (profilers) installed when
a kernel is first launched keep it on the normal path; hooks installed later are not
seen, as with Inductor's launchers. ``recording()`` hands a caller the exact launch of
one call, with tensors as addresses, so it can replay it per call shape.
"""

from __future__ import annotations

import inspect
import operator
from typing import Any

import torch

# What JITFunction.run must pass to the compiled kernel (whitespace removed).
_JIT_CALL = ("kernel.run(grid_0,grid_1,grid_2,stream,kernel.function,kernel.packed_metadata,"
             "launch_metadata,knobs.runtime.launch_enter_hook,knobs.runtime.launch_exit_hook,"
             "*bound_args.values())")


def _static_check() -> str:
    """'' when the installed Triton launches compiled kernels as the fast path expects."""
    try:
        from triton.compiler.compiler import CompiledKernel
        from triton.runtime.jit import JITFunction

        src = "".join(inspect.getsource(JITFunction.run).split())
    except Exception as exc:  # no sources shipped, or the classes moved
        return f"Triton's launch code could not be read ({type(exc).__name__}: {exc})"
    if not isinstance(inspect.getattr_static(CompiledKernel, "run", None), property):
        return "CompiledKernel.run is not a lazily built launcher"
    if _JIT_CALL not in src:
        return "JITFunction.run launches compiled kernels with an unknown argument list"
    return ""


why_slow = _static_check()
FAST = not why_slow  # tests and benches may set it False to force Triton's own path
_recording: list | None = None
_EMPTY = inspect.Parameter.empty  # a parameter without a default


def cdiv(a: int, b: int) -> int:
    """Host-side ceil division (``triton.cdiv`` is a constexpr function: microseconds a call)."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """Host-side ``triton.next_power_of_2``, without its per-call cost."""
    return 1 << max(0, n - 1).bit_length()


def int_spec(v: int) -> tuple[bool, bool, bool]:
    """What Triton specialises an int argument on: == 1, % 16 == 0, fits in int32."""
    return v == 1, v % 16 == 0, -(1 << 31) <= v < (1 << 31)


def recording() -> list:
    """Start recording launches: each later one appends ``(launch, head, tail, ptrs)``
    (replay: ``launch(*head, stream, *tail)``; ``ptrs``: the tensors' addresses) or None
    when it took Triton's path. ``stop_recording()`` ends it."""
    global _recording
    _recording = []
    return _recording


def stop_recording() -> None:
    global _recording
    _recording = None


def _slow(reason: str) -> None:
    global why_slow
    why_slow = reason


def _as_addresses(v: Any, ptrs: list) -> Any:
    """``v`` with every tensor replaced by its address (tuples followed), collecting them."""
    if isinstance(v, torch.Tensor):
        ptrs.append(v.data_ptr())
        return ptrs[-1]
    if type(v) is tuple:
        return tuple(_as_addresses(x, ptrs) for x in v)
    return v


def _same(a: Any, b: Any) -> bool:
    if type(a) is tuple and type(b) is tuple:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a is b


def _idle(hook: Any) -> bool:
    """No launch hook to call: None, or an empty ``HookChain`` (Triton 3.5+)."""
    return hook is None or getattr(hook, "calls", None) == []


class _Bound:
    """The C launcher of one compiled kernel and its constant arguments."""

    __slots__ = ("launch", "prefix", "packed", "cvals")

    def __init__(self, launch, prefix: tuple, packed: bool, cvals: tuple):
        self.launch, self.prefix, self.packed, self.cvals = launch, prefix, packed, cvals

    def tail(self, kargs: tuple) -> tuple:
        return (*self.prefix, kargs) if self.packed else (*self.prefix, *kargs)


def _bind(kernel, runner, calls: dict, head: tuple, kargs: tuple, cvals: tuple) -> _Bound | str:
    """A ``_Bound`` from the probe's recorded calls, or why the fast path cannot take it."""
    ran = calls.get("run")
    if ran is None or len(ran) != 9 + len(kargs) or ran[:3] != head[:3] or ran[3] != head[3]:
        return "the JIT did not launch the compiled kernel as expected"
    if ran[4] is not kernel.function or ran[5] is not kernel.packed_metadata \
            or not _same(ran[9:], kargs):
        return "the JIT passed other arguments than the fast path would"
    if not (_idle(ran[7]) and _idle(ran[8])):
        return "Triton launch hooks are installed (a profiler?)"
    hooks = [h for h in ran[6:9] if h is not None]
    plain = _Bound(runner, (kernel.function, kernel.packed_metadata, None, None, None),
                   False, cvals)
    low = calls.get("launch")
    if low is None or tuple(low[:4]) != ran[:4] or any(
            getattr(runner, a, 1) != 0 for a in ("global_scratch_size", "profile_scratch_size")) \
            or getattr(runner, "gsan_enabled", False):
        return plain  # the compiled kernel's own launcher: still no binding per call
    if len(low) > 4 + len(kargs) and _same(tuple(low[len(low) - len(kargs):]), kargs):
        prefix, packed = low[4:len(low) - len(kargs)], False  # Triton <= 3.6: spread
    elif isinstance(low[-1], tuple) and _same(low[-1], kargs):
        prefix, packed = low[4:-1], True  # Triton 3.7+: one tuple of arguments
    else:
        return plain
    prefix = tuple(None if any(x is h for h in hooks) else x for x in prefix)
    return _Bound(runner.launch, prefix, packed, cvals)


class Launcher:
    """One @triton.jit kernel and its compiled variants, keyed by the caller."""

    def __init__(self, fn, **options):
        """``options``: Triton compile options for every variant (``debug=True`` keeps
        ``tl.device_assert``)."""
        self.fn = fn
        self.options = options
        self.compiled: dict = {}  # key -> _Bound, or the reason it takes Triton's path
        self.fast_calls = 0  # launches that skipped Triton's path (tests read it)
        self._sig: _Signature | None = None  # its parameters (_signature), for call, prepare

    def __call__(self, key, grid: int, args: tuple, consts: tuple, warps: int,
                 pdl: bool = False) -> None:
        """``args`` in signature order, then ``consts`` (name, value) pairs in order.

        ``key`` must determine ``consts`` and everything Triton specialises on.
        ``pdl`` launches with programmatic dependent launch (sm90+): the grid may start
        while the kernel before it finishes, so the kernel must ``gdc_wait()`` before it
        touches memory; ``key`` must tell the two apart.
        """
        self._launch(key, (grid, 1, 1), args, consts, warps, pdl)

    def call(self, grid: tuple, warps: int, pdl: bool = False, stages: int | None = None,
             **params) -> None:
        """Launch with the kernel's parameters by name (defaults as declared) on a grid
        of up to three axes, keyed here on what Triton specialises on: the current
        device, every constexpr, each tensor's dtype and 16-byte alignment, each int's
        ``int_spec``, and any other argument itself (None, bools). ``stages``: Triton's
        ``num_stages`` (None: its default)."""
        sig = self._signature()
        if not (sig.required <= params.keys() <= sig.names_set):
            missing = sorted(sig.required - params.keys())
            raise TypeError(f"{self.fn.__name__}: missing arguments {missing}" if missing else
                            f"{self.fn.__name__}: unknown arguments "
                            f"{sorted(params.keys() - sig.names_set)}")
        ordered = tuple(map(params.get, sig.names, sig.defaults))
        runtime = sig.runtime(ordered)
        grid = (*grid, 1, 1)[:3]
        if not _on_cuda(runtime):  # the interpreter's CPU tensors
            self._jit(grid, (), (), warps, self._options(pdl, stages), ordered)
            return
        self._keyed(grid, (warps, pdl, stages, sig.consts(ordered)), runtime, ordered)

    def prepare(self, grid: tuple, warps: int, pdl: bool = False, stages: int | None = None,
                **consts) -> Prepared:
        """``call`` with the grid and every constexpr fixed (by name; defaults as
        declared): the returned launch takes the other parameters, in signature order."""
        sig = self._signature()
        fixed = {n for n, c in zip(sig.names, sig.constexpr, strict=True) if c}
        if not consts.keys() <= fixed or not (fixed & sig.required) <= consts.keys():
            raise TypeError(f"{self.fn.__name__}: prepare takes the constexprs "
                            f"{sorted(fixed)}, got {sorted(consts)}")
        return Prepared(self, (*grid, 1, 1)[:3], warps, pdl, stages, consts)

    def _keyed(self, grid: tuple, head: tuple, runtime: tuple,
               ordered: tuple) -> _Bound | None:
        """Launch ``ordered`` on CUDA tensors: ``head`` (warps, pdl, stages, constexprs)
        and ``runtime`` (the other arguments) make the key. Returns the ``_Bound`` that
        launched it, None where it took Triton's path."""
        dev = torch._C._cuda_getDevice()  # Triton compiles for the current device
        # tensors and ints inline (int_spec): a function call an argument costs as much as
        # the rest of the key
        key = (dev, head, tuple([
            (v.dtype, v.data_ptr() % 16 == 0) if isinstance(v, torch.Tensor) else
            (v == 1, v % 16 == 0, -(1 << 31) <= v < (1 << 31)) if v.__class__ is int else
            v if v is None or v.__class__ is bool else v.__class__ for v in runtime]))
        bound = self.compiled.get(key)
        if bound.__class__ is _Bound and FAST and _recording is None:
            stream = torch._C._cuda_getCurrentRawStream(dev)
            if bound.packed:
                bound.launch(*grid, stream, *bound.prefix, ordered)
            else:
                bound.launch(*grid, stream, *bound.prefix, *ordered)
            self.fast_calls += 1
            return bound
        self._launch(key, grid, (), (), head[0], head[1], ordered, head[2])
        return None

    def _launch(self, key, grid: tuple, args: tuple, consts: tuple, warps: int, pdl: bool,
                ordered: tuple | None = None, stages: int | None = None) -> None:
        """``args`` then ``consts``; or ``ordered``: every parameter's value in signature
        order."""
        bound = self.compiled.get(key)
        if bound.__class__ is _Bound and FAST:
            kargs = ordered if ordered is not None else (*args, *bound.cvals)
            stream = torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())
            if _recording is None:
                if bound.packed:
                    bound.launch(*grid, stream, *bound.prefix, kargs)
                else:
                    bound.launch(*grid, stream, *bound.prefix, *kargs)
            else:
                ptrs: list = []
                tail = bound.tail(_as_addresses(kargs, ptrs))
                bound.launch(*grid, stream, *tail)
                _recording.append((bound.launch, grid, tail, ptrs))
            self.fast_calls += 1
            return
        if _recording is not None:
            _recording.append(None)
        opts = self._options(pdl, stages)
        if not FAST or bound is not None or not _on_cuda(args or ordered):
            self._jit(grid, args, consts, warps, opts, ordered)
            return
        bound = self.compiled[key] = self._probe(grid, args, consts, warps, opts, ordered)
        if isinstance(bound, str):
            _slow(f"{self.fn.__name__}: {bound}")

    def _options(self, pdl: bool, stages: int | None) -> dict:
        return {**_options(pdl, stages), **self.options}

    def _signature(self) -> _Signature:
        if self._sig is None:
            self._sig = _Signature(self.fn)
        return self._sig

    def _by_name(self, ordered: tuple) -> dict:
        return dict(zip(self._sig.names, ordered, strict=True))

    def _jit(self, grid: tuple, args: tuple, consts: tuple, warps: int, opts: dict,
             ordered: tuple | None) -> None:
        """Triton's own launch path."""
        if ordered is not None:
            self.fn[grid](**self._by_name(ordered), num_warps=warps, **opts)
        else:
            self.fn[grid](*args, **dict(consts), num_warps=warps, **opts)

    def _probe(self, grid: tuple, args: tuple, consts: tuple, warps: int,
               opts: dict, ordered: tuple | None = None) -> _Bound | str:
        """Compile, then launch once through Triton, watching what it passes."""
        if ordered is not None:
            kernel = self.fn.warmup(grid=grid, **self._by_name(ordered), num_warps=warps,
                                    **opts)
        else:
            kernel = self.fn.warmup(*args, grid=grid, **dict(consts), num_warps=warps,
                                    **opts)
        if hasattr(kernel, "result"):  # a future under Triton's async compile mode
            kernel = kernel.result()
        if kernel is None:  # a JIT cache hook took over the compile
            self._jit(grid, args, consts, warps, opts, ordered)
            return "Triton's JIT returned no compiled kernel"
        runner = kernel.run  # builds the launcher
        inner = getattr(runner, "launch", None)
        calls: dict = {}

        def watch_run(*a):
            calls["run"] = a
            return runner(*a)

        def watch_launch(*a):
            calls["launch"] = a
            return inner(*a)

        kernel._run = watch_run
        if inner is not None:
            runner.launch = watch_launch
        try:
            self._jit(grid, args, consts, warps, opts, ordered)
        finally:
            kernel._run = runner
            if inner is not None:
                runner.launch = inner
        head = (*grid, torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice()))
        cvals = tuple(v for _, v in consts)
        kargs = ordered if ordered is not None else (*args, *cvals)
        return _bind(kernel, runner, calls, head, kargs, cvals)


class _Signature:
    """A kernel's parameters as ``Launcher.call`` reads them: names and defaults in
    signature order, the required ones, and getters of the constexpr and the other
    values."""

    def __init__(self, fn):
        params = getattr(fn, "params", None)
        if params is not None:
            rows = [(p.name, p.is_constexpr, p.default) for p in params]
        else:  # TRITON_INTERPRET=1: the Python function's signature
            rows = [(name, "constexpr" in str(p.annotation), p.default)
                    for name, p in inspect.signature(fn.fn).parameters.items()]
        self.names = tuple(r[0] for r in rows)
        self.constexpr = tuple(r[1] for r in rows)
        self.names_set = frozenset(self.names)
        self.defaults = tuple(None if r[2] is _EMPTY else r[2] for r in rows)
        self.required = frozenset(r[0] for r in rows if r[2] is _EMPTY)
        const = [i for i, r in enumerate(rows) if r[1]]
        runtime = [i for i, r in enumerate(rows) if not r[1]]
        self.consts = _getter(const)
        self.runtime = _getter(runtime)


class Prepared:
    """One kernel's launch with its grid and constexprs fixed (``Launcher.prepare``):
    called with the other parameters in signature order.

    Once a launch of some specialisation went through the C launcher, later calls of that
    specialisation take a direct path: one generated function computes the key from the
    arguments (``_spec_function``: the current device, the first tensor's device type,
    what Triton specialises each argument on, as ``_keyed`` does), and one generated for
    each specialisation calls the C launcher with the constants in place. Anything the key
    function cannot read (another kind of argument than the first call's) takes
    ``_keyed``."""

    __slots__ = ("lau", "grid", "head", "order", "runtime", "items", "consts", "spec",
                 "direct")

    def __init__(self, lau: Launcher, grid: tuple, warps: int, pdl: bool,
                 stages: int | None, consts: dict):
        sig = lau._sig
        values = {n: consts.get(n, d) for n, c, d in zip(sig.names, sig.constexpr,
                                                          sig.defaults, strict=True) if c}
        self.lau, self.grid = lau, grid
        self.head = (warps, pdl, stages, tuple(values[n] for n in sig.names if n in values))
        # every parameter in signature order from the others: one generated function, a
        # tuple built in one step
        runtime = [n for n, c in zip(sig.names, sig.constexpr, strict=True) if not c]
        space = {f"_c_{n}": v for n, v in values.items()}
        items = ", ".join(f"_c_{n}" if n in values else n for n in sig.names)
        self.order = eval(f"lambda {', '.join(runtime)}: ({items},)", space)  # noqa: S307
        self.runtime, self.items, self.consts = runtime, items, space
        self.spec = None  # the key function, made at the first direct launch
        self.direct: dict = {}  # key -> the direct launch of that specialisation

    def __call__(self, *runtime) -> None:
        go = self.direct_for(*runtime)
        if go is not None:
            go(*runtime)
            self.lau.fast_calls += 1
            return
        ordered = self.order(*runtime)
        if not _on_cuda(runtime):  # the interpreter's CPU tensors
            warps, pdl, stages, _ = self.head
            self.lau._jit(self.grid, (), (), warps, self.lau._options(pdl, stages), ordered)
            return
        bound = self.lau._keyed(self.grid, self.head, runtime, ordered)
        if bound is not None and _recording is None:
            if self.spec is None:
                self.spec = _spec_function(self.runtime, runtime)
            self.direct[self.spec(*runtime)] = self._direct(bound)

    def direct_for(self, *runtime):
        """The direct launch of the specialisation of ``runtime`` (called with the runtime
        arguments, it launches without checking them), None where there is none yet: a
        caller that replays a launch of arguments of that specialisation."""
        if self.spec is None or not FAST or _recording is not None:
            return None
        try:
            return self.direct.get(self.spec(*runtime))
        except Exception:  # an argument of another kind than the first call's
            return None

    def _direct(self, bound: _Bound):
        """``bound``'s launch of this grid as one generated function of the runtime
        arguments."""
        space = dict(self.consts, _launch=bound.launch,
                     _stream=torch._C._cuda_getCurrentRawStream, _dev=torch._C._cuda_getDevice)
        for k, v in enumerate(bound.prefix):
            space[f"_p{k}"] = v
        prefix = "".join(f"_p{k}, " for k in range(len(bound.prefix)))
        kargs = f"({self.items},)" if bound.packed else self.items
        g0, g1, g2 = self.grid
        src = (f"lambda {', '.join(self.runtime)}: _launch({g0}, {g1}, {g2}, "
               f"_stream(_dev()), {prefix}{kargs})")
        return eval(src, space)  # noqa: S307


def replay_call(*steps: tuple) -> tuple | None:
    """For ``(Prepared or None, runtime arguments)`` steps, each step's direct launch (None
    where its ``Prepared`` is None), or None unless every ``Prepared`` has one for its
    arguments (``Prepared.direct_for``).

    The scatter routes take ``replay=``, a list: once every launch of a call has a direct
    launch, they append a function ``f(self, index, values)`` that does the call again for
    arguments of the same shapes, dtypes, device and 16-byte alignment, without the checks
    and keys."""
    go = []
    for prep, args in steps:
        if prep is None:
            go.append(None)
            continue
        direct = prep.direct_for(*args)
        if direct is None:
            return None
        go.append(direct)
    return tuple(go)


def _spec_function(names: list, runtime: tuple):
    """A generated function of the runtime arguments giving the key of their
    specialisation, for arguments of the kinds in ``runtime``."""
    parts = ["_dev()"]
    first = True
    for n, v in zip(names, runtime, strict=True):
        if isinstance(v, torch.Tensor) or hasattr(v, "device"):
            if first:  # the device type of the first tensor (_on_cuda)
                parts.append(f"{n}.device.type")
                first = False
            parts += [f"{n}.dtype", f"{n}.data_ptr() % 16 == 0"]
        elif v.__class__ is int:
            parts += [f"{n}.__class__", f"{n} == 1", f"{n} % 16 == 0",
                      f"-2147483648 <= {n} < 2147483648"]
        elif v is None or v.__class__ is bool:
            parts.append(f"{n}.__class__, {n}")
        else:
            parts.append(f"{n}.__class__")
    src = f"lambda {', '.join(names)}: ({', '.join(parts)},)"
    return eval(src, {"_dev": torch._C._cuda_getDevice})  # noqa: S307


def _getter(positions: list):
    """A function of a tuple giving the tuple of its items at ``positions``."""
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    if positions:
        i = positions[0]
        return lambda t: (t[i],)
    return lambda t: ()


def _options(pdl: bool, stages: int | None) -> dict:
    """Triton's launch options: a programmatic dependent launch (callers ask only on CUDA),
    ``num_stages`` where given."""
    opts: dict = {"launch_pdl": True} if pdl else {}
    if stages is not None:
        opts["num_stages"] = stages
    return opts


def _on_cuda(args: tuple) -> bool:
    """The first tensor among ``args`` is on a CUDA device (the interpreter takes CPU ones)."""
    for a in args:
        if isinstance(a, torch.Tensor) or hasattr(a, "device"):
            return a.device.type == "cuda"
    return False

