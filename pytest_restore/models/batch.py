"""Batch rounds: a grid's model calls answered by a provider's batch service, at its batch price.

A grid's calls are tens of thousands of requests that do not need an answer
within seconds. OpenAI's Batch API and Anthropic's Message Batches answer a
whole round of them within 24 hours at half the list price; vLLM's
``run_batch`` answers OpenAI's file format offline on the user's own GPUs.
A provider that batches declares it (``batch`` among its capabilities) and
hands out its batch interface (``ModelProvider.batches``: a
:class:`~pytest_restore.models.batch_api.BatchAPI`, here OpenAI's
``openai_batches`` or Anthropic's ``anthropic_batches``). This module is the
part that knows no provider:

- :class:`BatchRunner`: one round (requests that do not depend on each
  other) submitted or attached, polled with backoff and a progress line,
  harvested into the cache; its intent recorded in the ledger
  (``batch_ledger``) before the create is sent, so a crash at any point
  never pays twice; what a partial batch returned is kept and the rest are
  failures by cause, as live failures are; every answer checked as a live
  reply is (``batch_api.judge_line``) before it may enter the cache;
- :class:`BatchChatModel`: a ``ChatModel`` whose misses go out as a batch
  round and whose hits come from the cache: under ``--restore-batch`` no
  request is ever sent live.

A ledger entry's batch is followed through its provider's interface
(``providers.batch_client``: ``batch status``, ``batch cancel``).
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from pytest_restore.models.api import VALIDATORS, ModelOptions
from pytest_restore.models.base import ChatRequest, ChatResult
from pytest_restore.models.batch_api import (
    INTENT_KEY,
    AnswerReader,
    BatchAPI,
    BatchError,
    BatchItem,
    OutputLine,
    Validator,
    body_digest,
    input_file,
    is_unknown_batch,
    judge_line,
    short,
)
from pytest_restore.models.batch_ledger import Ledger, LedgerEntry, LedgerError, with_counts
from pytest_restore.models.cache import ResponseCache, request_key
from pytest_restore.models.managed import failure_cause
from pytest_restore.models.openai_batches import OpenAIBatches
from pytest_restore.models.redact import redact_keys

__all__ = [
    "INTENT_KEY",
    "BatchAPI",
    "BatchChatModel",
    "BatchError",
    "BatchItem",
    "BatchOptions",
    "BatchRunner",
    "Ledger",
    "LedgerEntry",
    "LedgerError",
    "OutputLine",
    "RoundOutcome",
    "body_digest",
    "input_file",
    "with_counts",
]

#: How long past its own ``expires_at`` a batch that has not ended is still polled (the provider's
#: own move to ``expired`` takes a while), before the round stops following it and says so.
EXPIRY_GRACE = 1800.0

#: Where progress lines go.
Say = Callable[[str], None]


@dataclass(frozen=True)
class BatchOptions:
    """How batch rounds are followed: the first wait between polls, and resubmissions of what failed."""

    poll: float = 30.0
    resubmit: int = 0


def _stderr(message: str) -> None:
    sys.stderr.write(f"restore: {message}\n")
    sys.stderr.flush()


# --------------------------------------------------------------------------- rounds


@dataclass
class RoundOutcome:
    """What one round returned: a result per requested item, and which batches served it."""

    results: dict[str, ChatResult] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    attached: list[str] = field(default_factory=list)

    def failures(self) -> Counter[str]:
        """Failed requests by cause."""
        return Counter(failure_cause(r.error or "") for r in self.results.values() if not r.ok)


class BatchRunner:
    """Runs rounds of batch requests for one response cache through one provider's batch interface."""

    def __init__(
        self,
        cache_dir: str | os.PathLike[str],
        validators: Mapping[str, Validator | None],
        *,
        base_url: str | None = None,
        poll: float = 30.0,
        poll_cap: float = 600.0,
        resubmit: int = 0,
        say: Say = _stderr,
        sleep: Callable[[float], None] = time.sleep,
        client: BatchAPI | None = None,
    ) -> None:
        """``client`` is the provider's batch interface (``ModelProvider.batches``; OpenAI's at
        ``base_url`` when none is given). ``poll`` is the first wait between two looks at a batch (it
        grows 1.5x up to ``poll_cap``); ``resubmit`` how many times a round sends what failed again as a
        new batch."""
        self.cache_dir = Path(cache_dir)
        self.cache = ResponseCache(cache_dir)
        self.ledger = Ledger(cache_dir)
        self.validators = dict(validators)
        self.client: BatchAPI = client if client is not None else OpenAIBatches(base_url)
        self.base_url = self.client.base_url
        self.poll = poll
        self.poll_cap = poll_cap
        self.resubmit = resubmit
        self.say: Say = lambda line: say(self.redact(line))
        self._sleep = sleep

    def redact(self, text: str) -> str:
        """``text`` without an API key in any form a server may echo it in (the one redaction, :func:`redact_keys`)."""
        return redact_keys(text)

    def _redacted(self, result: ChatResult) -> ChatResult:
        text = None if result.text is None else redact_keys(result.text)
        error = None if result.error is None else redact_keys(result.error)
        return replace(result, text=text, error=error)

    def close(self) -> None:
        """Release the client's connections."""
        self.client.close()

    def reader(self, item: BatchItem) -> AnswerReader:
        """The model whose rules an answer line of ``item`` is read by (nothing is sent through it)."""
        return self.client.reader(item.model, self.validators.get(item.role))

    def uncached(self, items: Iterable[BatchItem]) -> list[BatchItem]:
        """The distinct items the cache does not answer (a reply the role's validator rejects counts as absent)."""
        out: dict[str, BatchItem] = {}
        for item in items:
            if item.custom_id in out:
                continue
            hit = self.cache.peek(request_key(item.model, item.request))
            validator = self.validators.get(item.role)
            if hit is not None and hit.text is not None and (validator is None or _accepts(validator, hit.text)):
                continue
            out[item.custom_id] = item
        return list(out.values())

    def run_round(self, name: str, items: Sequence[BatchItem], *, cache: bool = True) -> RoundOutcome:
        """Answer ``items`` by batch: attach to pending batches that hold them, submit the rest, wait, harvest.

        ``cache``: store the answers in the response cache (a model without
        a cache, the calibration's fresh judge, gets them only returned).
        Answers of a partial batch are kept; what it did not answer fails
        with the batch's cause. With ``resubmit``, failed requests go out
        again as a new batch, that many times at most.
        """
        wanted = {item.custom_id: item for item in items}
        outcome = RoundOutcome()
        todo = dict(wanted)
        for attempt in range(self.resubmit + 1):
            part = self._one_pass(name if attempt == 0 else f"{name} (resubmitted {attempt})", todo, cache, outcome)
            outcome.results.update(part)
            todo = {cid: wanted[cid] for cid, result in part.items() if not result.ok}
            if not todo:
                break
        return outcome

    def _one_pass(
        self, name: str, todo: Mapping[str, BatchItem], cache: bool, outcome: RoundOutcome
    ) -> dict[str, ChatResult]:
        with self.ledger.lock():
            # a batch sent elsewhere (another provider, another base URL) cannot be followed from here
            here = [
                e for e in self.ledger.entries()
                if e.kind == "batch" and e.provider == self.client.provider and e.base_url == (self.base_url or "")
            ]
            for entry in here:
                if entry.state == "submitting":
                    self._resolve_intent(entry)
            pending = [e for e in here if e.state == "pending"]
            followed: list[LedgerEntry] = []
            covered: set[str] = set()
            for entry in pending:
                ids = set(self.ledger.items(entry))
                if ids & (set(todo) - covered):
                    followed.append(entry)
                    covered |= ids
                    outcome.attached.append(entry.batch_id)
                    self.say(f"batch {name}: attaching to {entry.batch_id} ({entry.requests:,} requests, submitted earlier)")
            rest = [item for cid, item in todo.items() if cid not in covered]
            by_model: dict[str, list[BatchItem]] = {}
            for item in rest:
                by_model.setdefault(item.model, []).append(item)  # one model per batch, as the API requires
            for model, group in sorted(by_model.items()):
                entry = self._submit(name, model, group, cache)
                followed.append(entry)
                outcome.created.append(entry.batch_id)
                self.say(f"batch {name}: submitted {entry.batch_id} ({len(group):,} {model} requests)")
        results: dict[str, ChatResult] = {}
        for entry in followed:
            results.update(self._follow(name, entry))
        missing = "batch completed without a line for this request"
        return {cid: results.get(cid) or ChatResult(text=None, error=missing) for cid in todo}

    def _submit(self, name: str, model: str, group: Sequence[BatchItem], cache: bool) -> LedgerEntry:
        """Upload and create one batch, its intent recorded in the ledger before the create is sent.

        The create is sent once. After an error the batch is looked for by
        the intent in its metadata (a create can make the batch and still
        fail to answer); after an interrupt the entry stays ``submitting``
        and the next run looks for it before it submits anything.
        """
        intent = os.urandom(8).hex()
        entry = LedgerEntry(
            name=f"batch-{intent}", kind="batch", round=name, model=model, state="submitting",
            created=time.time(), requests=len(group), base_url=self.base_url or "", cache=cache, intent=intent,
            provider=self.client.provider,
        )
        self.ledger.save(entry, group)
        try:
            entry.input_path = self.client.upload(group)
        except BatchError:
            self.ledger.forget(entry)  # nothing was created: no batch can carry this intent
            raise
        except KeyboardInterrupt:
            self.ledger.forget(entry)
            raise
        try:
            entry.batch_id = self.client.create(
                entry.input_path, group, {"restore_round": name[:64], INTENT_KEY: intent}
            )
        except KeyboardInterrupt:
            self.ledger.save(entry)
            self.say(
                f"batch {name}: interrupted while creating a batch of {len(group):,} {model} requests: one may exist "
                f"at the provider ({self.client.intent_words(intent, len(group))}, recorded in {self.ledger.root}); "
                "the next run looks for it before submitting anything, and `python -m pytest_restore batch status` lists it"
            )
            raise
        except BatchError as err:
            found = self._look_for(entry, str(err))
            if found is None:
                entry.state = "not created"
                self.ledger.save(entry)
                raise BatchError(f"{err}; no batch carrying this request's intent is listed at the provider") from None
            self.say(f"batch {name}: creating the batch answered an error, but the provider made it: {found} (not created again)")
            entry.batch_id = found
        entry.state = "pending"
        self.ledger.save(entry)
        return entry

    def _look_for(self, entry: LedgerEntry, why: str) -> str | None:
        """The batch ``entry``'s intent names, or ``None``; :class:`BatchError` when the lookup fails too."""
        try:
            claimed = {e.batch_id for e in self.ledger.entries() if e.batch_id}
            return self.client.find(entry.intent, entry.created, entry.requests, claimed)
        except BatchError as err:
            self.ledger.save(entry)  # still ``submitting``: the next run looks again
            raise BatchError(
                f"{why}; a batch of {entry.requests:,} {entry.model} requests may exist at the provider "
                f"({self.client.intent_words(entry.intent, entry.requests)}) and looking for it failed too ({err}): "
                "nothing is submitted until it is found or known absent; run again later"
            ) from None

    def _resolve_intent(self, entry: LedgerEntry) -> None:
        """An entry left ``submitting`` by an interrupted session: the batch it made, or none (said either way)."""
        found = self._look_for(entry, f"batch {entry.round}: an interrupted session's create")
        if found is None:
            entry.state = "not created"
            self.say(f"batch {entry.round}: an interrupted session's create made no batch (none carries its intent)")
        else:
            entry.state, entry.batch_id = "pending", found
            self.say(f"batch {entry.round}: found {found}, created by an interrupted session (not created again)")
        self.ledger.save(entry)

    def _follow(self, name: str, entry: LedgerEntry) -> dict[str, ChatResult]:
        """Poll ``entry`` until it ends, then harvest it."""
        started = time.monotonic()
        wait = self.poll
        shown = ""
        try:
            while True:
                try:
                    batch = self.client.retrieve(entry.batch_id)
                except BatchError as err:
                    if not is_unknown_batch(err):
                        raise
                    entry.state = "lost"
                    self.ledger.save(entry)
                    error = f"batch {entry.batch_id} unknown to the provider"
                    return {cid: ChatResult(text=None, error=error) for cid in self.ledger.items(entry)}
                status = str(batch.get("status"))
                counts = {k: int(v or 0) for k, v in (batch.get("request_counts") or {}).items()}
                line = (
                    f"batch {name} {entry.batch_id}: {status}, {counts.get('completed', 0):,}/"
                    f"{counts.get('total', entry.requests):,} completed, {counts.get('failed', 0):,} failed, "
                    f"{_elapsed(time.monotonic() - started)} elapsed"
                )
                if line.split(", ")[:3] != shown.split(", ")[:3]:
                    self.say(line)
                shown = line
                if self.client.ended(batch):
                    entry.counts, entry.status = counts, status
                    return self._harvest(entry, batch)
                expires = batch.get("expires_at")
                if isinstance(expires, (int, float)) and time.time() > expires + EXPIRY_GRACE:
                    late = _elapsed(time.time() - expires)
                    self.say(
                        f"batch {name} {entry.batch_id}: still {status} {late} after its own expires_at: no longer "
                        f"polled (it stays in the ledger: `python -m pytest_restore batch status` or `batch cancel`)"
                    )
                    error = f"batch {entry.batch_id} {status} past its expires_at: no longer polled"
                    return {cid: ChatResult(text=None, error=error) for cid in self.ledger.items(entry)}
                self._sleep(wait)
                wait = min(wait * 1.5, self.poll_cap)
        except KeyboardInterrupt:
            self.say(
                f"batch {entry.batch_id} is still running at the provider and was not cancelled: run the same "
                f"command again to attach to it, or cancel it with `python -m pytest_restore batch cancel "
                f"--cache {self.cache_dir}`"
            )
            raise

    def _harvest(self, entry: LedgerEntry, batch: Mapping[str, Any]) -> dict[str, ChatResult]:
        """Every answer of an ended batch, checked; answers go into the cache when the entry says so."""
        items = self.ledger.items(entry)
        results, refused = self.judge_lines(self.client.results(batch), items, cache=entry.cache)
        cause = self.client.unanswered(batch)
        for cid in items:
            results.setdefault(cid, ChatResult(text=None, error=short(self.redact(cause))))
        entry.state = "done"
        entry.failures = dict(Counter(failure_cause(r.error or "") for r in results.values() if not r.ok))
        if refused:
            entry.failures.update({f"refused: {k}": v for k, v in refused.items()})
            # said, not only kept in the ledger: an output file answering requests the batch never
            # held is a batch (or a provider) to look at, whatever became of the batch's own lines
            self.say(
                f"batch {entry.batch_id or entry.name}: "
                + "; ".join(f"{n:,} output lines refused ({why})" for why, n in refused.most_common())
                + ": none of them stored"
            )
        self.ledger.save(entry)
        return results

    def judge_lines(
        self, lines: Iterable[tuple[str, str]], items: Mapping[str, BatchItem], *, cache: bool = True
    ) -> tuple[dict[str, ChatResult], Counter[str]]:
        """Results of output lines (``(where, text)``) for ``items``; lines refused, by reason.

        A line naming a request that is not in ``items`` is refused, never
        stored; a malformed line is refused with its reason. A request
        answered by two lines with different answers keeps neither: its
        result is a failure naming both lines. A success goes into the cache
        when ``cache``. Every text is redacted (:meth:`redact`).
        """
        refused: Counter[str] = Counter()
        by_id: dict[str, list[tuple[str, OutputLine]]] = {}
        # the provider may know a request by a shorter id than ours (``BatchAPI.wire_id``)
        ours = {self.client.wire_id(cid): cid for cid in items}
        for where, text in lines:
            try:
                line = self.client.parse_line(text, where)
            except BatchError as err:
                refused[self.redact(f"malformed line ({str(err).split(': ', 1)[-1][:80]})")] += 1
                continue
            cid = ours.get(line.custom_id)
            if cid is None:
                refused["custom_id never exported or submitted"] += 1
                continue
            by_id.setdefault(cid, []).append((where, line))
        results: dict[str, ChatResult] = {}
        for cid, found in by_id.items():
            item = items[cid]
            judged = [(where, self._redacted(judge_line(line, item, self.reader(item)))) for where, line in found]
            answered = [(where, r) for where, r in judged if r.ok]
            if len({r.text for _, r in answered}) > 1:
                (first, _), (second, _) = answered[0], next(a for a in answered if a[1].text != answered[0][1].text)
                error = f"batch answered custom_id {cid[:24]}... twice, differently ({first}; {second}): neither kept"
                results[cid] = ChatResult(text=None, error=error)
                continue
            result = answered[0][1] if answered else judged[0][1]
            if result.ok and cache:
                self.cache.put(item.model, item.request, result)
            results[cid] = result
        return results, refused


