"""SIGTERM handled as Ctrl-C by the commands that write results (``run``, ``replay``,
``sweep``): the interrupt unwinds the command, so its temporary files and half-written folders
are removed and what was there before stays, and the process exits 128 + 15 = 143."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer

AGAIN_S = 0.001
"""How long after a finalizer swallowed an interrupt its signal is sent again."""


@contextmanager
def stop_on_signals(received: list[int]) -> Iterator[None]:
    """While the block runs, SIGTERM (and SIGINT, unless it is ignored, as in a background job)
    raises ``KeyboardInterrupt`` in the main thread, as Ctrl-C does, and is appended to
    ``received``. A second signal exits at once.

    A signal can land while the main thread runs a finalizer (a ``weakref`` callback or a
    ``__del__``: the process pool and its queues clean up in such), where Python does not let
    the exception propagate: it would print it ("Exception ignored in ...") and carry on. Such
    a swallowed interrupt is not printed (:data:`sys.unraisablehook`): its signal is sent to
    the main thread again ``AGAIN_S`` later by a thread kept for that, to arrive once the
    finalizer has returned (and again if it lands in another one). A signal that lands in that
    hook, or once the block is ending, is kept for later too: one not sent again by the time
    the block has ended raises the interrupt there."""
    if threading.current_thread() is not threading.main_thread():  # signals go to the main one
        yield
        return
    main = threading.main_thread().ident
    assert main is not None
    pending: list[int] = []  # signals to send again
    later, closed = [False], [False]  # keep signals for later; the sending thread stops
    lock, wake = threading.Lock(), threading.Event()

    def stop(signum: int, frame: Any) -> None:
        if later[0]:  # (raised in the hook or as the block ends, it would be lost)
            pending.append(signum)
            return
        if received:
            os._exit(128 + signum)
        received.append(signum)
        raise KeyboardInterrupt

    def swallowed(info: Any) -> None:  # (sys.UnraisableHookArgs)
        if not (isinstance(info.exc_value, KeyboardInterrupt) and received):
            hook(info)
            return
        was, later[0] = later[0], True
        pending.append(received.pop())  # it stopped nothing: a first signal again
        wake.set()
        later[0] = was  # (as the block ends, signals stay kept)

    def send_again() -> None:
        while True:
            if not pending:  # (a signal kept by the hook's stop() sets no event)
                wake.wait()
            time.sleep(AGAIN_S)
            with lock:
                if closed[0]:
                    return
                wake.clear()
                signums = pending[:]
                del pending[: len(signums)]
                for signum in signums:
                    signal.pthread_kill(main, signum)

    handled = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        handled.append(signal.SIGINT)
    previous = {number: signal.signal(number, stop) for number in handled}
    hook, sys.unraisablehook = sys.unraisablehook, swallowed
    threading.Thread(target=send_again, name="specmd-signals", daemon=True).start()
    ended = False
    try:
        yield
        ended = True
    finally:
        later[0] = True  # from here every signal is kept: the restoring below runs to its end
        with lock:  # (waits out a sending; none after it)
            closed[0] = True
        wake.set()  # (the thread returns)
        sys.unraisablehook = hook
        for number, handler in previous.items():
            signal.signal(number, handler)
        if ended and pending:
            received.append(pending[0])
            raise KeyboardInterrupt


@contextmanager
def terminated_as_interrupted() -> Iterator[None]:
    """The block under :func:`stop_on_signals`; a SIGTERM that stopped it says ``interrupted``
    and exits 143 (a Ctrl-C goes on as ``KeyboardInterrupt``: 130, said by the entry point)."""
    received: list[int] = []
    try:
        with stop_on_signals(received):
            yield
    except KeyboardInterrupt:
        if received != [signal.SIGTERM]:
            raise
        print("interrupted", file=sys.stderr)
        raise typer.Exit(128 + signal.SIGTERM) from None
