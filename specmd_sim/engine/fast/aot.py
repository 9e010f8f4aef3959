"""The replay's kernels compiled ahead of time: the same source, without numba in the process.

numba's just-in-time path costs every process that replays ~0.3-0.5 s before the first access
(importing numba, loading the cached machine code into a fresh compiler context, and tearing
it down at exit) — more than the kernel itself takes on a 10M-access trace. So the entry points
of the replay kernel (:mod:`.kernel`) and of the bulk prefetch plans (:mod:`.plan_kernel`),
:data:`ENTRY_POINTS`, are also compiled once into a C extension module by ``numba.pycc`` from
the very same functions, and a later process imports that module — numpy only, no numba.

The module is built on first use, where numba, setuptools and a C compiler are present
(~5-8 s), into ``__pycache__`` beside this file (or, where that is read-only, the user's cache
folder), named by a digest of everything it is compiled from: the kernels' sources, numba's and
numpy's versions, the interpreter and the machine. An edit of a kernel, or an upgrade, makes a
new one; an old one is never loaded. It is compiled for the generic CPU of its architecture
(measured no slower than numba's JIT for the host), so a folder shared by machines of one
architecture never holds code one of them cannot run. Where the build fails (no compiler, a
numba without ``pycc``), the reason is kept beside it and warned about once, and replays use
numba's JIT as before. ``NUMBA_DISABLE_JIT=1`` (numba's switch for debugging kernels as plain
Python) and ``NUMBA_BOUNDSCHECK=1`` (its bounds checks, which CI runs the compiled engines'
tests with once) also turn this module off. The timing engines keep the JIT (they load numba
for their core anyway).

The compiled module and the JIT kernels are differential-tested against each other and against
the Python engine (``tests/engine/test_fast_replay.py``, ``test_fast_plans.py``,
``test_fast_aot.py``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType

from specmd_sim.engine.jit import CompileNotice

_HERE = Path(__file__).resolve().parent
# what the module is compiled from: a change in any of them makes a new module
SOURCES = ("kernel.py", "cache.py", "layout.py", "plan_kernel.py", "aot.py", "../jit.py")
# the state S, an int64 vector, the access sequence (int32, as the demand sets hold it), a
# float64 vector, a float64 matrix in any layout
_S, _A, _KEYS, _F, _M = "i8[:, ::1]", "i8[::1]", "i4[::1]", "f8[::1]", "f8[:, :]"
ENTRY_POINTS = {  # module of this package -> its functions compiled, with their signatures
    "kernel": {
        "preload": f"b1({_S}, {_A})",
        "run_passes": f"i8({_S}, {_A}, {_KEYS}, {_A}, i8, i8, {_A}, {_A})",
        "run_classic": f"i8({_S}, {_KEYS}, {_A}, i8, i8)",
        "next_uses": f"UniTuple({_A}, 2)({_KEYS}, i8)",
    },
    "plan_kernel": {
        "oracle_logits": f"void({_F}, {_A}, {_KEYS}, i8, i8, {_A}, f8, f8, f8, f8[:, ::1])",
        "oracle_top": f"i8({_F}, {_A}, {_KEYS}, i8, i8, i8, {_A}, {_A}, f8, i8, {_A}, i8, {_A})",
        "select": f"i8({_M}, b1[::1], {_A}, {_A}, f8, i8, {_A}, i8, {_A})",
        "learned_scores": (
            f"void({_KEYS}, {_A}, i8, i8, {_A}, {_A}, i8, b1, i4[:, :, :, ::1], f8[:, ::1], "
            f"f8[:, ::1], b1[::1])"
        ),
    },
}


def kernels(ahead_of_time: bool = True) -> ModuleType:
    """The replay kernel's entry points (:data:`ENTRY_POINTS`): with ``ahead_of_time``, the
    module compiled ahead of time where it is available or can be built (no numba in the
    process), else :mod:`.kernel` itself (numba's JIT where numba is installed, plain Python
    otherwise)."""
    return _entry_points("kernel", ahead_of_time)


def plan_kernels(ahead_of_time: bool = True) -> ModuleType:
    """:mod:`.plan_kernel`'s entry points, as :func:`kernels` gives the replay kernel's."""
    return _entry_points("plan_kernel", ahead_of_time)


def _entry_points(module: str, ahead_of_time: bool) -> ModuleType:
    ahead = _compiled_ahead() if ahead_of_time else None
    return ahead or importlib.import_module(f"specmd_sim.engine.fast.{module}")


@functools.cache
def _compiled_ahead() -> ModuleType | None:
    return load()


def module_name() -> str | None:
    """The compiled module's name for this kernel, numba, numpy, interpreter and machine; None
    where numba is not installed."""
    try:
        numba_version = version("numba")
    except PackageNotFoundError:
        return None
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update((_HERE / name).read_bytes())
    for part in (numba_version, version("numpy"), sys.implementation.cache_tag,
                 platform.machine()):  # fmt: skip
        digest.update(part.encode() + b"\0")
    return f"_replay_kernel_{digest.hexdigest()[:16]}"


def folders() -> list[Path]:
    """Where the module is looked for, in order, and built into the first writable one."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return [_HERE / "__pycache__", cache / "specmd-sim"]


