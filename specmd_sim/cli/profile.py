"""``specmd run --profile``: where the wall time of a run went.

The run's phases are timed as they happen (loading the inputs, the engine, the timeline page,
writing the rest of the run folder); the engine phase runs under :mod:`cProfile`, whose
per-function self time is summed by where the function lives: SimPy's event loop, the engine
(layer step, streams, flows, copy engines), the cache and the policies, span recording,
numpy and Python's builtins. Where the run uses plug-ins of the user's (``--plugin``), a line
more gives the time spent in their code, what it called included (numpy's and Python's C
functions, which the parts count as builtins): each outermost call into a function their
classes define, timed. Profiling slows the engine phase (typically 1.5-2x), so the phases'
shares, not their seconds, are the figure to read.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar, cast

from rich.console import Console
from rich.markup import escape
from rich.table import Table

T = TypeVar("T")


class _StatsTable(Protocol):
    """What ``pstats.Stats`` holds (an attribute its stubs leave out): per function
    ``(file, line, name)``, its ``(calls, primitive calls, tottime, cumtime, callers)``."""

    stats: dict[tuple[str, int, str], tuple[int, int, float, float, dict[object, object]]]


# (label, path fragments of the functions' files), first match wins
_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("SimPy event loop", ("/simpy/",)),
    ("span recording", ("specmd_sim/timeline.py",)),
    ("cache and policies", ("specmd_sim/cache/", "specmd_sim/policies/")),
    ("engine (layer step, streams, flows)", ("specmd_sim/engine/", "specmd_sim/execute/")),
    ("metrics and result", ("specmd_sim/metrics.py", "specmd_sim/metric_spec.py")),
    ("numpy (Python parts)", ("/numpy/",)),
)


class RunProfile:
    """The phases of one run, in order, and the engine phase's profile."""

    def __init__(self) -> None:
        self.phases: list[tuple[str, float]] = []
        self.engine: dict[str, float] = {}
        self.plugins: tuple[str, float] | None = None  # (their modules, seconds in them)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.phases.append((name, time.perf_counter() - started))

    def profiled(self, name: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` as the phase ``name`` under cProfile; its self time split by part."""
        import cProfile  # (here: only a run with --profile needs them)
        import pstats

        profiler = cProfile.Profile()
        with self.phase(name), _timing_plugins() as plugins:
            result = profiler.runcall(fn)
        # (cast: pstats.Stats sets .stats in its constructor; typeshed does not declare it)
        stats = cast(_StatsTable, pstats.Stats(profiler)).stats
        for (filename, _, _), (_, _, tottime, _, _) in stats.items():
            part = _part(filename)
            self.engine[part] = self.engine.get(part, 0.0) + tottime
        used = {module: seconds for module, seconds in plugins.items() if seconds > 0}
        if used:
            self.plugins = (", ".join(sorted(used)), sum(used.values()))
        return result

    def add(self, name: str, seconds: float) -> None:
        self.phases.append((name, seconds))

    def print(
        self, console: Console, engine_path: str, compressor: tuple[str, str | None] | None = None
    ) -> None:
        """The phases and the engine's parts, with the path the engine took (``engine_path``:
        ``RunResult.engine_path``) and, where a trace was written, its compressor
        (:func:`specmd_sim.gz.compressor`) under the table."""
        caption = f"engine path: {engine_path}"
        if compressor is not None:
            packer, why_not = compressor
            caption += f"\ntrace compressed by {packer}" + (f": {why_not}" if why_not else "")
        caption = escape(caption)  # (the text names an extra in brackets: not rich's markup)
        total = sum(seconds for _, seconds in self.phases) or 1.0
        table = Table(
            "where", "seconds", "share", title="wall time of the run (--profile)",
            caption=caption, caption_justify="left",
        )  # fmt: skip
        for name, seconds in self.phases:
            table.add_row(name, f"{seconds:.3f}", f"{seconds / total:.1%}")
        engine = sum(self.engine.values()) or 1.0
        for part, seconds in sorted(self.engine.items(), key=lambda item: -item[1]):
            table.add_row(f"  engine: {part}", f"{seconds:.3f}", f"{seconds / engine:.1%}")
        if self.plugins is not None:
            modules, seconds = self.plugins
            where = f"  engine, of it: in your plug-ins ({modules}), what they call included"
            table.add_row(escape(where), f"{seconds:.3f}", f"{seconds / engine:.1%}")
        console.print(table)


@contextmanager
def _timing_plugins() -> Iterator[dict[str, float]]:
    """The seconds spent in the user's plug-ins (the classes registered from modules outside
    the package), by module, while the block runs: each function their classes define is
    wrapped so that its outermost call is timed, what it calls included (a call it makes into
    its own or another plug-in's code, directly or through the simulator, a builtin or a
    base class, is inside that call already). The functions are put back afterwards."""
    from specmd_sim.policies.plugin import built_in
    from specmd_sim.policies.registry import SECTIONS

    seconds: dict[str, float] = {}
    depth = [0]  # (the engine runs on one thread)

    def timed(fn: Callable[..., Any], module: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if depth[0]:
                return fn(*args, **kwargs)
            depth[0], started = 1, time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] = 0
                seconds[module] = seconds.get(module, 0.0) + time.perf_counter() - started

        return call

    mine = {
        klass
        for registry in SECTIONS.values()
        for cls in registry.entries()
        for klass in cls.__mro__
        if not built_in(cls) and klass.__module__ == cls.__module__
    }
    wrapped = []
    for klass in mine:
        for attr, fn in list(vars(klass).items()):
            if inspect.isfunction(fn):
                wrapped.append((klass, attr, fn))
                setattr(klass, attr, timed(fn, klass.__module__))
    try:
        yield seconds
    finally:
        for klass, attr, fn in wrapped:
            setattr(klass, attr, fn)


def _part(filename: str) -> str:
    path = filename.replace("\\", "/")
    if path.startswith("~") or path.startswith("<"):  # builtins and C functions
        return "builtins and C functions (numpy's included)"
    for label, fragments in _PARTS:
        if any(fragment in path for fragment in fragments):
            return label
    return "other"
