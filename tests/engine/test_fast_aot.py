"""The replay's kernels compiled ahead of time (:mod:`specmd_sim.engine.fast.aot`): a replay of
built-in policies and prefetchers imports no numba; a failed build leaves the JIT to replay and
says why once. (``test_fast_replay.py`` checks it against the JIT on every policy and
prefetcher, ``test_fast_plans.py`` its plan kernels, and the compiled path,
whichever module it runs, against the Python engine.)"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import warnings

import pytest

from specmd_sim import save_trace
from specmd_sim.engine.fast import aot
from specmd_sim.traces.synthetic import PRESETS, generate


def test_a_replay_imports_no_numba_nor_what_it_does_not_use(compiled_ahead, tmp_path) -> None:
    trace = save_trace(generate(PRESETS["olmoe"].model_copy(update={"decode_tokens": 6}), 0),
                       tmp_path / "t.npz")  # fmt: skip
    code = (
        "import sys\n"
        "from specmd_sim import build_config, replay\n"
        "from specmd_sim.scenario import build_scenario\n"
        f"trace = {str(trace)!r}\n"
        "classic = {'eviction': 'lru', 'prefetch': 'none', 'cache': {'capacity': '50%'}}\n"
        "for extra in (classic, {}):  # and the defaults: least-stale, top-k, noisy oracle\n"
        "    scenario = build_scenario(build_config({'trace': trace, **extra}))\n"
        "    assert replay(scenario).metrics['hits'] > 0\n"
        "    assert not {'tokens', 'gates'} & set(vars(scenario.demand))  # (never read)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite')))\n"
        "print(sorted(m for m in sys.modules if m.startswith('specmd_sim.policies.eviction.')))\n"
        "print(sorted({'specmd_sim.engine.layer', 'specmd_sim.traces.synthetic', 'numpy.ma'}\n"
        "             & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    jit, eviction, others = out.stdout.splitlines()
    assert jit == "[]", jit
    # the plug-ins a replay uses are imported, not the zoo: lru (a fifo) and the defaults'
    # least-stale (each declares its own compiled form: nothing maps the others to codes)
    covered = {"base", "fifo", "least_stale", "lru"}
    loaded = {m.rsplit(".", 1)[1] for m in ast.literal_eval(eviction)}
    assert loaded == covered, loaded
    # nor the Python path's layer step, the trace generator, numpy's masked arrays
    assert others == "[]", others


@pytest.mark.filterwarnings("ignore::specmd_sim.engine.jit.CompileNotice")  # (the build's, said)
def test_a_failed_build_warns_once_and_leaves_the_jit(tmp_path, monkeypatch, capfd) -> None:
    pytest.importorskip("numba")
    monkeypatch.delenv("NUMBA_DISABLE_JIT", raising=False)
    monkeypatch.setattr(aot, "folders", lambda: [tmp_path / "a"])
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))  # distutils' compiler
    capfd.readouterr()
    # numba refuses a missing compiler before it compiles, unless an earlier build in this
    # process found one; then the compiler's call fails
    said = "without the compiler|no-such-compiler"
    with pytest.warns(RuntimeWarning, match=f"compiled ahead of time .*({said})"):
        assert aot.load() is None
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # the build's output went to its log, not to stdout
    (marker,) = (tmp_path / "a").glob("*.failed")
    assert re.search(said, marker.read_text())
    assert [p.name for p in (tmp_path / "a").iterdir()] == [marker.name]  # its work removed
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a later process is told nothing more
        assert aot.load() is None


def test_numba_disable_jit_turns_it_off(monkeypatch) -> None:
    monkeypatch.setenv("NUMBA_DISABLE_JIT", "1")
    assert aot.load() is None