def _accepts(validator: Validator, text: str) -> bool:
    try:
        return bool(validator(text))
    except Exception:  # noqa: BLE001 - a validator that crashes rejects
        return False


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


# --------------------------------------------------------------------------- the model


class CacheOnlyModel(Protocol):
    """The model a batch model wraps: its provider's managed chat model made ``cache_only`` (``managed``)."""

    cache: ResponseCache | None
    cache_name: str
    model: str
    fatal_error: str | None
    fatal_io: bool

    @property
    def name(self) -> str:
        """``PROVIDER:MODEL``."""
        ...

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Answers from the cache alone."""
        ...

    def close(self) -> None:
        """Release it."""
        ...


class BatchChatModel:
    """A ``ChatModel`` that never sends a live call: misses go out as one batch round, hits come from the cache.

    ``inner`` is the role's managed model (its provider's) made
    ``cache_only``; a model without a cache (the calibration's fresh judge)
    gets every answer from its batches and stores none.
    """

    def __init__(self, inner: CacheOnlyModel, role: str, runner: BatchRunner) -> None:
        self.inner = inner
        self.role = role
        self.runner = runner
        #: Failed calls by cause (the batch's and the cache's), as a managed model's ``failure_causes``.
        self.failure_causes: Counter[str] = Counter()

    @property
    def name(self) -> str:
        """The inner model's name (``PROVIDER:MODEL``)."""
        return self.inner.name

    @property
    def model(self) -> str:
        """The provider's model name."""
        return self.inner.model

    @property
    def fatal_error(self) -> str | None:
        """The inner model's fatal error (none: it sends nothing)."""
        return self.inner.fatal_error

    @property
    def fatal_io(self) -> bool:
        """Whether the inner model's fatal error is its cache that could not be written."""
        return self.inner.fatal_io

    @property
    def concurrency_peak(self) -> int:
        """Batches have no client-side concurrency."""
        return 0

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Answer every request in order: one batch round for what the cache does not hold."""
        if not requests:
            return []
        items = [BatchItem(self.role, self.inner.cache_name, r) for r in requests]
        caching = self.inner.cache is not None
        misses = self.runner.uncached(items) if caching else list({i.custom_id: i for i in items}.values())
        fresh: dict[str, ChatResult] = {}
        if misses:
            try:
                fresh = self.runner.run_round(f"{self.role} calls", misses, cache=caching).results
            except BatchError as err:  # the provider refused the batch: every miss fails with why, said once
                if self.inner.fatal_error is None:
                    self.inner.fatal_error = str(err)
                fresh = {i.custom_id: ChatResult(text=None, error=str(err)) for i in misses}
        rest = [i for i in items if i.custom_id not in fresh]
        answered = dict(zip((i.custom_id for i in rest), self.inner.run([i.request for i in rest]))) if rest else {}
        for result in {**fresh, **answered}.values():
            if not result.ok:
                self.failure_causes[failure_cause(result.error or "")] += 1
        return [fresh.get(i.custom_id) or answered[i.custom_id] for i in items]

    def close(self) -> None:
        """Release the inner model and the batch client."""
        self.inner.close()
        self.runner.close()


def batch_model(inner: CacheOnlyModel, role: str, options: ModelOptions, client: BatchAPI) -> BatchChatModel:
    """A provider's model under ``--restore-batch``: ``inner`` answers from the cache alone, and what the
    cache lacks goes to ``client``, the provider's batch interface, as a round of the run's batches."""
    assert options.batch is not None, "batch_model outside --restore-batch"
    runner = BatchRunner(options.cache_dir, VALIDATORS, poll=options.batch.poll, resubmit=options.batch.resubmit, client=client)
    return BatchChatModel(inner, role, runner)