def disabled() -> bool:
    """Whether numba's JIT is switched off (``NUMBA_DISABLE_JIT``), and this module with it;
    or numba's bounds checks are on (``NUMBA_BOUNDSCHECK``), which this module, compiled
    without them, would not make: the JIT, which makes them, runs instead."""
    return any(
        os.environ.get(switch, "0") not in ("", "0")
        for switch in ("NUMBA_DISABLE_JIT", "NUMBA_BOUNDSCHECK")
    )


def load() -> ModuleType | None:
    """The compiled module, built first where it is missing; None where numba is not
    installed, the JIT is disabled, or the module cannot be built here (warned once)."""
    name = module_name()
    if name is None or disabled():
        return None
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for folder in folders():
        path = folder / (name + suffix)
        if path.is_file():
            return _import(name, path)
        if (folder / (name + ".failed")).is_file():
            return None
    for folder in folders():
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if not os.access(folder, os.W_OK):
            continue
        try:
            with compiling_ahead():
                path = _build(name, folder)
        except Exception as exc:  # any failure of the build leaves the JIT to do the work
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            (folder / (name + ".failed")).write_text(why + "\n")
            warnings.warn(
                f"specmd-sim: the replay kernel could not be compiled ahead of time ({why}); "
                f"replays use numba's JIT (remove {folder / (name + '.failed')} to retry)",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        return _import(name, path)
    return None


@contextlib.contextmanager
def compiling_ahead() -> Iterator[None]:
    """The build said (:class:`~specmd_sim.engine.jit.CompileNotice`): before, and how long it
    took."""
    warnings.warn(
        "compiling the replay's kernels for this machine: once, about 10 s (then cached beside "
        "the package or in ~/.cache)",
        CompileNotice,
        stacklevel=4,
    )
    started = time.perf_counter()
    yield
    warnings.warn(
        f"the replay's kernels compiled in {time.perf_counter() - started:.0f} s",
        CompileNotice,
        stacklevel=4,
    )


def _import(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def _output_to(log: Path) -> Iterator[None]:
    """The process's stdout and stderr into ``log``, at the descriptor level: the compiler runs
    as a child process, and its messages must not reach a ``--json`` stdout."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "wb") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _build(name: str, folder: Path) -> Path:
    """Compile :data:`ENTRY_POINTS` into ``folder`` as the module ``name``, atomically (a
    concurrent build of the same module by another process is harmless)."""
    with warnings.catch_warnings():  # pycc's pending deprecation (there is no successor yet)
        warnings.simplefilter("ignore")
        from numba.pycc.cc import CC

    work = Path(tempfile.mkdtemp(prefix=name, dir=folder))
    try:
        cc = CC(name)
        cc.output_dir = str(work)
        cc.verbose = False
        for module, entries in ENTRY_POINTS.items():
            source = importlib.import_module(f"specmd_sim.engine.fast.{module}")
            for entry, signature in entries.items():
                cc.export(entry, signature)(getattr(source, entry).py_func)
        log = work / "build.log"
        try:
            with _output_to(log):
                cc.compile()
        except Exception as exc:  # the compiler's last words say more than distutils' error
            said = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            raise RuntimeError(f"{exc}" + "".join(f" ({line.strip()})" for line in said)) from exc
        built = next(work.glob(name + "*" + importlib.machinery.EXTENSION_SUFFIXES[0]))
        path = folder / built.name
        os.replace(built, path)
        return path
    finally:
        shutil.rmtree(work, ignore_errors=True)
