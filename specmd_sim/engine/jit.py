"""Optional compilation of the engines' array kernels.

A kernel is plain Python over numpy arrays and scalars; :func:`compiled` hands it to
``numba.njit`` when numba is installed (the ``fast`` extra) and returns it unchanged otherwise,
so one source is both the specification and the fast path, and the interpreted function (a
compiled one's ``py_func``) is what the compiled one is tested against. ``cache=True`` keeps the
machine code beside the module, so only a first run pays the compilation.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from specmd_sim.errors import Notice

F = TypeVar("F", bound=Callable[..., Any])

# why a compiled path is not taken without numba (:mod:`specmd_sim.engine.coverage`)
UNCOMPILED = "kernels not compiled (numba, the fast extra, is not installed)"


class CompileNotice(Notice):
    """The compiled engines compile for this machine: once, the first run after an install or
    an upgrade (numba's cache keeps the machine code). The CLI prints it as a line on stderr."""


def available() -> bool:
    """Whether numba is installed (kernels are compiled); without importing it."""
    return importlib.util.find_spec("numba") is not None


def compiled(fn: F) -> F:
    """``fn`` compiled by numba when it is installed, else ``fn`` itself."""
    try:
        import numba
    except ImportError:
        return fn
    _cache_by_sources()
    # (forceinline off, said: a callee left unsaid inherits its caller's)
    return numba.njit(cache=True, nogil=True, forceinline=False)(fn)  # type: ignore[return-value]


def compiled_inline(fn: F) -> F:
    """:func:`compiled`, and inlined by LLVM into its compiled callers before numba drops
    redundant reference counts (``forceinline``): a call between compiled functions that is not
    inlined (one with a loop, say) costs an atomic reference count per array argument, more
    than a small helper's own work. (numba's own ``inline="always"``, which inlines its IR,
    leaves a reference count per array argument at each call site: measured 2-4x slower on the
    replay kernel's hits.) An inlined function must not create an array, not even a view of a
    row, in a branch never taken: that too leaves reference counts in its callers' loops."""
    try:
        import numba
    except ImportError:
        return fn
    _cache_by_sources()
    options: dict[str, Any] = {"cache": True, "nogil": True, "forceinline": True, "_nrt": False}
    return numba.njit(**options)(fn)


def compiled_already(fn: Any) -> bool | None:
    """Whether numba's cache holds machine code of the compiled ``fn`` for the sources as they
    are; None where that cannot be told (numba not installed, or its cache's internals
    changed). Code this process already holds counts as cached: only a first call reads the
    cache's index file."""
    if getattr(fn, "signatures", None):
        return True
    try:
        return bool(fn._cache._cache_file._load_index())
    except Exception:  # (numba's private cache API: any change of it only silences the notice)
        return None


def load_cached(*modules: ModuleType) -> int:
    """Load into this process the machine code numba's cache holds for the compiled functions
    of ``modules``, each signature it holds for their code as it is: what their first calls
    would load (~2 ms a signature); how many were loaded. A caller does it ahead, on a thread
    beside other work (``specmd run`` loads the run folder's writers while the engine runs).
    It compiles nothing that the cache's index does not say it holds for this machine and
    this code (the rest is left to its first call), nor a function compiled to be inlined
    (:func:`compiled_inline`: never called itself); nothing where numba is not installed, or
    where the cache's internals (numba's private API) are not what this reads."""
    try:
        from numba.core.dispatcher import Dispatcher
    except ImportError:
        return 0
    loaded = 0
    for module in modules:
        for fn in list(vars(module).values()):
            if not isinstance(fn, Dispatcher) or fn.py_func.__module__ != module.__name__:
                continue
            dispatcher: Any = fn
            if dispatcher.targetoptions.get("forceinline"):  # (in its callers' code, not called)
                continue
            try:
                cache, codegen = dispatcher._cache, dispatcher.targetctx.codegen()
                index = cache._cache_file._load_index()  # (key -> the data file's name)
                folder = Path(cache._cache_path)
                for key, data in index.items():
                    held = key == cache._index_key(key[0], codegen)  # (this machine, this code)
                    if held and (folder / data).is_file():
                        fn.compile(key[0])
                        loaded += 1
            except Exception:  # (numba's private cache API: a change of it skips the function)
                continue
    return loaded


@contextlib.contextmanager
def compiling(what: str, expected: str, fn: Any) -> Iterator[None]:
    """Around the first call of the compiled ``fn``: where numba's cache does not hold it yet, a
    :class:`CompileNotice` before (what compiles, and ``expected``: about how long) and one
    after (how long it took, the first call included)."""
    if compiled_already(fn) is not False:
        yield
        return
    warnings.warn(
        f"compiling {what} for this machine: once, {expected} (then cached beside the package "
        "or in ~/.cache)",
        CompileNotice,
        stacklevel=3,
    )
    started = time.perf_counter()
    yield
    warnings.warn(
        f"{what} compiled in {time.perf_counter() - started:.0f} s", CompileNotice, stacklevel=3
    )


@functools.cache
def _cache_by_sources() -> None:
    """Have numba's cache of the compiled engines (the modules of :mod:`specmd_sim.engine.fast`
    and this one) keyed by all of their sources, not each function's own file: a kernel calls
    and inlines functions of other modules, and numba's own key would keep a kernel's machine
    code after an edit of one of them. A numba whose cache has other internals keeps its own
    key (then clear ``__pycache__`` after editing a kernel's callee)."""
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None)
    names = ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator")
    bases = [getattr(caching, name, None) for name in names]
    classes = getattr(impl, "_locator_classes", None)
    if None in bases or not isinstance(classes, list) or not set(bases) <= set(classes):
        return
    # each just before the locator it refines, so that numba's order holds (NUMBA_CACHE_DIR
    # first, then beside the source, then the user's cache folder)
    for base in bases:
        classes.insert(classes.index(base), _by_sources(base))


def _by_sources(base: Any) -> Any:
    class Locator(base):
        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            if Path(py_file).resolve() not in _sources():
                return None
            return super().from_function(py_func, py_file)

        def get_source_stamp(self) -> Any:
            return _stamp_at_start()

    Locator.__name__ = Locator.__qualname__ = f"BySources{base.__name__}"
    return Locator


@functools.cache
def _sources() -> frozenset[Path]:
    """The compiled engines' sources: this module and those of :mod:`specmd_sim.engine.fast`
    (found once, when numba first compiles or loads one of them, not at import)."""
    here = Path(__file__).resolve()
    return frozenset([here, *(here.parent / "fast").rglob("*.py")])


def _sources_stamp() -> str:
    """A digest of the sources' paths, modification times and sizes."""
    digest = hashlib.sha256()
    for path in sorted(_sources()):
        stat = path.stat()
        name = f"{path.parent.name}/{path.name}"  # (not where the package is installed)
        digest.update(f"{name}:{stat.st_mtime_ns}:{stat.st_size}\n".encode())
    return digest.hexdigest()


@functools.cache
def _stamp_at_start() -> str:
    """:func:`_sources_stamp` once per process: numba asks it for each compiled function."""
    return _sources_stamp()
