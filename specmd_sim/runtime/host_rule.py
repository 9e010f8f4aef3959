"""The host rule: a runtime's host-side costs scale with the single-thread speed of the run's host.

The host-side costs of a runtime (``dispatch_overhead_s`` per kernel, ``expert_call_overhead_s``,
``layer_overhead_s``, ``token_overhead_s``, ``copy_issue_overhead_s`` and the eager path's
``eager_prefill.op_overhead_s``) are one thread's work on the CPU: the Python interpreter, the
framework's dispatcher and launch path, the calls that issue copies. A runtime states them for
the host it names in ``host_reference``; on the run's host (the profile's first host, the one
whose DRAM holds the experts) they are

    cost x speed(reference) / speed(host),    speed = boost clock x the core's work per clock

(:func:`single_thread_speed`; the cores' work per clock in :mod:`specmd_sim.hardware.cores`).
The rule's direction and first-order form come from TaxBreak (arXiv 2603.12465, ISPASS 2026),
which finds the host-side orchestration of LLM inference bound by the CPU's single-thread
performance (a faster host CPU cuts it by 10-29% on the same GPU); that the cost is inversely
proportional to the speed (the exponent 1) is this rule's assumption: it holds for work that
runs in one thread and stays in the core's caches, as an interpreter loop does.

Where the runtime names no reference host, or the run's host states no boost clock or no core
(its CPU not stated by any source), the costs stay as the runtime states them, and the run says
so. Values a run sets (``--set runtime.dispatch_overhead_s=...``) or a fit finds are for the
reference host too. Not scaled: the GPU profile's ``kernel_launch_overhead_s`` (the GPU's launch
latency) and the CPU expert kernels' per-call ``cpu_expert_overhead_s`` (the runtimes' own
accounts of it mix copies over the link, thread-pool barriers and dispatch).
"""

from __future__ import annotations

from dataclasses import dataclass

from specmd_sim.hardware.cores import CORES
from specmd_sim.hardware.schema import ClockHz, CoreLevel, Grade, HostNode, Quantity, worst_grade
from specmd_sim.runtime.schema import RuntimeProfile

HOST_COSTS = ("dispatch_overhead_s", "expert_call_overhead_s", "layer_overhead_s",
              "token_overhead_s", "copy_issue_overhead_s")  # fmt: skip
"""The runtime's fields the rule scales (besides ``eager_prefill.op_overhead_s``)."""


@dataclass(frozen=True)
class Speed:
    """A CPU's single-thread speed in Zen 2 GHz (boost GHz x work per clock) and its grade."""

    value: float
    grade: Grade
    text: str  # how it was found, e.g. '3.40 GHz x 1.00, zen2'


@dataclass(frozen=True)
class HostScaling:
    """What the rule did to a run's host-side costs: the factor, and one line saying why."""

    factor: float
    note: str


def single_thread_speed(clock: ClockHz | None, core: CoreLevel | None) -> Speed | None:
    """The single-thread speed of a CPU of boost ``clock`` and ``core``; None without both."""
    if clock is None or core is None:
        return None
    ipc = CORES[core.value]
    grade = worst_grade(clock.grade, core.grade, ipc.grade)
    return Speed(
        clock.value / 1e9 * ipc.ipc,
        grade,
        f"{clock.value / 1e9:.2f} GHz x {ipc.ipc:.2f}, {core.value}",
    )


def for_host(runtime: RuntimeProfile, host: HostNode) -> tuple[RuntimeProfile, HostScaling]:
    """``runtime`` with its host-side costs scaled to ``host`` by the rule (unchanged where
    either speed is unknown or the two are equal), and what was done."""
    ref = runtime.host_reference
    if ref is None:
        return runtime, HostScaling(1.0, f"host costs as runtime {runtime.id} states them: it "
                                         "names no reference host")  # fmt: skip
    theirs = single_thread_speed(ref.boost_clock_hz, ref.core)
    assert theirs is not None  # (a reference states both)
    ours = single_thread_speed(host.boost_clock_hz, host.core)
    if ours is None:
        return runtime, HostScaling(1.0, (
            f"host costs as runtime {runtime.id} states them for {ref.name}: the run's host "
            "states no boost clock or no core"
        ))  # fmt: skip
    factor = theirs.value / ours.value
    note = (
        f"host costs x{factor:.3f}: single-thread speed {ours.value:.2f} Zen 2 GHz "
        f"({ours.text}) against {theirs.value:.2f} ({theirs.text}) for {ref.name}, the host "
        f"runtime {runtime.id} states them for"
    )
    if factor == 1.0:
        return runtime, HostScaling(factor, note)
    grade = worst_grade(ours.grade, theirs.grade)
    why = (f"x {factor:.4g} for the run's host (the host rule: single-thread speed "
           f"{ours.value:.2f} against {theirs.value:.2f} Zen 2 GHz)")  # fmt: skip

    def scaled(q: Quantity) -> Quantity:
        return q.model_copy(update={
            "value": q.value * factor, "source": f"{q.source}; {why}",
            "grade": worst_grade(q.grade, grade),
        })  # fmt: skip

    update: dict[str, object] = {  # (a cost of zero stays zero, with its grade)
        name: scaled(q) for name in HOST_COSTS if (q := getattr(runtime, name)) and q.value
    }
    eager = runtime.eager_prefill
    if eager is not None and eager.op_overhead_s.value:
        update["eager_prefill"] = eager.model_copy(
            update={"op_overhead_s": scaled(eager.op_overhead_s)}
        )
    return runtime.model_copy(update=update), HostScaling(factor, note)
