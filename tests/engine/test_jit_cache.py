"""The compiled engines and numba's cache: keyed by all of their sources, and a first compilation
said. numba's cache of the compiled engines is keyed by all of their sources: a kernel inlines
functions of other files (the replay's layer step and the timing core inline ``fast/cache.py``),
and numba's own key, the function's own file, would keep a kernel's machine code after an edit
of one of them."""

from __future__ import annotations

import os
import sys

import pytest

from specmd_sim.engine import jit


def test_an_edit_of_any_source_changes_every_kernels_stamp(tmp_path, monkeypatch) -> None:
    files = [tmp_path / name for name in ("kernel.py", "cache.py")]
    for path in files:
        path.write_text("x = 1\n")
    monkeypatch.setattr(jit, "_sources", lambda: frozenset(files))
    before = jit._sources_stamp()
    assert jit._sources_stamp() == before  # (stable)
    stat = files[1].stat()
    os.utime(files[1], ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert jit._sources_stamp() != before


def test_the_engines_functions_take_the_stamp_of_their_sources() -> None:
    pytest.importorskip("numba")
    from specmd_sim.engine.fast import cache, kernel
    from specmd_sim.engine.fast.timed import stream

    for module in (kernel, cache, stream):
        assert os.path.realpath(module.__file__) in {str(p) for p in jit._sources()}
    from numba.core import caching

    classes = caching.CacheImpl._locator_classes
    ours = [c for c in classes if c.__name__.startswith("BySources")]
    assert len(ours) == 3, "the locators are not registered"
    # each just before the one it refines: NUMBA_CACHE_DIR (a cache of its own, as CI's run
    # with bounds checks takes) keeps coming first
    for mine in ours:
        assert classes[classes.index(mine) + 1] is mine.__mro__[1]
    assert ours[0].__mro__[1] is caching.UserProvidedCacheLocator
    locator = ours[1].from_function(kernel.run_passes.py_func, kernel.__file__)  # (in the tree)
    assert locator is not None and locator.get_source_stamp() == jit._sources_stamp()
    # a dispatcher that holds code (after its first call) needs no look at the cache's index
    held = type("Held", (), {"signatures": ["(int64,)"], "_cache": None})()
    assert jit.compiled_already(held) is True
    assert jit.compiled_already(type("Fresh", (), {"signatures": [], "_cache": None})()) is None
    # a module outside the engines keeps numba's own key
    assert ours[1].from_function(jit._sources_stamp, __file__) is None


class _Index:
    def __init__(self, held: dict) -> None:
        self._cache = type("C", (), {"_cache_file": self})()
        self.held = held

    def _load_index(self) -> dict:
        return self.held


def test_a_first_compilation_is_said_before_and_after() -> None:
    with pytest.warns(jit.CompileNotice) as said, jit.compiling("the core", "a while", _Index({})):
        pass
    lines = [str(w.message) for w in said]
    assert lines[0].startswith("compiling the core for this machine: once, a while")
    assert lines[1].startswith("the core compiled in ") and lines[1].endswith(" s")
    import warnings

    for held in (_Index({"sig": 1}), object()):  # cached, or numba's internals unknown: silence
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with jit.compiling("the core", "a while", held):
                pass


def test_a_run_that_compiles_the_core_says_so(monkeypatch) -> None:
    pytest.importorskip("numba")
    from specmd_sim import build_config, simulate

    monkeypatch.setattr(jit, "compiled_already", lambda fn: False)
    config = build_config({"cache": {"capacity": "20%"}, "workload": {"max_requests": 1}})
    with pytest.warns(jit.CompileNotice) as said:
        simulate(config)
    assert [str(w.message)[:45] for w in said] == [
        "compiling the timing engine's compiled core f",
        "the timing engine's compiled core compiled in",
    ]


def test_the_cli_prints_a_notice_as_a_line(capsys) -> None:
    import warnings

    from specmd_sim.cli import _notices

    with _notices():
        warnings.warn("compiling X for this machine", jit.CompileNotice, stacklevel=1)
        warnings.warn("compiling X for this machine", jit.CompileNotice, stacklevel=1)  # again
    err = capsys.readouterr().err
    assert err == "specmd: compiling X for this machine\n" * 2


def test_building_the_replays_kernels_ahead_is_said() -> None:
    from specmd_sim.engine.fast import aot

    with pytest.warns(jit.CompileNotice) as said, aot.compiling_ahead():
        pass
    assert [str(w.message)[:30] for w in said] == [
        "compiling the replay's kernels",
        "the replay's kernels compiled ",
    ]


_CACHED_MODULE = """
from specmd_sim.engine import jit


@jit.compiled
def double(x):
    return x * 2


@jit.compiled_inline
def helper(x):
    return x + 1


@jit.compiled
def never_called(x):
    return x - 1
"""


def test_load_cached_loads_what_the_cache_holds_and_compiles_nothing(tmp_path) -> None:
    """A first process calls a kernel (numba caches its machine code beside it); a second
    loads it ahead with ``load_cached`` and holds its signature before any call. A kernel never
    called has nothing cached and is left alone (no compiling), as is a function compiled to
    be inlined."""
    pytest.importorskip("numba")
    import subprocess
    import sys

    (tmp_path / "cached_kernels.py").write_text(_CACHED_MODULE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    first = "import cached_kernels as m; m.double(2); m.double(2.5); m.helper(1)"
    subprocess.run([sys.executable, "-c", first], check=True, env=env, cwd=tmp_path)
    second = (
        "import cached_kernels as m\n"
        "from specmd_sim.engine import jit\n"
        "print(jit.load_cached(m), len(m.double.signatures), len(m.helper.signatures),"
        " len(m.never_called.signatures))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", second], check=True, env=env, cwd=tmp_path, capture_output=True
    )
    assert out.stdout.split() == [b"2", b"2", b"0", b"0"]
    # an index whose data files are gone: nothing loaded, and nothing compiled in their place
    for data in tmp_path.rglob("cached_kernels.double-*.nbc"):
        data.unlink()
    out = subprocess.run(
        [sys.executable, "-c", second], check=True, env=env, cwd=tmp_path, capture_output=True
    )
    assert out.stdout.split() == [b"0", b"0", b"0", b"0"]


def test_load_cached_without_numba_loads_nothing(monkeypatch) -> None:
    import types

    monkeypatch.setitem(sys.modules, "numba", None)  # (an import of it raises ImportError)
    monkeypatch.delitem(sys.modules, "numba.core.dispatcher", raising=False)
    assert jit.load_cached(types.ModuleType("empty")) == 0
