"""Anthropic's Message Batches API: the ``anthropic`` provider's batch interface (``batch_api.BatchAPI``).

A round is one create, ``POST /v1/messages/batches`` with ``{"requests":
[{"custom_id", "params"}]}``: each ``params`` exactly the body a live
Messages call sends (``anthropic_messages.AnthropicAPI``), each id at most
64 characters of ``[a-zA-Z0-9_-]`` (the item's own id cut to 64: the role
and 57 or more hex digits of the cache key, still one per request). There is
nothing to upload. A batch is ``in_progress``, then ``canceling`` when asked
to stop, then ``ended`` (``GET /v1/messages/batches/ID``), with its requests
counted as ``processing``, ``succeeded``, ``errored``, ``canceled`` and
``expired``; once it has ended its answers are JSON lines at its
``results_url`` (``{"custom_id", "result": {"type": "succeeded", "message"}}``,
or ``errored`` with the API's error body, or ``canceled``, or ``expired``),
in any order. ``POST .../cancel`` asks it to stop.

A batch carries no metadata here, so the intent of a create cut short is
found by what the ledger knows of it: a batch of exactly its number of
requests, created since the intent was written, that no entry of the ledger
holds (two such batches: the create is not guessed at, and the round stops
saying so). Whatever is found, its answers are matched to the entry's
requests by id, and a line answering a request the entry never held is
refused, never stored.

Plain HTTP through the shared transport (``models.http``), as the Messages
calls, with their headers: the provider hands over its wire
(``anthropic_messages.AnthropicAPI``: the key, sent as ``x-api-key``, and the
API version), so this module needs nothing else of it. The key never appears
in an error, a ledger entry or a log line. Reads (status, lists, results,
cancel) are tried three times over a dropped connection, a 429, a 5xx or a
529; the create is sent once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

from pytest_restore import jsonl
from pytest_restore.models.api import ModelAPI
from pytest_restore.models.batch_api import (
    AnswerReader,
    BatchAPI,
    BatchError,
    BatchItem,
    BatchNotFound,
    OutputLine,
    Validator,
)
from pytest_restore.models.http import HTTPTransport, TransportError
from pytest_restore.models.redact import KEY_VARIABLES, redact_keys

#: Where the batches live.
BATCHES = "/v1/messages/batches"
#: The longest id the API takes for a request of a batch.
MAX_ID = 64
#: What a batch's requests are counted as, by the API.
COUNTS = ("processing", "succeeded", "errored", "canceled", "expired")
#: Statuses a read is tried again after (with the transport's own failures); 529: Anthropic's "overloaded".
TRANSIENT = frozenset({429, 500, 502, 503, 504, 529})
#: How much earlier than its intent a batch may say it was created and still be the intent's
#: (the provider's clock against ours).
CLOCK_SLACK = 120.0
#: Why a request of an ended batch failed, by the result's type (``errored`` carries its own).
NOT_RUN = {
    "canceled": "the batch was canceled before this request ran",
    "expired": "the batch expired before this request ran (24h window)",
}


def _epoch(stamp: Any) -> float | None:
    """An RFC 3339 time (``2026-11-29T05:00:00.123Z``) in seconds since the epoch, or ``None``."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def common_shape(batch: Mapping[str, Any]) -> dict[str, Any]:
    """A Message Batch in the shape every provider's batch has here (``batch_api``): ``status``, counts with
    ``total``, ``completed`` and ``failed`` beside the API's own, times in seconds since the epoch."""
    raw = batch.get("request_counts") or {}
    counts = {name: int(raw.get(name) or 0) for name in COUNTS}
    return {
        **batch,
        "status": str(batch.get("processing_status")),
        "request_counts": {
            "total": sum(counts.values()),
            "completed": counts["succeeded"],
            "failed": counts["errored"] + counts["canceled"] + counts["expired"],
            **counts,
        },
        "created_at": _epoch(batch.get("created_at")),
        "expires_at": _epoch(batch.get("expires_at")),
    }


