"""The managed model: one owner of retries, pacing, caching, progress and failures, for every provider.

A provider says what its wire looks like (:class:`~pytest_restore.models.api.ModelAPI`);
everything a run needs around a call is here, once, for chat and embeddings alike:

- **Retries.** Exponential backoff with full jitter on what the provider
  classifies as retryable (429, 408/409, 5xx; Anthropic's 529), timeouts,
  dropped connections and malformed bodies, honouring ``Retry-After`` /
  ``retry-after-ms``; a reply the ``validator`` rejects is retried too.
  After ``max_tries`` the call fails: one failed call never raises. A
  ``Retry-After`` longer than ``max_retry_after`` ends the call with that
  reason rather than being slept through.
- **The fatal state.** An error every later request would share (a rejected
  key, a model the server does not know, an unreachable server, a structured
  reply the server does not take, a response cache that cannot be written) is said once, kept in :attr:`fatal_error`, and
  fails every later call of the model unsent, so the caller stops the run.
- **Pacing.** Optional ``rpm``/``tpm`` meters, and an adaptive limit of calls
  in flight (``pacing.AdaptiveLimit``) that starts at one and grows while the
  server keeps up, halved on timeouts and overload answers.
- **Replicas.** A model served at several base URLs (``--restore-base-url``
  with commas: replicas of one vLLM model) sends each attempt to the replica
  with the fewest calls in flight; each replica has its own adaptive limit
  and meters; a replica that cannot be reached, or that fails
  :data:`SET_ASIDE_AFTER` attempts in a row (timeouts, 5xx, malformed
  replies), is set aside (``set_aside``: the run's controller says it once, on the
  terminal and in the report), and its calls go to the others; a call
  whose attempt failed on one replica is tried again on another at once (the
  run stops only when none is left). One response cache serves them all: a
  reply does not depend on which replica gave it.
- **The response cache** (``cache.ResponseCache``): identical requests are
  sent once per batch, per run and across processes; a failed call is shared
  with the run's other processes.
- **Progress, usage and failures by cause** (:attr:`failure_causes`).

Calls are made from a pool of worker threads over the standard library's
HTTP client (``models.http``): a blocking call releases the interpreter lock
while it waits, and costs far less per call than an async client (the
throughput bench, ``benches/bench_throughput.py``, prints both rates). The
key is never logged, stored or put in an error: every text a server returns
passes :func:`~pytest_restore.models.redact.redact_keys` first.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import os
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from pytest_restore.models.api import FAIL, FATAL, OVERLOADED, CallFailure, ModelAPI
from pytest_restore.models.cache import KeyLock
from pytest_restore.models.interrupt import register
from pytest_restore.models.pacing import AdaptiveLimit, Clock, RateMeter
from pytest_restore.models.progress import Progress
from pytest_restore.models.redact import redact_keys

if TYPE_CHECKING:
    from typing_extensions import Self

logger = logging.getLogger("pytest_restore.models")

T = TypeVar("T")
#: How the model waits a number of seconds (a test passes one that records the waits).
Wait = Callable[[float], None]

#: Default longest ``Retry-After`` a call sleeps through; a longer one fails the call, said.
DEFAULT_MAX_RETRY_AFTER = 60.0
#: Attempts in a row a replica fails (no answer in time, a 5xx, a malformed reply) before it is set
#: aside while another replica still serves: one bad attempt may be chance, three are a replica that
#: hangs or errs on every request, whose calls would otherwise each wait out their tries on it.
SET_ASIDE_AFTER = 3
#: ``CallOutcome.last_kind`` of a call that timed out and is to be sent again in parts (``split_on_timeout``).
SPLIT = "timeout, to split"


def split_base_urls(base_url: str | None) -> list[str | None]:
    """``--restore-base-url`` as replicas: ``"A,B"`` -> ``["A", "B"]``; none given -> ``[None]`` (the default)."""
    urls = [part.strip() for part in (base_url or "").split(",") if part.strip()]
    return list(dict.fromkeys(urls)) or [None]


@dataclass(eq=False)
class Replica:
    """One base URL of a model: its API object, its own adaptive limit and rate meters."""

    api: ModelAPI
    limit: AdaptiveLimit
    request_meter: RateMeter | None = None
    token_meter: RateMeter | None = None
    #: Why it was set aside (nothing listens there), or ``None`` while it serves.
    down: str | None = None
    #: Attempts sent to it.
    sent: int = 0
    #: Attempts it answered usefully.
    answered: int = 0
    #: Attempts in a row it failed (reset by an answer): :data:`SET_ASIDE_AFTER` sets it aside.
    failed_in_a_row: int = 0


class Unsent(Exception):
    """The model stopped (fatal error or interrupt) before this call was sent."""


@dataclass
class CallOutcome:
    """What one call through the retry loop came to."""

    value: Any = None
    error: str | None = None
    unsent: bool = False
    #: the kind of the last failure (``timeout``, ``status``, ...), for a caller that splits
    last_kind: str = ""
    last_status: int = 0
    #: the replica whose slot the caller still holds (``hold``), and the call's latency
    held: Replica | None = None
    latency: float | None = None


class ManagedCalls:
    """What every managed model shares: replicas, worker threads, the retry loop and the fatal state."""

    def __init__(
        self,
        apis: Sequence[ModelAPI],
        *,
        max_concurrency: int = 16,
        rpm: float | None = None,
        tpm: float | None = None,
        max_tries: int = 6,
        timeout: float = 60.0,
        progress: Progress | None = None,
        backoff_base: float = 1.0,
        backoff_cap: float = 60.0,
        max_retry_after: float = DEFAULT_MAX_RETRY_AFTER,
        adaptive: bool = True,
        clock: Clock = time.monotonic,
        sleep: Wait | None = None,
        stall_after: int | None = None,
    ) -> None:
        """Configure the calls; nothing is sent until asked.

        ``apis``: one per replica (base URL) of the model. ``max_concurrency``
        is per process and per replica; ``rpm``/``tpm`` are the server's limits
        (per replica), split evenly over pytest-xdist workers. ``timeout`` bounds
        each attempt, body included; ``max_tries`` counts attempts.
        ``backoff_base``/``backoff_cap`` shape the jittered exponential backoff
        in seconds; ``max_retry_after`` is the longest server-requested wait
        slept through. ``adaptive`` (default) lets concurrency grow from 1 to
        ``max_concurrency``; ``False`` holds it there. ``clock`` and ``sleep``
        are the time the model waits in (rate meters, backoff, ``Retry-After``,
        another process's cache lock): a test passes a virtual clock and a sleep
        that records its waits; latency is always measured on the real clock.
        ``stall_after``: that many attempts in a row without an answer within
        ``timeout`` (none answered in between) stop the model, said (``None``:
        each call gives up after its own tries only).
        """
        if not apis:
            raise ValueError("a managed model needs at least one API")
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if max_tries < 1:
            raise ValueError("max_tries must be at least 1")
        self.apis = list(apis)
        self.api = self.apis[0]
        self.model = self.api.model
        self.max_concurrency = max_concurrency
        self.max_tries = max_tries
        self.timeout = timeout
        self.progress = progress
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.max_retry_after = max_retry_after
        self.adaptive = adaptive
        self.rpm = rpm
        self.tpm = tpm
        self.stall_after = stall_after
        #: Attempts in a row that got no answer within ``timeout`` (any answer resets it).
        self.unanswered_in_a_row = 0
        self._clock = clock
        self._sleep = sleep
        #: Failed calls (after their retries) by cause, for the run's failure summary.
        self.failure_causes: Counter[str] = Counter()
        #: The first error every later call would share: the run should stop on it.
        self.fatal_error: str | None = None
        #: Whether ``fatal_error`` is the response cache that could not be written (an I/O failure, not the model's).
        self.fatal_io = False
        # Each xdist worker is a separate process with its own meters; the server sees their sum.
        workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
        self.replicas = [
            Replica(
                api,
                self._new_limit(),
                RateMeter(rpm / workers, clock=clock) if rpm else None,
                RateMeter(tpm / workers, clock=clock) if tpm else None,
            )
            for api in self.apis
        ]
        self._changed = threading.Condition()
        #: Calls waiting for a slot, by ticket: the oldest is let out first (calls go out in order).
        self._waiting: set[int] = set()
        self._tickets = itertools.count()
        self._local = threading.local()
        self._jitter = random.Random()
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._executor_pid: int | None = None
        #: Ctrl-C came (``interrupt``): every call of this model ends unsent, now and after.
        self._interrupted = threading.Event()
        self._stops: set[threading.Event] = set()  # each batch of calls in flight's own stop
        register(self)

    def _new_limit(self) -> AdaptiveLimit:
        limit = AdaptiveLimit(self.max_concurrency, self.timeout)
        if not self.adaptive:
            limit.limit = limit.peak = self.max_concurrency
        return limit

    # -- what callers read ----------------------------------------------------------

    @property
    def name(self) -> str:
        """``PROVIDER:MODEL``, as records and reports show it."""
        return f"{self.api.provider}:{self.model}"

    @property
    def base_url(self) -> str:
        """The (first) base URL requests go to."""
        return self.api.base_url

    @property
    def concurrency_peak(self) -> int:
        """The most calls the adaptive limits let in flight at once, over the replicas (0 before any call)."""
        return sum(r.limit.peak for r in self.replicas if r.sent) if any(r.sent for r in self.replicas) else 0

    @property
    def set_aside(self) -> dict[str, str]:
        """The replicas set aside while others served, by address: why (the run's controller says each once)."""
        if len(self.replicas) < 2:
            return {}  # the one replica's failure is the model's: its fatal error or its failed calls
        with self._changed:
            return {r.api.where: r.down for r in self.replicas if r.down is not None}

    @property
    def call_deadline(self) -> float:
        """The longest one distinct request can take: every try, each timed out, each followed by the longest wait."""
        return self.max_tries * (self.timeout + max(self.backoff_cap, self.max_retry_after)) + self.timeout

    def __repr__(self) -> str:
        # Spelled out so that no future attribute (the key) leaks into a repr.
        urls = ",".join(r.api.base_url for r in self.replicas)
        return f"{type(self).__name__}(model={self.model!r}, base_url={urls!r})"

    # -- threads --------------------------------------------------------------------

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        """The worker threads, started on first use (and again after a fork)."""
        with self._lock:
            if self._executor is None or self._executor_pid != os.getpid():
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.max_concurrency * len(self.replicas) + 4, thread_name_prefix=f"{self.name} calls"
                )
                self._executor_pid = os.getpid()
            return self._executor

    def _gather(self, jobs: Sequence[Callable[[threading.Event], T]], what: str) -> list[T]:
        """Run ``jobs`` on the worker threads and return their results in order.

        Waited for within a deadline (every job as long as its calls can take,
        one after another), so nothing waits for ever; Ctrl-C stops the
        sending (calls in flight end within their timeout, replies already
        in are cached) and is raised.
        """
        if not jobs:
            return []
        stop = threading.Event()
        self._stops.add(stop)
        if self._interrupted.is_set():
            stop.set()
        pool = self._pool()
        futures = []
        with self._changed:  # tickets in the order the executor starts the jobs: the lowest waiting has a thread
            for job in jobs:
                ticket = next(self._tickets)
                self._waiting.add(ticket)
                futures.append(pool.submit(self._ticketed, ticket, job, stop))
        deadline = time.monotonic() + self.call_deadline * len(jobs) + 60.0
        try:
            _done, pending = concurrent.futures.wait(futures, timeout=max(0.0, deadline - time.monotonic()))
            if pending:
                raise TimeoutError(f"{self.name}: {what} of {len(jobs)} did not end within its deadline")
            return [future.result() for future in futures]
        except BaseException:
            stop.set()
            for future in futures:
                future.cancel()
            raise
        finally:
            self._stops.discard(stop)

    def interrupt(self) -> None:
        """Ctrl-C (``models.interrupt``): every call of this model ends now, unsent, and none is sent after;
        an attempt waiting on a silent server is cut, not waited out."""
        self._interrupted.set()
        for stop in list(self._stops):
            stop.set()
        for api in self.apis:
            api.abort()

    def _ticketed(self, ticket: int, job: Callable[[threading.Event], T], stop: threading.Event) -> T:
        """Run ``job`` under ``ticket``, its place in the queue for slots (the order it was asked in).

        The ticket waits from the job's submission until its first slot, so
        calls go out in the order they were asked for; a job that needs no
        slot (a cache hit) or waits for another process gives its place up.
        """
        self._local.ticket = ticket
        try:
            return job(stop)
        finally:
            self._give_up_place()

    def _give_up_place(self) -> None:
        """This thread's job competes for no slot now (it waits for another process, or it is done)."""
        with self._changed:
            self._waiting.discard(getattr(self._local, "ticket", -1))
            self._changed.notify_all()

    def close(self) -> None:
        """Close the connections and stop the worker threads; the next call starts them again."""
        with self._lock:
            executor, owned = self._executor, self._executor_pid == os.getpid()
            self._executor = None
        if executor is not None and owned:
            executor.shutdown(wait=True, cancel_futures=True)
        for api in self.apis:
            api.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- waiting --------------------------------------------------------------------

    def _wait(self, seconds: float, stop: threading.Event) -> None:
        if seconds <= 0:
            return
        if self._sleep is not None:
            self._sleep(seconds)
        else:
            stop.wait(seconds)

    def _acquire(self, stop: threading.Event, avoid: Replica | None = None) -> Replica | None:
        """A slot on the serving replica with the fewest calls in flight (``None``: none serves, or stopped).

        ``avoid``: the replica the call's last attempt failed on, taken only when no other serves.
        """
        ticket: int = getattr(self._local, "ticket", -1)
        with self._changed:
            self._waiting.add(ticket)
            try:
                while True:
                    if stop.is_set() or self.fatal_error is not None:
                        return None
                    serving = [r for r in self.replicas if r.down is None]
                    if not serving:
                        return None
                    serving = [r for r in serving if r is not avoid] or serving
                    free = [r for r in serving if r.limit.in_flight < r.limit.limit]
                    if free and ticket == min(self._waiting):
                        chosen = min(free, key=lambda r: (r.limit.in_flight, r.sent))
                        chosen.limit.in_flight += 1
                        chosen.sent += 1
                        if len(free) > 1 or chosen.limit.in_flight < chosen.limit.limit:
                            self._changed.notify_all()  # the next in line may go too
                        return chosen
                    self._changed.wait(0.5)
            finally:
                self._waiting.discard(ticket)

    def _release(self, replica: Replica, latency: float | None = None, overloaded: bool = False) -> None:
        with self._changed:
            replica.limit.in_flight -= 1
            if overloaded:
                replica.limit.overloaded()
            if latency is not None:
                replica.limit.succeeded(latency)
            self._changed.notify_all()

    def _failed_on(self, replica: Replica, why: str) -> bool:
        """Count a failed attempt against ``replica``; whether another replica serves (to try it there).

        The :data:`SET_ASIDE_AFTER`-th failure in a row sets the replica aside (said once), unless it
        is the last one serving: a model with one replica keeps its retries and its stall rule.
        """
        with self._changed:
            others = [r for r in self.replicas if r.down is None and r is not replica]
            if not others:
                return False
            replica.failed_in_a_row += 1
            if replica.down is None and replica.failed_in_a_row >= SET_ASIDE_AFTER:
                replica.down = f"{replica.api.where} failed {replica.failed_in_a_row} attempts in a row ({why})"
                # said on the terminal once a run by the controller (``set_aside``); here, the moment, for a log
                logger.info("%s: %s; set aside, its calls go to the other replicas", self.name, replica.down)
            self._changed.notify_all()
            return True

    def _throttle(self, replica: Replica, token_cost: int, stop: threading.Event) -> None:
        waits = [0.0]
        if replica.request_meter is not None:
            waits.append(replica.request_meter.reserve(1))
        if replica.token_meter is not None:
            waits.append(replica.token_meter.reserve(token_cost))
        self._wait(max(waits), stop)

    def _backoff(self, attempt: int) -> float:
        # Full jitter (AWS architecture blog): uniform over the whole window,
        # so retries of a burst of failures spread out instead of re-colliding.
        return self._jitter.uniform(0.0, min(self.backoff_cap, self.backoff_base * 2 ** (attempt - 1)))

    # -- the fatal state ------------------------------------------------------------

    def _stop_run(self, error: str, *, io: bool = False) -> str:
        """Fail this call and every later one unsent (``fatal_error`` tells the caller to stop)."""
        self._claim_stop(error, io=io)
        return error

    def _claim_stop(self, error: str, *, io: bool = False) -> bool:
        """Set the fatal state; whether this call set it (``False``: another call stopped the model first)."""
        with self._changed:
            first = self.fatal_error is None
            if first:
                self.fatal_error = error
                self.fatal_io = io
            self._changed.notify_all()
        if first:
            logger.error("%s: %s; failing the rest of its calls unsent", self.name, error)
        return first

    def _unanswered(self) -> str | None:
        """Count an attempt that got no answer in time; why the model stops, once ``stall_after`` are in a row."""
        with self._lock:
            self.unanswered_in_a_row += 1
            count = self.unanswered_in_a_row
        if self.stall_after is None or count < self.stall_after:
            return None
        return (
            f"{count} requests in a row got no answer within {self.timeout:g}s (--restore-timeout): "
            f"{self.api.where} is not answering; stopped rather than waiting on every request's "
            f"{self.max_tries} tries"
        )

    def _count_failure(self, error: str) -> None:
        with self._lock:
            self.failure_causes[failure_cause(error)] += 1

    # -- the one retry loop -----------------------------------------------------------

    def _post(
        self,
        build: Callable[[ModelAPI], tuple[str, dict[str, Any]]],
        read: Callable[[ModelAPI, Any], tuple[Any, str]],
        stop: threading.Event,
        *,
        token_cost: int = 0,
        lock: KeyLock | None = None,
        tries: int | None = None,
        hold: bool = False,
        split_on_timeout: bool = False,
        stop_on_failure: bool = False,
    ) -> CallOutcome:
        """Send a request with bounded, jittered retries, each attempt to the least busy replica; never raises.

        ``build`` gives the path and body for a replica's API; ``read`` turns
        the decoded answer into a value, or ``None`` and why it is unusable (a
        reply too long for its budget is not sent again). ``hold``: a
        success keeps its slot (``CallOutcome.held``) until the caller releases it,
        once the answer is stored, so a cache that cannot be written stops the
        model before another call is let out. ``split_on_timeout``: a
        timed-out attempt ends the call at once (``last_kind`` ``timeout``), for
        a caller that sends the request again in smaller parts rather than whole.
        ``stop_on_failure``: a call that fails for good sets ``stop`` before its
        slot is given back, so no call waiting for the slot goes out after it.
        """
        last_error = "no attempt made"
        last_kind, last_status = "", 0
        tries = tries or self.max_tries
        # The slot is kept through the backoff after a reply that was an error (the server is
        # there, and a retry waiting its turn should not let a newer call out before it), and
        # given back after a timeout or a dropped connection, so the retry may go to another replica.
        replica: Replica | None = None
        failed_on: Replica | None = None  # the replica the last attempt failed on: the next goes elsewhere
        handed = False  # the slot went to the caller with the answer (``hold``)
        try:
            for attempt in range(1, tries + 1):
                if self.fatal_error is not None:
                    return CallOutcome(error=self.fatal_error, unsent=True)
                if replica is None:
                    replica = self._acquire(stop, failed_on)
                if replica is None:
                    if self.fatal_error is not None or stop.is_set():
                        return CallOutcome(error=self.fatal_error or "interrupted before it was sent", unsent=True)
                    reasons = "; ".join(sorted({r.down or "" for r in self.replicas}))
                    return CallOutcome(error=self._stop_run(f"no replica of {self.name} can be reached: {reasons}"))
                latency: float | None = None
                held = False
                keep = False
                give_up = True  # this attempt ends the call, unless it is tried again
                overloaded = False
                retry_after: float | None = None
                elsewhere = False  # tried again at once on another replica
                api = replica.api
                try:
                    self._throttle(replica, token_cost, stop)
                    if lock is not None:
                        lock.touch()
                    started = time.monotonic()  # the server's real latency, whatever ``clock`` is
                    path, body = build(api)
                    try:
                        decoded = api.send(path, body, self.timeout)
                    except CallFailure as failure:
                        last_kind, last_status = failure.kind, failure.status
                        if failure.kind != "timeout":
                            self.unanswered_in_a_row = 0  # it answered, if not well
                        detail = redact_keys(failure.detail)
                        if failure.kind == "status":
                            status = failure.status
                            refused = api.refused_shape(status, detail, body)
                            if refused is not None:  # every request of this shape would be refused alike
                                return CallOutcome(error=self._stop_run(refused))
                            verdict = api.classify(status)
                            if verdict == FATAL:
                                return CallOutcome(error=self._stop_run(api.fatal_message(status, detail)))
                            if verdict == FAIL:
                                return CallOutcome(error=f"HTTP {status} (not retried): {detail}", last_kind="status", last_status=status)
                            last_error = f"HTTP {status}: {detail}"
                            overloaded = verdict == OVERLOADED
                            keep = True
                            retry_after = failure.retry_after
                            if retry_after is not None and retry_after > self.max_retry_after:
                                error = (
                                    f"{last_error}; the server asked to wait {retry_after:.0f}s, over the "
                                    f"{self.max_retry_after:g}s cap (--restore-max-retry-after)"
                                )
                                return CallOutcome(error=error)
                            if status >= 500 and self._failed_on(replica, last_error):
                                elsewhere = True
                        elif failure.kind == "timeout":
                            last_error = f"timed out after {self.timeout:g}s"
                            overloaded = True
                            if self._failed_on(replica, f"no answer within {self.timeout:g}s"):
                                # another replica serves: this one's silence is not the model's stall
                                elsewhere = True
                            else:
                                stalled = self._unanswered()
                                if stalled is not None:
                                    return CallOutcome(error=self._stop_run(stalled))
                            if split_on_timeout:
                                give_up = False  # sent again, in parts
                                return CallOutcome(error=last_error, last_kind=SPLIT)
                        elif failure.kind == "unreachable":
                            last_error = f"connection error: {detail}"
                            with self._changed:
                                first = replica.down is None  # several calls may find it gone at once
                                replica.down = replica.down or f"{api.where} is unreachable ({detail})"
                            if any(r.down is None for r in self.replicas):
                                if first:
                                    logger.info("%s: %s; its calls go to the other replicas", self.name, replica.down)
                                give_up = False
                                continue  # straight to another replica: nothing was sent
                            # Nothing listens there (or the name does not resolve): minutes of backoff
                            # would not change that, for this call or any other. Say it now.
                            if len(self.replicas) > 1:
                                reasons = "; ".join(r.down or "" for r in self.replicas)
                                message = f"no replica of {self.name} can be reached: {reasons}"
                            else:
                                message = f"{last_error} (not retried: {api.where} is unreachable)"
                            if self._claim_stop(message):
                                return CallOutcome(error=message)
                            # Calls sent at once all find the server gone; the first says so. A
                            # refused connection carried nothing: the others are unsent, not failed.
                            return CallOutcome(error=self.fatal_error or message, unsent=True)
                        elif failure.kind == "malformed":
                            last_error = f"malformed response: {detail}"
                            keep = True
                            elsewhere = self._failed_on(replica, "malformed replies")
                        else:
                            last_error = f"connection error: {detail}"
                            elsewhere = self._failed_on(replica, "connections dropped")
                    else:
                        self.unanswered_in_a_row = 0
                        value, problem = read(api, decoded)
                        if value is not None:
                            give_up = False
                            latency = time.monotonic() - started
                            replica.answered += 1
                            replica.failed_in_a_row = 0
                            held = hold
                            return CallOutcome(value=value, held=replica if hold else None, latency=latency)
                        last_error = redact_keys(problem)
                        last_kind = "malformed"
                        keep = True
                        if problem.startswith("reply too long"):
                            return CallOutcome(error=problem)  # sending it again costs as much
                    give_up = attempt >= tries
                    if elsewhere:
                        keep = False  # its slot is given back: the next attempt goes to another replica
                        failed_on = replica
                finally:
                    if give_up and stop_on_failure and not held:
                        stop.set()
                    if held:
                        handed = True
                    elif not keep or attempt >= tries:
                        self._release(replica, latency, overloaded)
                        replica = None
                    elif overloaded:
                        with self._changed:
                            replica.limit.overloaded()
                if self._interrupted.is_set():  # its attempt was cut: the server's answer is unknown, nothing kept
                    return CallOutcome(error="interrupted (Ctrl-C)", unsent=True)
                if attempt < tries:
                    if stop.is_set():
                        return CallOutcome(error="interrupted before its next try", unsent=True)
                    if elsewhere:
                        continue  # another replica serves: no backoff for this one's failure
                    delay = retry_after if retry_after is not None else self._backoff(attempt)
                    logger.debug("%s: attempt %d/%d failed (%s); retrying in %.2fs", self.name, attempt, tries, last_error, delay)
                    if self.progress is not None:
                        self.progress.retry()
                    self._wait(delay, stop)
        finally:
            if replica is not None and not handed:
                self._release(replica)
        error = f"failed after {tries} tries: {last_error}"
        logger.warning("%s: %s", self.name, error)
        return CallOutcome(error=error, last_kind=last_kind, last_status=last_status)


def failure_cause(error: str) -> str:
    """A failed call's error without what differs between calls: the key its failures are grouped by.

    ``failed after 6 tries: HTTP 500: boom`` -> ``HTTP 500: boom``; a
    validator's rejection loses the rejected text.
    """
    cause = re.sub(r"^failed after \d+ tries: ", "", error)
    if cause.startswith("reply rejected by validator"):
        return "reply rejected by validator (not the expected format)"
    if cause.startswith("reply too long"):
        return "reply too long for its output budget (refused, not stored)"
    return cause if len(cause) <= 160 else cause[:157] + "..."
