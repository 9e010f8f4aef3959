"""Optional compilation of the engines' array kernels.

A kernel is plain Python over numpy arrays and scalars; :func:`compiled` hands it to
``numba.njit`` when numba is installed (the ``fast`` extra) and returns it unchanged otherwise,
so one source is both the specification and the fast path, and the interpreted function (a
compiled one's ``py_func``) is what the compiled one is tested against. ``cache=True`` keeps the
machine code beside the module, so only a first run pays the compilation.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

# why a compiled path is not taken without numba (:mod:`specmd_sim.engine.coverage`)
UNCOMPILED = "kernels not compiled (numba, the fast extra, is not installed)"


def available() -> bool:
    """Whether numba is installed (kernels are compiled); without importing it."""
    return importlib.util.find_spec("numba") is not None


def compiled(fn: F) -> F:
    """``fn`` compiled by numba when it is installed, else ``fn`` itself."""
    try:
        import numba
    except ImportError:
        return fn
    return numba.njit(cache=True, nogil=True)(fn)  # type: ignore[return-value]


def compiled_inline(fn: F) -> F:
    """:func:`compiled`, and inlined into its compiled callers by numba itself: a call between
    compiled functions that LLVM does not inline (one with a loop, say) costs an atomic
    reference count per array argument, more than a small helper's own work."""
    try:
        import numba
    except ImportError:
        return fn
    return numba.njit(cache=True, nogil=True, inline="always")(fn)  # type: ignore[return-value]