class AnthropicBatches(BatchAPI):
    """The Message Batches endpoints at one base URL."""

    def __init__(
        self,
        wire: type[ModelAPI],
        base_url: str | None = None,
        *,
        reader: Callable[[str, Validator | None], AnswerReader],
        timeout: float = 120.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``wire``: the provider's Messages API (its headers, its key, its own API's address);
        ``base_url``: where the provider sends its calls (``None``: its own API; of replicas, the first);
        ``reader``: the provider's managed model of a cache name, whose rules its answers are read by."""
        self.wire = wire
        self._reader = reader
        self.provider = wire.provider
        super().__init__(base_url)
        self.timeout = timeout
        self._sleep = sleep
        self.transport = HTTPTransport(self.base_url or wire.default_base_url)
        self._headers = wire("", self.base_url)  # a model of no name: only its headers are asked
        if wire.key_env:  # redacted in a process that never made one of its models (``batch status``)
            KEY_VARIABLES.add(wire.key_env)

    def resolve_base_url(self, option: str | None) -> str | None:
        """One server for batches: the first of replicas."""
        return option.split(",")[0].strip().rstrip("/") or None if option else None

    def wire_id(self, custom_id: str) -> str:
        """The item's id cut to the 64 characters the API takes."""
        return custom_id[:MAX_ID]

    def make_reader(self, model: str, validator: Validator | None) -> AnswerReader:
        """The provider's managed Messages model of ``model`` (``anthropic:MODEL``, its cache name)."""
        return self._reader(model, validator)

    def request_line(self, item: BatchItem) -> dict[str, Any]:
        """``{"custom_id", "params"}``: ``params`` the body of the live call."""
        return {"custom_id": self.wire_id(item.custom_id), "params": self.reader(item.model, None).body(item.request)}

    def request_body(self, line: Mapping[str, Any]) -> Any:
        """A request line's ``params``."""
        return line["params"]

    # -- the wire ------------------------------------------------------------------------

    def _send(self, method: str, path: str, body: Any, what: str, *, once: bool = False, timeout: float | None = None) -> bytes:
        """The reply body of one call (a read tried three times, ``once``: sent once); :class:`BatchError` otherwise."""
        headers = {
            "accept": "application/json",
            **({"content-type": "application/json"} if body is not None else {}),
            **self._headers.headers(),  # the API version and the key, as the live calls send them
        }
        data = json.dumps(body, ensure_ascii=False).encode("utf-8") if body is not None else None
        tries = 1 if once else 3
        for attempt in range(tries):
            last = attempt + 1 == tries
            try:
                reply = self.transport.request(method, path, data, headers, timeout or self.timeout)
            except TransportError as exc:
                if not last:
                    self._sleep(2.0**attempt)
                    continue
                raise BatchError(redact_keys(f"{what}: {exc.kind}: {exc.detail} ({self.transport.base_url})")) from None
            if reply.status in TRANSIENT and not last:
                self._sleep(2.0**attempt)
                continue
            if not 200 <= reply.status < 300:
                kind = BatchNotFound if reply.status == 404 else BatchError
                raise kind(redact_keys(f"{what}: HTTP {reply.status} {_error_detail(reply.body)}")) from None
            return reply.body
        raise AssertionError("unreachable")  # pragma: no cover - the last try returns or raises

    def _json(self, method: str, path: str, body: Any, what: str, *, once: bool = False) -> dict[str, Any]:
        raw = self._send(method, path, body, what, once=once)
        try:
            decoded = json.loads(raw)
        except ValueError as exc:
            raise BatchError(f"{what}: the answer is not JSON ({exc})") from None
        if not isinstance(decoded, dict):
            raise BatchError(f"{what}: the answer is not a JSON object")
        return decoded

    # -- a round -------------------------------------------------------------------------

    def upload(self, items: Sequence[BatchItem]) -> str:
        """Nothing: the requests travel in the create."""
        return ""

    def create(self, uploaded: str, items: Sequence[BatchItem], metadata: Mapping[str, str]) -> str:
        """``POST /v1/messages/batches`` with every request, sent once; the batch's id."""
        batch = self._json("POST", BATCHES, {"requests": [self.request_line(i) for i in items]}, "creating the batch", once=True)
        if not isinstance(batch.get("id"), str):
            raise BatchError("creating the batch: the answer names no batch id")
        return str(batch["id"])

    def find(self, intent: str, since: float, requests: int, claimed: Collection[str]) -> str | None:
        """The one batch of ``requests`` requests created since ``since`` that is not ``claimed``, or ``None``;
        :class:`BatchError` when several could be it."""
        found: list[str] = []
        after = ""
        while True:
            page = self._json("GET", f"{BATCHES}?limit=100{after}", None, "looking for the batch among the recent ones")
            older = False
            for raw in page.get("data") or []:
                batch = common_shape(raw)
                created = batch["created_at"]
                if created is None or batch.get("id") in claimed:
                    continue
                if created < since - 600:  # newest first: the rest are older still
                    older = True
                    break
                if created >= since - CLOCK_SLACK and batch["request_counts"]["total"] == requests:
                    found.append(str(batch["id"]))
            if older or not page.get("has_more") or not page.get("last_id"):
                break
            after = f"&after_id={quote(str(page['last_id']))}"
        if len(found) > 1:
            raise BatchError(
                f"{len(found)} batches of {requests:,} requests were created since then and the ledger holds none of "
                f"them ({', '.join(found)}): which one the cut-short create made cannot be told; cancel the ones "
                "that are not this cache's (`python -m pytest_restore batch cancel` does not know them)"
            )
        return found[0] if found else None

    def intent_words(self, intent: str, requests: int) -> str:
        """The API keeps no metadata: a batch of its size, created since, that the ledger does not hold."""
        return f"a batch of {requests:,} requests created since, that no ledger entry holds: Anthropic keeps no metadata"

    def retrieve(self, batch_id: str) -> dict[str, Any]:
        """``GET /v1/messages/batches/ID``, in the common shape."""
        return common_shape(self._json("GET", f"{BATCHES}/{quote(batch_id)}", None, f"reading batch {batch_id}"))

    def cancel(self, batch_id: str) -> dict[str, Any]:
        """``POST /v1/messages/batches/ID/cancel``: the batch, ``canceling`` until it has ended."""
        return common_shape(self._json("POST", f"{BATCHES}/{quote(batch_id)}/cancel", None, f"cancelling batch {batch_id}"))

    def ended(self, batch: Mapping[str, Any]) -> bool:
        """``ended``: every request succeeded, errored, was canceled or expired."""
        return batch.get("status") == "ended"

    def results(self, batch: Mapping[str, Any]) -> list[tuple[str, str]]:
        """The lines at the batch's ``results_url`` (followed only on this base URL's server: the key goes with it)."""
        url, batch_id = batch.get("results_url"), str(batch.get("id"))
        if not url:
            return []
        parts, base = urlsplit(str(url)), urlsplit(self.transport.base_url)
        if (parts.scheme, parts.hostname, parts.port) != (base.scheme, base.hostname, base.port):
            raise BatchError(
                f"batch {batch_id}: its results_url is on another server ({parts.hostname}): not followed, "
                "the key would go there"
            )
        path = parts.path.removeprefix(self.transport.prefix) + (f"?{parts.query}" if parts.query else "")
        raw = self._send("GET", path, None, f"downloading the results of batch {batch_id}", timeout=max(self.timeout, 600.0))
        text = raw.decode("utf-8", "replace")
        return [(f"results of {batch_id} line {n}", line) for n, line in jsonl.numbered_lines(text)]

    def parse_line(self, text: str, where: str) -> OutputLine:
        """A results line: ``succeeded`` is a 200 with its message, the others errors with their cause."""
        try:
            line = json.loads(text)
        except ValueError as exc:
            raise BatchError(f"{where}: not JSON ({exc})") from None
        if not isinstance(line, dict) or not isinstance(line.get("custom_id"), str):
            raise BatchError(f"{where}: field 'custom_id': missing or not a string")
        custom_id, result = line["custom_id"], line.get("result")
        kind = result.get("type") if isinstance(result, dict) else None
        if not isinstance(result, dict) or kind not in ("succeeded", "errored", *NOT_RUN):
            raise BatchError(f"{where}: custom_id {custom_id}: field 'result.type': not succeeded, errored, canceled or expired")
        if kind == "succeeded":
            return OutputLine(custom_id, 200, result.get("message"), None)
        if kind in NOT_RUN:
            return OutputLine(custom_id, None, None, {"code": kind, "message": NOT_RUN[str(kind)]})
        error = result.get("error")
        inner = error.get("error", error) if isinstance(error, dict) else {"message": str(error)}
        if not isinstance(inner, dict):
            inner = {"message": str(inner)}
        return OutputLine(custom_id, None, None, {"code": inner.get("type") or "errored", "message": inner.get("message") or ""})

    def unanswered(self, batch: Mapping[str, Any]) -> str:
        """No line for a request of an ended batch; or no results at all (archived)."""
        if not batch.get("results_url"):
            return f"batch {batch.get('id')} ended but its results are not available (no results_url)"
        return "batch ended without a result for this request"

    def close(self) -> None:
        """Close the pooled connections."""
        super().close()
        self.transport.close()


def _error_detail(body: bytes) -> str:
    """``type: message`` of the API's error body, short."""
    try:
        error = json.loads(body)["error"]
        text = f"{error['type']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace").strip() or "no detail"
    return text if len(text) <= 200 else text[:197] + "..."
