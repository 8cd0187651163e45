"""Real models: any OpenAI-compatible chat-completions endpoint as reader, judge or scorer.

``OpenAIChatModel`` implements the ``ChatModel`` protocol. ``run`` is
synchronous for the caller and concurrent inside: the batch runs on the
model's own event loop thread with one official ``openai.AsyncOpenAI`` client
for the model's life, so pooled connections carry over from run to run
(``close()`` ends them):

- identical requests in one batch are sent once, and with a
  ``ResponseCache`` identical requests across runs and processes too;
- at most ``max_concurrency`` calls are in flight per process, and optional
  ``rpm``/``tpm`` meters keep under the provider's rate limits;
- retries are ours, not the client's (``max_retries=0``): exponential backoff
  with full jitter on 429, 408/409, 5xx, timeouts, dropped connections and
  malformed bodies, honouring ``Retry-After`` / ``retry-after-ms``; a reply
  the ``validator`` rejects is retried too. After ``max_tries`` the result is
  ``ChatResult(text=None, error=...)``: one failed call never raises;
- 400, 422 and other client errors fail at once; a 401 (wrong key), a 403
  (not allowed), a 404 (unknown model) and an unreachable server (refused, or a host that
  does not resolve) are logged as an error once, fail the rest of the batch
  without sending it, and are kept in ``fatal_error`` so the caller can stop
  the run. The key itself is never logged, stored or put in an error: every
  text a server returns (replies, error bodies, the served model id) passes
  :class:`KeyRedactor` first, which removes the key in any letter case, any
  run of at least :data:`MIN_KEY_FRAGMENT` consecutive characters of it, and
  its percent-encoded and base64 (standard or URL-safe, any alignment) forms;
- a response cache that cannot be written (a full disk) stops the run with
  one line (``fatal_error``), and a failed call is shared with the run's other
  processes through the cache (``ResponseCache.put_failure``), as a success is.

Decoding follows the model family (``decoding_parameters``): classic chat
models get the request's ``temperature`` (0 in the audit) and ``max_tokens``;
reasoning families (``gpt-5*``, ``o1*``, ``o3*``, ``o4*``) reject both, so
they get ``max_completion_tokens`` (the output budget plus an allowance for
the hidden reasoning tokens it also counts), ``reasoning_effort`` and their
default temperature.

Failures are loud and bounded: each attempt (body included) ends within
``timeout``; a ``Retry-After`` longer than ``max_retry_after`` is not slept
through but ends the call with that reason; a refused connection or an
unresolvable host is not retried for minutes; a reply far longer than the
request's output budget is refused and never cached. Every failed call's
cause is counted in ``failure_causes``. Concurrency adapts to the server
(``pacing.AdaptiveLimit``): it starts at one call in flight and grows while the
server's latency does not, and halves on timeouts and 429/503s, so a local
server that computes one request at a time is not flooded. The served snapshot id (``gpt-4o-mini-2024-07-18``) goes into
``ChatResult.extra["model"]``, the finish reason into
``extra["finish_reason"]``.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import errno
import json
import logging
import os
import random
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from pytest_restore.models.base import ChatRequest, ChatResult
from pytest_restore.models.cache import CacheError, KeyLock, ResponseCache, request_key
from pytest_restore.models.decoding import (
    decoding_parameters,
    estimate_tokens,
)
from pytest_restore.models.pacing import AdaptiveLimit, Clock, RateMeter, Sleep, parse_retry_after
from pytest_restore.models.progress import Progress

#: The model provider these models belong to: names read ``openai:MODEL``.
PROVIDER = "openai"

if TYPE_CHECKING:
    import openai
    from typing_extensions import Self

logger = logging.getLogger("pytest_restore.openai")

#: The environment variable the API key is read from (and nothing else is).
API_KEY_ENV = "OPENAI_API_KEY"
#: The environment variable a base URL is read from when none is given.
BASE_URL_ENV = "OPENAI_BASE_URL"
#: Sent as the key when the environment has none: local servers need none,
#: and the real API answers it with a 401, which is reported loudly.
PLACEHOLDER_KEY = "not-needed"

#: Statuses worth retrying: rate limits, lock/timeout conflicts, server errors.
RETRYABLE_STATUSES = frozenset({408, 409, 429})
#: Statuses that mean every request of the run will fail the same way.
#: (401: the key is wrong; 403: the key may not use this model or endpoint; 404: no such model.)
FATAL_STATUSES = frozenset({401, 403, 404})
#: Default longest ``Retry-After`` a call sleeps through; a longer one fails the call, said.
DEFAULT_MAX_RETRY_AFTER = 60.0
#: A reply longer than this many characters per output token of budget (plus a
#: margin) cannot be an answer within the budget: refused as a failed call.
MAX_CHARS_PER_TOKEN = 16
_REPLY_MARGIN_CHARS = 4096
#: The shortest run of the key's characters that is redacted where it appears (a server
#: echoing part of the key); shorter runs are too likely to be ordinary text.
MIN_KEY_FRAGMENT = 10
#: Latin upper case to lower case, one character for one, so positions in a folded text
#: are positions in the text (``str.lower`` may change a text's length).
_ASCII_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
#: Marks a result failed unsent because the run had stopped (``ChatResult.extra``; taken off before it is returned).
UNSENT = "unsent"
#: Said in place of anything redacted.
REDACTED = "[redacted]"


class KeyRedactor:
    """Removes an API key from text in the forms a server can send it back in.

    Covered: the exact key, the key in any letter case, any run of at least
    :data:`MIN_KEY_FRAGMENT` consecutive characters of it (a truncated echo
    such as ``sk-proj-AbC...``), its percent-encoding, and its base64 in the
    standard and URL-safe alphabets at any of the three byte alignments (as in
    a Basic-auth header), fragments of those included. Not covered: other
    transformations (hex, reversed, hashed, split by other text). Matching
    ignores letter case, so a base64 fragment in another case is redacted too
    (harmless: it is noise in a reply).
    """

    def __init__(self, key: str) -> None:
        forms = {key, quote(key, safe="")}
        raw = key.encode("utf-8")
        for pad in range(3):
            for encode in (base64.b64encode, base64.urlsafe_b64encode):
                encoded = encode(b"\0" * pad + raw).decode("ascii").rstrip("=")
                # drop the characters that also encode the padding bytes or a partial last group
                start = (pad * 4 + 2) // 3
                forms.add(encoded[start : len(encoded) - 2])
        size = min(MIN_KEY_FRAGMENT, len(key))
        self.size = size
        self._windows = {
            form.translate(_ASCII_FOLD)[i : i + size]
            for form in forms
            if len(form) >= size
            for i in range(len(form) - size + 1)
        }

    def __call__(self, text: str) -> str:
        """``text`` with every covered form of the key replaced by ``[redacted]``."""
        size = self.size
        if not self._windows or len(text) < size:
            return text
        folded = text.translate(_ASCII_FOLD)
        windows = self._windows
        spans: list[list[int]] = []
        for i in range(len(folded) - size + 1):
            if folded[i : i + size] in windows:
                if spans and i <= spans[-1][1]:
                    spans[-1][1] = i + size
                else:
                    spans.append([i, i + size])
        if not spans:
            return text
        out, last = [], 0
        for start, end in spans:
            out += [text[last:start], REDACTED]
            last = end
        out.append(text[last:])
        return "".join(out)

#: The error of a request a cache-only model does not hold (see ``cache_only``).
CACHE_ONLY_MISS = "no batch answered this request (--restore-batch sends no live call)"

class _RunState:
    """What the concurrent calls of one ``run`` share."""

    def __init__(self, client: openai.AsyncOpenAI, slots: AdaptiveLimit) -> None:
        self.client = client
        self.slots = slots
        #: Set by a 401/404: every later call of the run fails with it unsent.
        self.fatal_error: str | None = None


class OpenAIChatModel:
    """A chat model behind an OpenAI-compatible endpoint (the ``ChatModel`` protocol)."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        cache: ResponseCache | None = None,
        max_concurrency: int = 16,
        rpm: float | None = None,
        tpm: float | None = None,
        max_tries: int = 6,
        timeout: float = 60.0,
        validator: Callable[[str], bool] | None = None,
        progress: Progress | None = None,
        backoff_base: float = 1.0,
        backoff_cap: float = 60.0,
        max_retry_after: float = DEFAULT_MAX_RETRY_AFTER,
        adaptive: bool = True,
        cache_only: bool = False,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        """Configure the model; nothing is sent until ``run``.

        ``model`` is the provider's model name (it also keys the cache).
        ``base_url`` defaults to ``$OPENAI_BASE_URL``, then to OpenAI's API.
        The key is read only from ``$OPENAI_API_KEY``. ``max_concurrency`` is
        per process; ``rpm``/``tpm`` are the provider's limits for the whole
        run and are split evenly over pytest-xdist workers. ``timeout`` is per
        attempt, ``max_tries`` counts attempts (first one included).
        ``validator`` rejects malformed replies (retried, then failed).
        ``backoff_base``/``backoff_cap`` shape the jittered exponential backoff
        in seconds. ``max_retry_after`` is the longest server-requested wait
        slept through. ``adaptive`` (default) lets concurrency grow from 1 to
        ``max_concurrency`` as the server keeps up; ``False`` holds it at
        ``max_concurrency`` (a fixed limit, for comparison).
        ``cache_only`` answers from the cache alone: a request it does not
        hold fails unsent (under ``--restore-batch`` every reply comes from a
        batch, never from a live call).
        ``clock`` and ``sleep`` are the time the model waits in (rate meters,
        backoff, ``Retry-After``, another process's cache lock): a test passes
        a virtual clock and a sleep that records its waits and returns at
        once, instead of asserting on wall-clock time. Latency (which steers
        the adaptive limit) is always measured on the real clock.
        """
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if max_tries < 1:
            raise ValueError("max_tries must be at least 1")
        self.model = model
        self.base_url = base_url or os.environ.get(BASE_URL_ENV) or None
        self.cache = cache
        self.max_concurrency = max_concurrency
        self.max_tries = max_tries
        self.timeout = timeout
        self.validator = validator
        self.progress = progress
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.max_retry_after = max_retry_after
        self.adaptive = adaptive
        self.cache_only = cache_only
        #: Failed calls (after their retries) by cause, for the run's failure summary.
        self.failure_causes: Counter[str] = Counter()
        #: The first authentication or unknown-model error: the run should stop on it.
        self.fatal_error: str | None = None
        #: Whether ``fatal_error`` is the response cache that could not be written (an I/O failure, not the model's).
        self.fatal_io = False
        key = os.environ.get(API_KEY_ENV)
        self._key_from_env = bool(key)
        self._api_key = key or PLACEHOLDER_KEY
        self._redactor = KeyRedactor(key) if key else None
        # Each xdist worker is a separate process with its own meters; the
        # provider sees their sum.
        workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
        self.rpm = rpm
        self.tpm = tpm
        self._clock = clock
        self._sleep = sleep
        self._request_meter = RateMeter(rpm / workers, clock=clock) if rpm else None
        self._token_meter = RateMeter(tpm / workers, clock=clock) if tpm else None
        self._jitter = random.Random()
        self._loop_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_pid: int | None = None
        self._thread: threading.Thread | None = None
        self._client: openai.AsyncOpenAI | None = None
        self._slots: AdaptiveLimit | None = None

    @property
    def concurrency_peak(self) -> int:
        """The most calls the adaptive limit let in flight at once (0 before any call)."""
        return self._slots.peak if self._slots is not None else 0

    @property
    def name(self) -> str:
        """``openai:<model>``, as records and reports show it."""
        return f"{PROVIDER}:{self.model}"

    def __repr__(self) -> str:
        # Spelled out so that no future attribute (the key) leaks into a repr.
        return f"OpenAIChatModel(model={self.model!r}, base_url={self.base_url!r})"

    # -- the protocol ------------------------------------------------------

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Answer every request, in order. Never raises for a single failed call."""
        if not requests:
            return []
        # The batch runs on the model's own event loop thread, so this works
        # from plain code and from inside someone else's event loop alike.
        future = asyncio.run_coroutine_threadsafe(self._run(requests), self._event_loop())
        # Every await of a call has its own deadline, so the batch has one too: the calls one
        # after another, each as long as it can take. Waited for in slices, so a loop thread
        # that died is noticed rather than waited on for ever.
        deadline = time.monotonic() + self.call_deadline * len(requests) + 60.0
        try:
            while True:
                try:
                    return future.result(timeout=1.0)
                except concurrent.futures.TimeoutError:
                    thread = self._thread
                    if thread is None or not thread.is_alive():
                        raise RuntimeError(f"{self.name}: the model's event loop stopped mid-batch") from None
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"{self.name}: a batch of {len(requests)} requests did not end within its deadline"
                        ) from None
        except BaseException:
            future.cancel()  # Ctrl-C: stop sending; completed replies are cached
            raise

    @property
    def call_deadline(self) -> float:
        """The longest one distinct request can take: every try, each timed out, each followed by the longest wait."""
        return self.max_tries * (self.timeout + max(self.backoff_cap, self.max_retry_after)) + self.timeout

    def close(self) -> None:
        """Close the connections and stop the model's event loop; ``run`` restarts them."""
        with self._loop_lock:
            loop, thread, client = self._loop, self._thread, self._client
            owned = self._loop_pid == os.getpid()
            self._loop = self._thread = self._client = self._slots = None
        if loop is None or thread is None or not owned:
            return
        if client is not None:
            asyncio.run_coroutine_threadsafe(client.close(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """The model's event loop, started on first use (and again after a fork)."""
        with self._loop_lock:
            if self._loop is None or self._loop_pid != os.getpid():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name=f"{self.name} calls", daemon=True
                )
                thread.start()
                self._loop, self._thread, self._loop_pid = loop, thread, os.getpid()
                self._client = self._slots = None
            return self._loop

    async def _run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        keys = [request_key(self.model, request) for request in requests]
        distinct: dict[str, ChatRequest] = {}
        for key, request in zip(keys, requests):
            distinct.setdefault(key, request)
        if self.progress is not None:
            self.progress.add_total(len(distinct))
        if self._client is None or self._slots is None:
            import openai  # imported on first use: runs with the fake models never load it

            # One client for the model's life, made on its loop: pooled
            # connections (and their TLS sessions) carry over between runs.
            self._client = openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.base_url,
                max_retries=0,  # retries are ours: jitter, Retry-After, validator
                timeout=self.timeout,
            )
            # Shared by concurrent runs from several threads: the cap is per model.
            self._slots = AdaptiveLimit(self.max_concurrency, self.timeout)
            if not self.adaptive:
                self._slots.limit = self._slots.peak = self.max_concurrency
        state = _RunState(self._client, self._slots)
        # A wrong key, an unknown model, an unreachable server or a full disk does not heal within
        # the run: a later batch fails unsent too, so the run stops at its first call.
        state.fatal_error = self.fatal_error
        answers = await asyncio.gather(
            *(self._answer(state, key, request) for key, request in distinct.items())
        )
        by_key = dict(zip(distinct, answers))
        return [by_key[key] for key in keys]

    # -- one distinct request ----------------------------------------------

    async def _answer(self, state: _RunState, key: str, request: ChatRequest) -> ChatResult:
        try:
            result = await self._answer_via_cache(state, key, request)
        except asyncio.CancelledError:
            raise
        except CacheError as exc:  # a full disk: every later call would be paid for and lost
            result = self._stop_run(state, str(exc), io=True)
        except Exception as exc:  # one bug must not sink the whole batch
            logger.exception("unexpected error answering a request for %s", self.name)
            result = ChatResult(text=None, error=self._redact(f"internal error: {exc!r}"))
        if result.extra.get(UNSENT):
            # never sent: the run stops on the error that stopped it, said once (not a failed call each)
            return ChatResult(text=None, error=result.error)
        if not result.ok:
            self.failure_causes[failure_cause(result.error or "")] += 1
        if self.progress is not None:
            self.progress.record(cached=result.cached, failed=not result.ok)
        return result

    def _usable(self, hit: ChatResult | None) -> ChatResult | None:
        """A cached result, unless the role's validator rejects it (then it is a miss, sent again)."""
        if hit is None or hit.text is None or self.validator is None:
            return hit
        try:
            return hit if self.validator(hit.text) else None
        except Exception:  # noqa: BLE001 - a validator that crashes rejects
            return None

    async def _answer_via_cache(
        self, state: _RunState, key: str, request: ChatRequest
    ) -> ChatResult:
        cache = self.cache
        if self.cache_only:
            hit = self._usable(cache.get(self.model, request)) if cache is not None else None
            return hit if hit is not None else ChatResult(text=None, error=CACHE_ONLY_MISS)
        if cache is None:
            async with state.slots:
                return await self._call(state, request, None)
        hit = self._usable(cache.get(self.model, request))
        if hit is not None:
            return hit
        waiting_since: float | None = None
        # no longer than the holder's own call can take: a holder that outlives it is stuck
        patience = min(cache.lock_timeout, self.call_deadline)
        poll = 0.02
        while True:
            async with state.slots:
                waited_out = waiting_since is not None and self._clock() - waiting_since > patience
                lock = None if waited_out else cache.try_lock(key)
                if lock is not None or waited_out:
                    with lock if lock is not None else nullcontext():
                        # Another process may have finished it since our lookup, or failed it
                        # for good in this run: its outcome is ours, success or failure alike.
                        hit = self._usable(cache.peek(key))
                        if hit is not None:
                            return hit
                        failed = cache.failure(key)
                        if failed is not None:
                            return ChatResult(text=None, error=failed, cached=True)
                        result = await self._call(state, request, lock)
                        try:
                            if result.ok:
                                cache.put(self.model, request, result)
                            elif state.fatal_error is None:
                                cache.put_failure(key, result.error or "failed")
                        except CacheError as exc:
                            # the reply is good, but the run stops: the next one could not be kept
                            self._stop_run(state, str(exc), io=True)
                    return result
            # Another process is sending this very request: wait for its entry
            # outside the semaphore, so our slots go to requests we can send.
            if waiting_since is None:
                waiting_since = self._clock()
                cache.note_wait()
            await self._sleep(poll)
            poll = min(poll * 1.5, 0.5)

    def body(self, request: ChatRequest) -> dict[str, Any]:
        """The chat-completions body sent for ``request`` (decoding by model family)."""
        return {
            "model": self.model,
            "messages": request.as_openai_messages(),
            **decoding_parameters(self.model, request.max_tokens, request.temperature),
        }

    async def _call(
        self, state: _RunState, request: ChatRequest, lock: KeyLock | None
    ) -> ChatResult:
        """Send ``request`` with bounded, jittered retries; never raises."""
        token_cost = 0
        if self._token_meter is not None:
            input_tokens, output_tokens = estimate_tokens([request], self.model)
            token_cost = input_tokens + output_tokens
        result, failure = await self._post(
            state, "/chat/completions", self.body(request), token_cost, lambda reply: self._read(reply, request), lock
        )
        return result if result is not None else failure

    async def _post(
        self,
        state: _RunState,
        path: str,
        body: dict[str, Any],
        token_cost: int,
        read: Callable[[Any], tuple[Any, str]],
        lock: KeyLock | None = None,
    ) -> tuple[Any, ChatResult]:
        """POST ``body`` to ``path`` with bounded, jittered retries; never raises.

        ``read`` turns the decoded reply into a value, or ``None`` and why it
        is unusable (a reply too long for its budget is not sent again).
        Returns the value (and a placeholder), or ``None`` and the failure as
        a ``ChatResult``: the one retry loop of every endpoint this client
        calls (chat completions, embeddings), so each gets the same pacing,
        fatal statuses, ``Retry-After`` cap, redaction and words for a failure.
        """
        import openai  # loaded by ``_run`` already; a local name for the except clauses

        sent = ChatResult(text=None)
        last_error = "no attempt made"
        for attempt in range(1, self.max_tries + 1):
            if state.fatal_error is not None:
                return None, ChatResult(text=None, error=state.fatal_error, extra={UNSENT: "1"})
            await self._throttle(token_cost)
            if lock is not None:
                lock.touch()
            retry_after: float | None = None
            started = time.monotonic()  # the server's real latency, whatever ``clock`` is
            try:
                # ``post`` (the client's route for custom requests) keeps its
                # auth, base URL, timeout and typed errors, but skips the
                # per-call TypedDict transform and pydantic parse of
                # ``chat.completions.create``: a third less client CPU per
                # call, which is what bounds throughput at high concurrency.
                # ``wait_for``: the client's timeout bounds each read, so a
                # body that trickles in a byte at a time would never end.
                raw = await asyncio.wait_for(
                    state.client.post(path, cast_to=str, body=body),
                    timeout=self.timeout,
                )
                decoded = json.loads(raw)
            except openai.APIStatusError as exc:
                status = exc.status_code
                detail = self._redact(_status_detail(exc))
                if status in FATAL_STATUSES:
                    return None, self._fatal(state, status, detail)
                if status not in RETRYABLE_STATUSES and status < 500:
                    return None, ChatResult(text=None, error=f"HTTP {status} (not retried): {detail}")
                last_error = f"HTTP {status}: {detail}"
                if status in (429, 503):
                    state.slots.overloaded()
                retry_after = parse_retry_after(exc.response.headers)
                if retry_after is not None and retry_after > self.max_retry_after:
                    error = (
                        f"{last_error}; the server asked to wait {retry_after:.0f}s, over the "
                        f"{self.max_retry_after:g}s cap (--restore-max-retry-after)"
                    )
                    return None, ChatResult(text=None, error=error)
            except (openai.APITimeoutError, asyncio.TimeoutError):
                last_error = f"timed out after {self.timeout:g}s"
                state.slots.overloaded()
            except openai.APIConnectionError as exc:
                last_error = self._redact(f"connection error: {_connection_detail(exc)}")
                if _unreachable(exc):
                    # Nothing listens there (or the name does not resolve): minutes of
                    # backoff would not change that, for this call or any other. Say it now.
                    error = f"{last_error} (not retried: {self._where()} is unreachable)"
                    return None, self._stop_run(state, error)
            except (ValueError, openai.APIResponseValidationError) as exc:
                # json.JSONDecodeError: a garbled body.
                last_error = self._redact(f"malformed response: {type(exc).__name__}: {exc}")
            except openai.OpenAIError as exc:  # any other client failure: retry, bounded
                last_error = self._redact(f"{type(exc).__name__}: {exc}")
            else:
                value, problem = read(decoded)
                if value is not None:
                    await state.slots.succeeded(time.monotonic() - started)
                    return value, sent
                last_error = self._redact(problem)
                if problem.startswith("reply too long"):
                    return None, ChatResult(text=None, error=problem)  # sending it again costs as much
            if attempt < self.max_tries:
                delay = retry_after if retry_after is not None else self._backoff(attempt)
                logger.debug(
                    "%s: attempt %d/%d failed (%s); retrying in %.2fs",
                    self.name,
                    attempt,
                    self.max_tries,
                    last_error,
                    delay,
                )
                if self.progress is not None:
                    self.progress.retry()
                await self._sleep(delay)
        error = f"failed after {self.max_tries} tries: {last_error}"
        logger.warning("%s: %s", self.name, error)
        return None, ChatResult(text=None, error=error)

    def read_completion(self, completion: Any, request: ChatRequest) -> tuple[ChatResult | None, str]:
        """A decoded chat completion checked as a live reply is (``None`` and why, when unusable).

        A batch's output lines go through here, so a reply from a batch is
        accepted, redacted and refused by exactly the rules of a live one.
        """
        return self._read(completion, request)

    def _read(self, completion: Any, request: ChatRequest) -> tuple[ChatResult | None, str]:
        """The result of a decoded completion, or ``None`` and why it is unusable.

        The key is redacted from the text before anything else sees it (a
        hostile server may echo it), and a reply far longer than the output
        budget is refused: it is never cached.
        """
        try:
            choice = completion["choices"][0]
            text = choice["message"]["content"]
            finish_reason = str(choice.get("finish_reason") or "")
            served_model = str(completion.get("model") or "")
            usage = completion.get("usage") or {}
            input_tokens = int(usage.get("prompt_tokens") or 0)
            output_tokens = int(usage.get("completion_tokens") or 0)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            return None, f"malformed response: {type(exc).__name__}: {exc}"
        if not isinstance(text, str):
            return None, f"empty reply (finish_reason={finish_reason or 'none'})"
        limit = request.max_tokens * MAX_CHARS_PER_TOKEN + _REPLY_MARGIN_CHARS
        if len(text) > limit:
            return None, (
                f"reply too long: {len(text):,} characters for a budget of "
                f"{request.max_tokens} tokens (refused, not stored)"
            )
        text = self._redact(text)
        served_model = self._redact(served_model)
        if self.validator is not None:
            try:
                accepted = bool(self.validator(text))
            except Exception:  # noqa: BLE001 - a validator that crashes rejects
                accepted = False
            if not accepted:
                shown = text if len(text) <= 80 else text[:77] + "..."
                return None, f"reply rejected by validator: {shown!r}"
        result = ChatResult(
            text=text,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            extra={"model": served_model, "finish_reason": finish_reason},
        )
        return result, ""

    def _where(self) -> str:
        return self.base_url or "api.openai.com"

    def _fatal(self, state: _RunState, status: int, detail: str) -> ChatResult:
        """Fail this call and the rest of the run, and say so loudly once."""
        if status == 401:
            where = self._where()
            if self._key_from_env:
                why = f"${API_KEY_ENV} was rejected by {where}"
            else:
                why = f"${API_KEY_ENV} is not set and {where} requires a key"
            error = f"HTTP 401 authentication failed: {why} (the key is not shown)"
        else:
            error = (
                f"HTTP {status} (not retried): {detail}; is the model name {self.model!r} right?"
                if status == 404
                else f"HTTP {status} (not retried): {detail}; the key is not allowed to use {self.model!r}"
            )
        return self._stop_run(state, error)

    def _stop_run(self, state: _RunState, error: str, *, io: bool = False) -> ChatResult:
        """Fail this call and every later one unsent (``fatal_error`` tells the caller to stop)."""
        if self.fatal_error is None:
            self.fatal_error = error
            self.fatal_io = io
        if state.fatal_error is None:
            state.fatal_error = error
            logger.error("%s: %s; failing the rest of this batch unsent", self.name, error)
        return ChatResult(text=None, error=error)

    async def _throttle(self, token_cost: int) -> None:
        waits = [0.0]
        if self._request_meter is not None:
            waits.append(self._request_meter.reserve(1))
        if self._token_meter is not None:
            waits.append(self._token_meter.reserve(token_cost))
        delay = max(waits)
        if delay > 0:
            await self._sleep(delay)

    def _backoff(self, attempt: int) -> float:
        # Full jitter (AWS architecture blog): uniform over the whole window,
        # so retries of a burst of failures spread out instead of re-colliding.
        return self._jitter.uniform(
            0.0, min(self.backoff_cap, self.backoff_base * 2 ** (attempt - 1))
        )

    def _redact(self, text: str) -> str:
        """``text`` with the API key removed in every form :class:`KeyRedactor` covers, should a server echo it."""
        return self._redactor(text) if self._redactor is not None else text


