"""Which path a run takes, and why: the one coverage check of the engines' compiled paths.

Each engine has a compiled path beside its Python reference, which stays the specification and
the path for users' own plug-ins: ``replay``'s compiled replay (:mod:`specmd_sim.engine.fast`)
beside the Python layer step, ``simulate``'s compiled timing core
(:mod:`specmd_sim.engine.sim.compiled`) beside the layer step on SimPy processes.
:func:`replay_path` and :func:`simulate_path` decide which one a run takes and return an
:class:`EnginePath`: the path, and where it is the Python one, why (one phrase) and how much
slower it is. The engines take the path it names and record :meth:`EnginePath.line` in the
result (``RunResult.engine_path``, not written to ``result.json``: both paths give the same
file); ``specmd run``/``replay`` print it under the summary and with ``--profile``.

The check is made of the parts each fast path owns, asked in this order:

- :func:`specmd_sim.engine.fast.compiled_unsupported`: the compiled replay's policies, miss
  handler, cache and capacity, and (``home=True``) those of the timing core's cache part;
- :func:`specmd_sim.engine.fast.plans.plans_unsupported`: the prefetch plans drawn in bulk
  (asked by the previous);
- :func:`specmd_sim.engine.layer.bulk_plans_unsupported`: the same plans drawn a block ahead
  while the run goes on (no other plug-in draws from the run's generator), which the timing core
  and the SimPy path's layer step (:class:`~specmd_sim.engine.layer.PlanBlocks`) both use;
- :func:`specmd_sim.engine.sim.compiled.compiled_unsupported`: the timing core as a whole
  (numba, the GPUs' copy engines, the transfer paths; the parts above for each GPU's run).
"""

from __future__ import annotations

from dataclasses import dataclass

from specmd_sim.engine import jit
from specmd_sim.engine.fast import compiled_unsupported as replay_unsupported
from specmd_sim.scenario import RunObjects, Scenario

# the path each engine takes, compiled and not
_NAMES = {
    "replay": {True: "compiled replay", False: "Python layer step"},
    "simulate": {True: "compiled timing core", False: "Python layer step on SimPy"},
}
# How much longer the Python path takes than the compiled one, the same run on both (compiled=
# False against the default; warm kernels, best of 2-3): measured on a 2-core x86 machine with
# lru + top-k prefetch, on the default trace (32,768 accesses) and on a 10x larger one
# (olmoe preset, 40 requests: 327,680 accesses): replay 112x and 171x, simulate 8.5x and 10x.
# The ratio grows with the trace (the compiled path's fixed cost is amortised): an order of
# magnitude, not a constant.
_SLOWER = {"replay": "~100x", "simulate": "~10x"}
ASKED = "the Python path was asked for (compiled=False)"


@dataclass(frozen=True)
class EnginePath:
    """The path a run takes: ``reason`` None where its engine's compiled path covers it, else
    why not (one phrase, e.g. "eviction 'random'"); ``plans``, on simulate's Python path, why its
    prefetch plans are not drawn in bulk (None where they are, where it draws none, or where
    that is ``reason`` again)."""

    engine: str  # "replay" or "simulate"
    reason: str | None = None
    plans: str | None = None

    @property
    def compiled(self) -> bool:
        return self.reason is None

    @property
    def name(self) -> str:
        """The path, e.g. "compiled replay"."""
        return _NAMES[self.engine][self.compiled]

    def line(self) -> str:
        """The path in one line: its name and, on the Python path, the cost and the reason."""
        if self.reason is None:
            return self.name
        fast = _NAMES[self.engine][True]
        line = f"{self.name}, {_SLOWER[self.engine]} slower than the {fast} (why: {self.reason})"
        if self.plans is not None:
            line += f"; prefetch plans drawn one at a time (why: {self.plans})"
        return line


def replay_path(run: RunObjects, compiled: bool | None = None) -> EnginePath:
    """The path ``replay`` takes for ``run``. ``compiled``: None takes the compiled replay
    where it covers the run and numba is installed; True where it covers the run (interpreted
    without numba: for tests); False takes the Python layer step."""
    if compiled is False:
        return EnginePath("replay", ASKED)
    reason = replay_unsupported(run)
    if reason is None and compiled is None and not jit.available():
        reason = jit.UNCOMPILED
    return EnginePath("replay", reason)


def simulate_path(scenario: Scenario, runs: list[RunObjects], compiled: bool = True) -> EnginePath:
    """The path ``simulate`` takes for ``scenario``'s ``runs`` (one per GPU, their parts not yet
    built): the compiled timing core where it covers them, unless ``compiled`` is False."""
    # (imported here: a replay's process imports neither SimPy nor the layer step)
    from specmd_sim.engine.layer import bulk_plans_unsupported
    from specmd_sim.engine.sim.compiled import compiled_unsupported

    reason = compiled_unsupported(scenario, runs) if compiled else ASKED
    if reason is None:
        return EnginePath("simulate")
    plans = [bulk_plans_unsupported(run) for run in runs if run.prefetch.lookahead > 0]
    return EnginePath("simulate", reason, next((w for w in plans if w not in (None, reason)), None))
