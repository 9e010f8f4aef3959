"""The ``specmd`` command line: a thin typer layer over the API.

Errors a user can cause print one line ``error: ...`` on stderr and exit with code 2.
Each module of this package registers its commands on :data:`app`.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import typer

from specmd_sim.cli import (  # noqa: F401  (they register their commands)
    catalog,
    mrc,
    real,
    record,
    report,
    reproduce,
    run,
    sweep,
    trace,
    validate,
)
from specmd_sim.cli.app import app
from specmd_sim.errors import Notice, SpecmdError

__all__ = ["app", "app_for", "main", "process_main"]

# click's UsageError (a bad option value, an unknown option or command), as the click that typer
# uses (typer >= 0.2x vendors its own) defines it: the base of BadParameter of that name
_USAGE_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
)


def main() -> None:
    """Entry point: run the app; a user error (ours, a usage error of an option, a path the
    operating system refuses) is one line and exit code 2, an interrupt says so and exits 130."""
    try:
        with _notices():
            code = app_for(sys.argv[1:])(standalone_mode=False)
    except SpecmdError as exc:
        _fail(str(exc))
    except _USAGE_ERROR as exc:
        message = exc.format_message()  # type: ignore[attr-defined]
        if not message.strip():  # a group without its command: its help is what was shown
            raise SystemExit(2) from None
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        _fail(message + hint)
    except OSError as exc:  # a path the system refuses (too long a name, say): one line
        if exc.filename is None:
            _fail_in_a_plugin(exc)
            raise
        _fail(f"{exc.filename}: {exc.strerror or exc}")
    except Exception as exc:
        _fail_in_a_plugin(exc)
        raise  # (a fault of the simulator: its traceback)
    except (KeyboardInterrupt, typer.Abort):  # outside a command, or while typer starts one
        code = 130
    if code == 130:
        print("interrupted", file=sys.stderr)
    raise SystemExit(code if isinstance(code, int) else 0)


@contextlib.contextmanager
def _notices() -> Iterator[None]:
    """Notices (:class:`~specmd_sim.errors.Notice`: the engines compiling for this machine, a
    page's plotly.js) as lines on stderr, each time; other warnings as Python shows them."""
    show = warnings.showwarning

    def notice(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if issubclass(category, Notice):
            print(f"specmd: {message}", file=sys.stderr, flush=True)
        else:
            show(message, category, *args, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("always", Notice)
        warnings.showwarning = notice
        yield


def app_for(args: list[str]) -> typer.Typer:
    """The app typer is to build for the command line ``args``: only the command or group named
    first, or, when none is (no arguments, an option such as ``--help``, an unknown name), the
    whole app. Typer turns every command's signature into options at each start (~30-40 ms for
    all of them, a replay of ten million accesses takes ~0.15 s); with one command only, help,
    usage and errors read as the whole app's (tested)."""
    name = args[0] if args else "-"
    commands = [c for c in app.registered_commands if c.name == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if len(commands) + len(groups) != 1:
        return app
    one = copy.copy(app)  # (its settings; lists of its own)
    one.registered_commands, one.registered_groups = commands, groups
    one.callback()(_stay_a_group)  # a lone command would be made the app itself
    return one


def _stay_a_group() -> None:
    """(No options of its own.)"""


def process_main() -> None:
    """The ``specmd`` process (the console script, ``python -m specmd_sim``): :func:`main`, and
    then, as the process ends, its objects frozen, so that the cycle collection at exit does not
    walk every object only to free what the exit frees anyway (~0.05 s of a replay). Callers in
    a longer-lived process call :func:`main`, which leaves the collector and the environment as
    they were.

    Pydantic's plug-ins are not loaded (``PYDANTIC_DISABLE_PLUGINS=__all__``, pydantic's own
    switch, unless the environment sets it: an empty value loads them): finding them reads the
    metadata of every installed distribution at the first model built, 20-40 ms of every command
    in an environment with torch and its kin, for hooks that would only observe the validation
    of the command's inputs. The setting reaches the process's children (a sweep's workers).

    For ``run`` and ``replay``, the allocator and numpy are set for their run folders' writers
    (:func:`prepare_process`)."""
    prepare_process(sys.argv[1:])
    try:
        main()
    finally:
        gc.freeze()


def prepare_process(args: list[str]) -> None:
    """What :func:`process_main` sets in the process for the command line ``args`` (its
    arguments, the command first): called before numpy is imported (this module imports
    none) and before any thread starts. Pydantic's plug-ins are not looked for; for ``run``
    and ``replay``, the C library's allocator keeps one arena for all threads
    (:func:`one_malloc_arena`: their run folders' writer threads) and what they free
    (:func:`keep_freed_memory`), and numpy asks for no transparent huge pages
    (:func:`no_numpy_huge_pages`); the other commands (a recording's torch threads among them)
    keep the allocator as it is."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    if args[:1] in (["run"], ["replay"]):
        one_malloc_arena()
        keep_freed_memory()
        no_numpy_huge_pages()


M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8  # (glibc's malloc.h)


def one_malloc_arena() -> bool:
    """Have glibc's ``malloc`` keep one arena for every thread, as ``MALLOC_ARENA_MAX=1`` does
    (unless the environment says how many: ``MALLOC_ARENA_MAX``, or ``glibc.malloc.arena_max``
    in ``GLIBC_TUNABLES``); whether it was set. Elsewhere (another C library, another system,
    no ctypes) nothing.

    With an arena a thread (glibc's default, up to 8 a core), the run folder's writers (the
    spans, the trace and its compressors, beside the page) each allocate in an arena of their
    own, whose heap glibc gives back to the system as soon as its top is free: every
    megabyte-sized numpy temporary of theirs is then mapped, faulted in and zeroed by the kernel
    again. One arena reuses what was freed: the default run at 4,000 tokens spent about half the
    system time (medians of 8 pairs, 0.26 s against 0.49 s, with the writers' code loaded
    beside the engine as well: ``benchmarks/README.md``, 2026-12-07); the threads' allocations
    are few and large, so sharing one arena's lock cost nothing measurable. Set once, before
    any thread, by the ``specmd`` process; a library caller's process is left as it is."""
    return _mallopt_unless_set(("arena_max",), ((M_ARENA_MAX, 1),))


KEPT_FREE_BYTES = 1 << 30
"""The trim threshold :func:`keep_freed_memory` sets: glibc gives the free top of its heap back
to the system (all of it but ``M_TOP_PAD``) only once it is larger."""


def keep_freed_memory() -> bool:
    """Have glibc's ``malloc`` take every block from its heap, none mapped on its own
    (``M_MMAP_MAX`` 0), and keep up to :data:`KEPT_FREE_BYTES` freed at the heap's top
    (``M_TRIM_THRESHOLD``), unless the environment sets any of those or the mmap threshold
    (``MALLOC_MMAP_MAX_``, ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, or their
    ``glibc.malloc`` tunables in ``GLIBC_TUNABLES``); whether it was set. Elsewhere nothing.

    glibc maps a block of more than its mmap threshold (128 KiB, rising to at most 32 MiB as
    such blocks are freed) on its own, and unmaps it when freed; past 32 MiB, and at the heap's
    top past twice the threshold, every freed temporary goes back to the system. The run
    folder's writers make numpy temporaries of tens to hundreds of megabytes at tens of
    thousands of tokens (a column of every span), each then mapped and faulted in, page by
    page, again. Kept, the next one reuses the pages: at 40,000 tokens, with
    :func:`no_numpy_huge_pages`, the run folder took 4.2-4.5 s where it took 6.0-6.9 s, the
    whole process's system time 1.9-2.4 s where it was 6.9-7.7 s, its peak memory 3-7% more
    (3 pairs, 2 cores, 2026-12-08: ``benchmarks/README.md``). The process ends once its folder
    is written, so what it keeps is not held for long."""
    names = ("mmap_max", "trim_threshold", "mmap_threshold")
    return _mallopt_unless_set(names, ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, KEPT_FREE_BYTES)))


MALLOC_VARIABLES = {
    "arena_max": "MALLOC_ARENA_MAX",
    "mmap_max": "MALLOC_MMAP_MAX_",
    "trim_threshold": "MALLOC_TRIM_THRESHOLD_",
    "mmap_threshold": "MALLOC_MMAP_THRESHOLD_",
}
"""The environment variable glibc reads for each of its ``glibc.malloc`` tunables used here."""


def _mallopt_unless_set(names: tuple[str, ...], settings: tuple[tuple[int, int], ...]) -> bool:
    """glibc's ``mallopt`` of each ``(parameter, value)`` of ``settings``, unless the
    environment sets any of the ``glibc.malloc`` tunables ``names`` (in ``GLIBC_TUNABLES``, or
    by their variables, :data:`MALLOC_VARIABLES`); whether all were set (each is tried).
    Elsewhere (another C library, another system, no ctypes) nothing."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    for name in names:
        if MALLOC_VARIABLES[name] in os.environ or f"glibc.malloc.{name}" in tunables:
            return False
    if not _glibc():
        return False
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt  # (the process's own C library)
        return all([bool(mallopt(parameter, value)) for parameter, value in settings])
    except Exception:  # (no ctypes, no mallopt: the allocator as it is)
        return False


def no_numpy_huge_pages() -> bool:
    """Have numpy not ask the kernel for transparent huge pages (``NUMPY_MADVISE_HUGEPAGE=0``,
    numpy's own switch, read as numpy is imported) unless the environment sets it; whether it
    was set. Where transparent huge pages are given on request (Linux's ``madvise`` mode, this
    machine's), numpy asks for them for every array of 4 MiB or more, and the kernel then
    finds and zeroes 2 MiB pages at the first touch, compacting memory to find them (in the
    ``always`` mode it does so whatever numpy asks). At 40,000 tokens, this switch alone took
    the whole process's system time from 7.4-8.7 s to 4.3-6.3 s, with
    :func:`keep_freed_memory` to 2.5-3.6 s (runs of each, 2026-12-08: ``docs/design.md``).
    The setting reaches the process's children. Not set once numpy is imported (it would no
    longer be read)."""
    if "NUMPY_MADVISE_HUGEPAGE" in os.environ or "numpy" in sys.modules:
        return False
    os.environ["NUMPY_MADVISE_HUGEPAGE"] = "0"
    return True


def _glibc() -> bool:
    """Whether the process's C library is glibc (asked without reading the interpreter's
    binary, as ``platform.libc_ver`` does)."""
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError, AttributeError):  # (no such name on this system)
        return False


def _fail_in_a_plugin(exc: Exception) -> None:
    """A failure in the user's plug-in code (raised there, or in what it called: a contract
    check) is one line naming the plug-in's module, file, line and function and the error
    (exit 2); any other returns, to be raised with its traceback."""
    from specmd_sim.policies.registry import plugin_origin

    origin = plugin_origin(exc)
    if origin is not None:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        _fail(f"plug-in {origin}: {type(exc).__name__}" + (f": {text}" if text else ""))


def _fail(message: str) -> None:
    """Print ``error: message`` as one line (a line break in a value is shown escaped)."""
    text = message.replace("\r", "\\r").replace("\n", "\\n")
    print(f"error: {text}", file=sys.stderr)
    raise SystemExit(2)