def _status_detail(exc: openai.APIStatusError) -> str:
    """The provider's error message, short."""
    body = exc.body
    message: object = None
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
    text = str(message) if message else str(exc)
    return text if len(text) <= 200 else text[:197] + "..."


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what caused it, outermost first (each once)."""
    seen: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and all(cause is not s for s in seen):
        seen.append(cause)
        cause = cause.__cause__ or cause.__context__
    return seen


def _connection_detail(exc: BaseException) -> str:
    """What went wrong with a connection, in words: the innermost cause that says something.

    The client's own errors often carry no message (``ReadError: ``); a reset
    connection is named as such.
    """
    chain = _causes(exc)
    inner = chain[1:] or chain
    if any(isinstance(c, ConnectionResetError) or getattr(c, "errno", None) == errno.ECONNRESET for c in chain):
        return f"the server reset the connection before its reply was complete ({type(inner[0]).__name__})"
    for cause in inner:
        if str(cause).strip():
            return f"{type(cause).__name__}: {cause}"
    return f"the connection ended without a reply ({type(inner[0]).__name__}, no message from the client)"


def _unreachable(exc: BaseException) -> bool:
    """Whether a connection error means nothing can be reached there: refused, or no such host."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, (ConnectionRefusedError, socket.gaierror)):
            return True
        text = str(cause).lower()
        if "name or service not known" in text or "connection refused" in text or "nodename nor servname" in text:
            return True
        cause = cause.__cause__ or cause.__context__
    return False


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
