"""How fast calls to a model go out: rate meters, adaptive concurrency, ``Retry-After``.

The managed model (``managed.ManagedCalls``) paces its calls with these: a ``RateMeter`` per limit
(requests and tokens per minute) tells how long to wait before the next
call, an ``AdaptiveLimit`` says how many calls may be in flight, grown from
one while the server keeps up, and ``parse_retry_after`` reads how long a
server asked to be left alone. The time they wait in is a ``Clock`` and a
``Sleep`` (the real ones unless a test passes virtual ones).
"""

from __future__ import annotations

import email.utils
import math
import threading
import time
from collections.abc import Callable, Mapping

#: A clock in seconds (``time.monotonic`` unless a test passes a virtual one).
Clock = Callable[[], float]
#: ``parse_retry_after`` clips absurd waits to this (a day): the caller compares
#: what is left with its own cap (``ManagedCalls.max_retry_after``).
MAX_RETRY_AFTER = 86400.0


def parse_retry_after(
    headers: Mapping[str, str] | None, *, now: float | None = None
) -> float | None:
    """Seconds the server asked us to wait, from ``retry-after-ms`` or ``Retry-After``.

    ``Retry-After`` may be seconds or an HTTP date. ``None`` when no usable
    header is present; negative waits become 0; waits are capped at
    ``MAX_RETRY_AFTER``.
    """
    if headers is None:
        return None
    lowered = {name.lower(): value for name, value in headers.items()}
    seconds: float | None = None
    milliseconds = lowered.get("retry-after-ms")
    if milliseconds is not None:
        try:
            seconds = float(milliseconds) / 1000.0
        except ValueError:
            seconds = None
    value = lowered.get("retry-after")
    if seconds is None and value is not None:
        try:
            seconds = float(value)
        except ValueError:
            try:
                date = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError, IndexError):
                return None
            seconds = date.timestamp() - (time.time() if now is None else now)
    if seconds is None or math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


class RateMeter:
    """A leaky bucket over a per-minute limit (requests or tokens), thread-safe.

    The bucket holds one second's worth (providers enforce per-minute limits
    over shorter windows), so a burst is brief and the long-run rate stays
    at ``per_minute``. A single reservation larger than the bucket goes
    through when the bucket is empty.
    """

    def __init__(self, per_minute: float, *, clock: Clock = time.monotonic) -> None:
        """A meter of ``per_minute`` units; ``clock`` tells the time (a test may pass a virtual one)."""
        if per_minute <= 0:
            raise ValueError(f"rate limit must be positive, got {per_minute}")
        self.per_second = per_minute / 60.0
        self.capacity = max(1.0, self.per_second)
        self._clock = clock
        self._level = 0.0
        self._updated = clock()
        self._lock = threading.Lock()

    def reserve(self, amount: float) -> float:
        """Reserve ``amount`` now; returns how long to wait before using it."""
        with self._lock:
            now = self._clock()
            self._level = max(0.0, self._level - (now - self._updated) * self.per_second)
            self._updated = now
            excess = self._level + amount - max(self.capacity, amount)
            self._level += amount
            return max(0.0, excess / self.per_second)


class AdaptiveLimit:
    """How many calls may be in flight, adapted to what the server can take.

    A local llama.cpp or Ollama server often computes one request at a time:
    sixteen concurrent calls queue there, the last ones time out, are sent
    again and computed twice. So the limit starts at 1 and grows by one per
    success whose latency stayed within ``1.5x`` the fastest seen (the server
    took the extra call in parallel); it stops growing when latency rises with
    the load (a queue), and halves on a timeout, a 429 or a 503. While the
    limit is small (below 4) it only grows when a queue of the new size would
    still end well within ``timeout``, so a slow one-slot server is never
    given a call it could not finish in time. ``peak`` is the highest limit
    reached (reports show it). Its owner (``managed``) holds a lock around it and does the waiting.
    """

    def __init__(self, maximum: int, timeout: float) -> None:
        self.maximum = maximum
        self.timeout = timeout
        self.limit = 1
        self.peak = 1
        self.in_flight = 0
        self.fastest: float | None = None

    def succeeded(self, latency: float) -> bool:
        """A call came back well after ``latency`` seconds: maybe allow one more (``True`` when it did)."""
        self.fastest = latency if self.fastest is None else min(self.fastest, latency)
        if self.limit >= self.maximum or latency > 1.5 * self.fastest + 0.01:
            return False
        if self.limit < 4 and (self.limit + 1) * self.fastest > 0.5 * self.timeout:
            return False  # on a one-slot server the extra call would wait out its deadline
        self.limit += 1
        self.peak = max(self.peak, self.limit)
        return True

    def overloaded(self) -> None:
        """A timeout, 429 or 503: halve the limit (calls in flight finish)."""
        self.limit = max(1, self.limit // 2)
