"""Progress: a live count of model calls on stderr.

A full audit runs for hours; whoever watches it wants to know how far it got,
how much came from the cache and whether the provider is pushing back
(retries, failures). On a terminal one line is redrawn in place (at most
about five times a second); in a CI log, where ``\\r`` produces garbage, a
line is printed at most every ``log_interval`` seconds or every 10% of the
calls, plus a final summary. Under pytest-xdist each worker prints its own
lines, prefixed with its id (``[gw0]``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO


class Progress:
    """Counts model calls and shows them on a stream (stderr by default)."""

    def __init__(
        self,
        *,
        label: str = "model calls",
        stream: TextIO | None = None,
        quiet: bool = False,
        tty: bool | None = None,
        tty_interval: float = 0.2,
        log_interval: float = 30.0,
    ) -> None:
        """Create a display.

        ``tty`` forces redraw mode on or off (default: whether ``stream`` is a
        terminal). ``quiet`` silences all output; the counts are still kept.
        """
        self.label = label
        self._stream = stream
        self.quiet = quiet
        self._tty = tty
        self.tty_interval = tty_interval
        self.log_interval = log_interval
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        self.prefix = f"[{worker}] " if worker else ""
        self.total = 0
        self.done = 0
        self.cached = 0
        self.retries = 0
        self.failures = 0
        self._started: float | None = None
        self._last_draw = 0.0
        self._last_step = 0
        self._drawn_width = 0
        self._lock = threading.Lock()

    @property
    def stream(self) -> TextIO:
        """Where lines go; resolved late so pytest's capture swaps are honoured."""
        return self._stream if self._stream is not None else sys.stderr

    @property
    def is_tty(self) -> bool:
        """Whether lines are redrawn in place."""
        if self._tty is not None:
            return self._tty
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    # -- counting ----------------------------------------------------------

    def add_total(self, calls: int) -> None:
        """Announce ``calls`` more calls to come."""
        with self._lock:
            if self._started is None:
                self._started = time.monotonic()
                if not self.is_tty:
                    # The first log line waits for progress, not the announcement.
                    self._last_draw = self._started
            self.total += calls
        self._show()

    def record(self, *, cached: bool = False, failed: bool = False) -> None:
        """Count one finished call (from the cache, failed, or plain)."""
        with self._lock:
            self.done += 1
            self.cached += cached
            self.failures += failed
        self._show()

    def retry(self) -> None:
        """Count one retried attempt."""
        with self._lock:
            self.retries += 1
        self._show()

    def close(self) -> None:
        """Print the final summary line (and end the redrawn line on a terminal)."""
        if self.quiet or self._started is None:
            return
        line = self._line(final=True)
        with self._lock:
            if self.is_tty:
                self._write("\r" + line.ljust(self._drawn_width) + "\n")
                self._drawn_width = 0
            else:
                self._write(line + "\n")

    # -- drawing -----------------------------------------------------------

    def rate(self) -> float:
        """Finished calls per second since the first announced call."""
        if self._started is None:
            return 0.0
        elapsed = time.monotonic() - self._started
        return self.done / elapsed if elapsed > 0 else 0.0

    def _line(self, *, final: bool = False) -> str:
        head = f"{self.prefix}{self.label}"
        if final:
            head += " done"
        return (
            f"{head}: {self.done}/{self.total}"
            f" | cached {self.cached} | retries {self.retries} | failed {self.failures}"
            f" | {self.rate():.1f}/s"
        )

    def _show(self) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        with self._lock:
            if self.is_tty:
                if now - self._last_draw < self.tty_interval:
                    return
                line = self._line()
                self._write("\r" + line.ljust(self._drawn_width))
                self._drawn_width = len(line)
            else:
                step = (10 * self.done) // self.total if self.total else 0
                due = now - self._last_draw >= self.log_interval
                if not (step > self._last_step or due):
                    return
                self._last_step = max(step, self._last_step)
                self._write(self._line() + "\n")
            self._last_draw = now

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed stream (end of a pytest capture) must not fail a model call
