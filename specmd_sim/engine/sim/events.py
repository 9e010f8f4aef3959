"""The timing engine's event loop: SimPy's, with two costs of its hot path taken out.

A SimPy process costs a generator, an ``Initialize`` event that starts it and an event when it
returns; the engine would start one per chunk moved and per change of the flow rates, and waits
on none of them. :func:`soon` runs a callback where such a process's first step would run: at an
urgent event scheduled when the process would have been started. Everything else therefore
happens in the same order (SimPy orders events by time, priority, then scheduling order), and
the results stay the same; only the events nothing waited on are gone. :func:`settle` likewise
processes at once a transfer's end that nothing waits on yet, rather than scheduling an event
that would run no callback.

:class:`Environment` runs to the end as :meth:`simpy.Environment.run` does, one event after
another in the same order, without a method call and an exception handler per event.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

import simpy
from simpy.core import BoundClass
from simpy.events import URGENT


class Environment(simpy.Environment):
    def __init__(self) -> None:
        super().__init__()
        # SimPy binds env.timeout, env.event, env.process to the instance for speed, but only
        # those its class itself defines: bind simpy.Environment's for this subclass too
        for name, obj in simpy.Environment.__dict__.items():
            if type(obj) is BoundClass:
                setattr(self, name, getattr(self, name))

    def run(self, until: Any = None) -> Any:
        """Process every event (SimPy's own loop where the run is to stop earlier)."""
        if until is not None:
            return super().run(until)
        queue = self._queue
        while queue:
            self._now, _, _, event = heappop(queue)
            callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]
            for callback in callbacks:
                callback(event)
            if not event._ok and not hasattr(event, "_defused"):
                # as simpy.Environment.step: a failed event nothing handled ends the run
                exc = type(event._value)(*event._value.args)
                exc.__cause__ = event._value
                raise exc
        return None


class _Call:
    """What :func:`soon` schedules: all that SimPy's loops (and this module's) read of an event
    that succeeded, its callbacks and ``_ok``, without the rest of a :class:`simpy.Event`."""

    __slots__ = ("callbacks",)
    _ok = True

    def __init__(self, callback: Callable[[Any], None]) -> None:
        self.callbacks: list[Callable[[Any], None]] | None = [callback]


def soon(env: simpy.Environment, callback: Callable[[Any], None]) -> None:
    """Call ``callback`` at an urgent event now (where ``env.process`` would start a process):
    scheduled as :meth:`simpy.Environment.schedule` would, after the events already queued for
    now at the same priority."""
    queue: list[Any] = env._queue  # where a _Call stands for an event
    heappush(queue, (env._now, URGENT, next(env._eid), _Call(callback)))


def settle(event: simpy.Event) -> None:
    """Succeed ``event`` (value None). If nothing waits on it yet it is processed at once, not
    scheduled: its event would run no callback, and the events around it keep their order.

    For an event nothing yields in the instant between its success and that event: a process
    yielding it then resumes at once, where it would have waited for that event (the stream
    waits on a transfer only while it has not ``triggered``)."""
    if event.callbacks or event.triggered:
        event.succeed()  # (a second success raises, as it does)
    else:
        event._ok, event._value, event.callbacks = True, None, None  # type: ignore[assignment]
