"""``specmd sweep``'s signal handling in this process: a SIGTERM raises ``KeyboardInterrupt``
where the main thread is, and one that lands in a finalizer (where Python would print the
interrupt and drop it: the process pool cleans up in finalizers) arrives once the finalizer
has returned, printing nothing."""

from __future__ import annotations

import signal
import sys
import time
import weakref

import pytest

from specmd_sim.cli.sweep import _stop_on_signals


class _Owner:
    pass


def _collected_while(fin) -> None:
    """Drop an object whose finalizer is ``fin``: the finalizer runs now, as a weakref
    callback."""
    owner = _Owner()
    weakref.finalize(owner, fin)
    del owner


def _signal_in_finalizer() -> None:
    signal.raise_signal(signal.SIGTERM)
    for _ in range(100):  # the handler runs here, inside the finalizer
        pass


def test_a_signal_raises_keyboard_interrupt_and_handlers_are_restored() -> None:
    received: list[int] = []
    before, hook = signal.getsignal(signal.SIGTERM), sys.unraisablehook
    with pytest.raises(KeyboardInterrupt), _stop_on_signals(received):
        signal.raise_signal(signal.SIGTERM)
        for _ in range(100):
            pass
    assert received == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is before and sys.unraisablehook is hook


def test_a_signal_in_a_finalizer_arrives_after_it_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    received: list[int] = []
    reached = []
    with pytest.raises(KeyboardInterrupt), _stop_on_signals(received):
        _collected_while(_signal_in_finalizer)
        reached.append("after the finalizer")
        time.sleep(10)  # the signal, sent again, interrupts this
    assert reached == ["after the finalizer"]  # the finalizer's interrupt did not stop it there
    assert received == [signal.SIGTERM]  # one signal, not a second (which would exit at once)
    assert capsys.readouterr().err == ""


def test_other_unraisable_exceptions_are_still_reported() -> None:
    seen = []
    hook, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        with _stop_on_signals([]):

            def fails() -> None:
                raise ValueError("in a finalizer")

            _collected_while(fails)
    finally:
        sys.unraisablehook = hook
    assert [type(info.exc_value) for info in seen] == [ValueError]
