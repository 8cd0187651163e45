"""The managed chat model: a provider's chat API over the managed layer, with the response cache.

:class:`ManagedChatModel` is what every provider's ``make`` returns
(``models/anthropic_messages.py`` is the example): the managed layer
(:class:`~pytest_restore.models.managed.ManagedCalls`: threads, retries,
pacing, replicas, the fatal state) sends its calls; here each distinct
request is answered once (the response cache shared by every process, a
failure shared for the run, a request another process is sending waited
for), and each reply is checked as a live one is (within its output budget,
the key redacted, the role's validator), the same check a batch's output line
passes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

from pytest_restore.models.api import ModelAPI
from pytest_restore.models.base import ChatRequest, ChatResult
from pytest_restore.models.cache import CacheError, KeyLock, ResponseCache, request_key
from pytest_restore.models.decoding import estimate_tokens, with_usage
from pytest_restore.models.managed import CallOutcome, ManagedCalls, Unsent
from pytest_restore.models.redact import redact_keys

__all__ = ["CACHE_ONLY_MISS", "MAX_CHARS_PER_TOKEN", "ManagedChatModel"]

#: The error of a request a cache-only model does not hold (see ``cache_only``).
CACHE_ONLY_MISS = "no batch answered this request (--restore-batch sends no live call)"
#: A reply longer than this many characters per output token of budget (plus a
#: margin) cannot be an answer within the budget: refused as a failed call.
MAX_CHARS_PER_TOKEN = 16
_REPLY_MARGIN_CHARS = 4096

logger = logging.getLogger("pytest_restore.models")  # the managed layer's


class ManagedChatModel(ManagedCalls):
    """A chat model (the ``ChatModel`` protocol) of any provider, managed: cached, paced, retried."""

    def __init__(
        self,
        apis: Sequence[ModelAPI],
        *,
        cache: ResponseCache | None = None,
        cache_name: str | None = None,
        validator: Callable[[str], bool] | None = None,
        cache_only: bool = False,
        **options: Any,
    ) -> None:
        """``cache_name`` keys the cache (default: the model name); ``validator`` rejects malformed
        replies (retried, then failed); ``cache_only`` answers from the cache alone (under
        ``--restore-batch`` every reply comes from a batch, never from a live call). ``options``:
        :class:`ManagedCalls`'."""
        super().__init__(apis, **options)
        self.cache = cache
        self.cache_name = cache_name or self.model
        self.validator = validator
        self.cache_only = cache_only

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Answer every request, in order. Never raises for a single failed call."""
        if not requests:
            return []
        keys = [request_key(self.cache_name, request) for request in requests]
        distinct: dict[str, ChatRequest] = {}
        for key, request in zip(keys, requests):
            distinct.setdefault(key, request)
        if self.progress is not None:
            self.progress.add_total(len(distinct))
        jobs = [
            (lambda stop, key=key, request=request: self._answer(key, request, stop))
            for key, request in distinct.items()
        ]
        by_key = dict(zip(distinct, self._gather(jobs, "a batch of requests")))
        return [by_key[key] for key in keys]

    def read_completion(self, completion: Any, request: ChatRequest) -> tuple[ChatResult | None, str]:
        """A decoded answer checked as a live reply is (``None`` and why, when unusable).

        A batch's output lines go through here, so a reply from a batch is
        accepted, redacted and refused by exactly the rules of a live one.
        """
        return self._accept(self.api.read_chat(completion, request), request)

    def body(self, request: ChatRequest) -> dict[str, Any]:
        """The body sent for ``request`` (the provider's wire format)."""
        return self.api.chat_request(request)[1]

    # -- one distinct request ---------------------------------------------------------

    def _answer(self, key: str, request: ChatRequest, stop: threading.Event) -> ChatResult:
        try:
            result = self._answer_via_cache(key, request, stop)
        except Unsent as unsent:
            return ChatResult(text=None, error=str(unsent))
        except CacheError as exc:  # a full disk: every later call would be paid for and lost
            result = ChatResult(text=None, error=self._stop_run(str(exc), io=True))
        except Exception as exc:  # one bug must not sink the whole batch
            logger.exception("unexpected error answering a request for %s", self.name)
            result = ChatResult(text=None, error=redact_keys(f"internal error: {exc!r}"))
        if not result.ok:
            self._count_failure(result.error or "")
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

    def _answer_via_cache(self, key: str, request: ChatRequest, stop: threading.Event) -> ChatResult:
        cache = self.cache
        if self.cache_only:
            hit = self._usable(cache.get(self.cache_name, request)) if cache is not None else None
            return hit if hit is not None else ChatResult(text=None, error=CACHE_ONLY_MISS)
        if cache is None:
            return self._call(request, None, stop)[0]
        hit = self._usable(cache.get(self.cache_name, request))
        if hit is not None:
            return hit
        waiting_since: float | None = None
        # no longer than the holder's own call can take: a holder that outlives it is stuck
        patience = min(cache.lock_timeout, self.call_deadline)
        poll = 0.02
        while True:
            if self.fatal_error is not None:
                raise Unsent(self.fatal_error)
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
                    result, held = self._call(request, lock, stop, hold=True)
                    try:
                        if result.ok:
                            cache.put(self.cache_name, request, result)
                        elif self.fatal_error is None:
                            cache.put_failure(key, result.error or "failed")
                    except CacheError as exc:
                        # the reply is good, but the run stops: the next one could not be kept
                        self._stop_run(str(exc), io=True)
                    finally:
                        if held.held is not None:
                            self._release(held.held, held.latency)
                return result
            # Another process is sending this very request: wait for its entry, holding no slot.
            if waiting_since is None:
                waiting_since = self._clock()
                cache.note_wait()
                self._give_up_place()
            self._wait(poll, stop)
            if stop.is_set():
                raise Unsent("interrupted before it was sent")
            poll = min(poll * 1.5, 0.5)

    def _call(
        self, request: ChatRequest, lock: KeyLock | None, stop: threading.Event, *, hold: bool = False
    ) -> tuple[ChatResult, CallOutcome]:
        """Send ``request`` with bounded, jittered retries; never raises (``Unsent`` when never sent).

        Returns the result and the outcome, whose ``held`` slot the caller releases (``hold``).
        """
        token_cost = 0
        if any(r.token_meter is not None for r in self.replicas):
            input_tokens, output_tokens = estimate_tokens([request], self.model)
            token_cost = input_tokens + output_tokens
        outcome = self._post(
            lambda api: api.chat_request(request),
            lambda api, reply: self._accept(api.read_chat(reply, request), request),
            stop,
            token_cost=token_cost,
            lock=lock,
            hold=hold,
        )
        if outcome.unsent:
            raise Unsent(outcome.error or "not sent")
        if outcome.value is not None:
            result: ChatResult = outcome.value
            return result, outcome
        return ChatResult(text=None, error=outcome.error), outcome

    def _accept(self, read: ChatResult | str, request: ChatRequest) -> tuple[ChatResult | None, str]:
        """A provider's reading of an answer, checked: within its budget, the key redacted, the validator's."""
        if isinstance(read, str):
            return None, read
        text = read.text
        if text is None:
            return None, read.error or "empty reply"
        limit = request.max_tokens * MAX_CHARS_PER_TOKEN + _REPLY_MARGIN_CHARS
        if len(text) > limit:
            return None, (
                f"reply too long: {len(text):,} characters for a budget of "
                f"{request.max_tokens} tokens (refused, not stored)"
            )
        text = redact_keys(text)
        if self.validator is not None:
            try:
                accepted = bool(self.validator(text))
            except Exception:  # noqa: BLE001 - a validator that crashes rejects
                accepted = False
            if not accepted:
                shown = text if len(text) <= 80 else text[:77] + "..."
                return None, f"reply rejected by validator: {shown!r}"
        extra = {name: redact_keys(value) for name, value in read.extra.items()}
        # the usage the server reported, else an estimate said so (a local server often reports none)
        result = ChatResult(text=text, input_tokens=read.input_tokens, output_tokens=read.output_tokens, extra=extra)
        return with_usage(result, request), ""
