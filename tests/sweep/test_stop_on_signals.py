"""The signal handling of ``specmd sweep`` and ``run`` in this process: a SIGTERM raises
``KeyboardInterrupt`` where the main thread is, and one that lands in a finalizer (where Python
would report the interrupt as unraisable and drop it: the process pool cleans up in finalizers)
arrives once the finalizer has returned, reporting nothing; one swallowed as the block ends is
raised there."""

from __future__ import annotations

import signal
import sys
import time
import weakref
from collections.abc import Callable, Iterator

import pytest

import specmd_sim.cli.signals as signals
from specmd_sim.cli.signals import stop_on_signals


class _Owner:
    pass


def _collected_while(fin: Callable[[], None]) -> None:
    """Drop an object whose finalizer is ``fin``: it runs now, as a weakref callback."""
    owner = _Owner()
    weakref.finalize(owner, fin)
    del owner


def _signal_in_finalizer() -> None:
    signal.raise_signal(signal.SIGTERM)
    for _ in range(100):  # the handler runs here, inside the finalizer
        pass


@pytest.fixture
def unraisable() -> Iterator[list]:
    """What reaches the unraisable hook (pytest's own would turn it into a warning)."""
    seen: list = []
    hook, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        yield seen
    finally:
        sys.unraisablehook = hook


def test_a_signal_raises_keyboard_interrupt_and_handlers_are_restored(unraisable: list) -> None:
    received: list[int] = []
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), stop_on_signals(received):
        signal.raise_signal(signal.SIGTERM)
        for _ in range(100):
            pass
    assert received == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is before
    assert sys.unraisablehook == unraisable.append and unraisable == []


@pytest.mark.parametrize("again_s", [signals.AGAIN_S, 0.0])
def test_a_signal_in_a_finalizer_arrives_after_it_reporting_nothing(
    again_s: float, unraisable: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sent again at once (0 s), the signal lands in the hook that caught it as often as not:
    kept there, it is sent once more."""
    monkeypatch.setattr(signals, "AGAIN_S", again_s)
    for _ in range(20):
        received: list[int] = []
        reached = []
        with pytest.raises(KeyboardInterrupt), stop_on_signals(received):
            _collected_while(_signal_in_finalizer)
            reached.append("after the finalizer")
            time.sleep(10)  # the signal, sent again, interrupts this
        assert reached == ["after the finalizer"]  # the finalizer's interrupt did not stop it
        assert received == [signal.SIGTERM]  # one signal, not a second (which would exit)
        assert unraisable == []


def test_a_signal_swallowed_as_the_block_ends_is_raised_there(
    unraisable: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(signals, "AGAIN_S", 30.0)  # not sent again before the block ends
    received: list[int] = []
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), stop_on_signals(received):
        _collected_while(_signal_in_finalizer)
    assert time.monotonic() - started < 5
    assert received == [signal.SIGTERM] and unraisable == []


def test_other_unraisable_exceptions_are_still_reported(unraisable: list) -> None:
    def fails() -> None:
        raise ValueError("in a finalizer")

    with stop_on_signals([]):
        _collected_while(fails)
    assert [type(info.exc_value) for info in unraisable] == [ValueError]
