"""Ctrl-C reaches every wait a run started: the model calls in flight and the gateway's answers end at once.

Python raises ``KeyboardInterrupt`` in the main thread only, and the waits
that hold a run are elsewhere: a managed model's worker thread blocked on a
socket (an upstream that never answers, for as long as ``--restore-timeout``
and its retries allow), or a memory library's own thread waiting on the run's
gateway (mem0 runs ``add`` in a thread pool and joins it before the interrupt
leaves its code). Each such wait registers here (:func:`register`), and a
run installs :class:`SigintHandler` for its lifetime: at Ctrl-C it
interrupts every registered wait (:meth:`Interruptible.interrupt`: sockets
cut, calls answered at once, none sent after) and then raises
``KeyboardInterrupt`` as Python's own handler does, so the run ends within
seconds through its usual path (the partial report, exit 2).
"""

from __future__ import annotations

import signal
import threading
import weakref
from types import FrameType
from typing import Any, Protocol

__all__ = ["Interruptible", "SigintHandler", "interrupt_all", "interrupted", "register"]


class Interruptible(Protocol):
    """A wait the run started that Ctrl-C must end: a managed model, the gateway."""

    def interrupt(self) -> None:
        """End every wait of this object now, and refuse new ones (called once Ctrl-C came)."""
        ...


_WAITS: weakref.WeakSet[Any] = weakref.WeakSet()
#: set at Ctrl-C (until the next run installs its handler): a wait that would begin after it is not begun
_INTERRUPTED = threading.Event()


def register(wait: Interruptible) -> None:
    """Have Ctrl-C end ``wait`` (held weakly: a closed model goes when nothing else holds it)."""
    _WAITS.add(wait)


def interrupt_all() -> None:
    """Interrupt every registered wait (and say so to :func:`interrupted`)."""
    _INTERRUPTED.set()
    for wait in list(_WAITS):
        wait.interrupt()


def interrupted() -> bool:
    """Whether Ctrl-C came in this run: a thread still at work (a memory library's store fed beside others)
    starts nothing new that would wait (the run's gateway)."""
    return _INTERRUPTED.is_set()


class SigintHandler:
    """Ctrl-C interrupts the registered waits, then raises ``KeyboardInterrupt`` (or calls the handler it replaced).

    Installed from the main thread only (Python's rule for signal handlers);
    elsewhere, or where SIGINT is ignored, it does nothing.
    """

    def __init__(self) -> None:
        self._previous: Any = None
        self._installed = False

    def install(self) -> None:
        """Take SIGINT from whatever handled it."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return
        _INTERRUPTED.clear()  # a new run
        previous = signal.getsignal(signal.SIGINT)
        if previous is signal.SIG_IGN or previous is None:  # ignored (a background job), or not Python's to take
            return
        self._previous = previous
        signal.signal(signal.SIGINT, self._on_sigint)
        self._installed = True

    def restore(self) -> None:
        """Give SIGINT back to the handler it had (unless another took it since)."""
        if not self._installed or threading.current_thread() is not threading.main_thread():
            return
        self._installed = False
        if signal.getsignal(signal.SIGINT) == self._on_sigint:
            signal.signal(signal.SIGINT, self._previous)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        # on a thread of its own: the main thread may be interrupted holding a lock an interrupt takes
        threading.Thread(target=interrupt_all, name="restore-interrupt", daemon=True).start()
        previous = self._previous
        __tracebackhide__ = True  # pytest says where the interrupt came, not this handler
        if callable(previous):
            previous(signum, frame)
        else:  # SIG_DFL: what Python's own handler does
            raise KeyboardInterrupt
