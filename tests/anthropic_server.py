"""Anthropic's Messages API on 127.0.0.1, for tests: ``POST /v1/messages`` with the API's own rules.

Built on :class:`openai_server.OpenAIServer` (its HTTP/1.1 loop, counters,
log, modes and seeded faults), answering the Messages API instead:

- ``x-api-key`` is required (a request without one, or with another key than
  ``expected_key`` when that is set, gets a 401 ``authentication_error``), and
  so is ``anthropic-version`` (a 400 without it);
- ``model``, ``max_tokens`` (a positive integer) and ``messages`` are required;
  a message's role is ``user`` or ``assistant`` only: a ``system`` role is
  refused with the API's 400 (the system prompt is the top-level ``system``
  field); the first message must be the user's;
- errors have the API's shape, ``{"type": "error", "error": {"type",
  "message"}}``; the ``429`` fault is a ``rate_limit_error`` and the ``529``
  fault an ``overloaded_error``, each with ``retry-after``; ``drop`` closes
  the connection without a reply;
- the answer is a ``message`` with ``text`` content blocks, ``stop_reason``
  and ``usage`` (``input_tokens``, ``output_tokens``).

The responder sees the messages in the OpenAI shape (the ``system`` field as
a first ``system`` message), so ``openai_server.fake_models_responder``
serves the project's fake models here too.

The Message Batches API (``/v1/messages/batches``, :class:`MessageBatches`)
keeps the real one's rules too: a create takes ``requests`` of ``custom_id``
(``^[a-zA-Z0-9_-]{1,64}$``, unique within the batch) and ``params`` (checked
as the batch runs, as the API does: a broken one is an ``errored`` result,
not a refused create); a batch is ``in_progress`` until every request
succeeded, errored, was canceled or expired, then ``ended``; its results are
served from its ``results_url`` once it has ended and refused before; the
list is newest first, paged with ``after_id``; ``cancel`` makes it
``canceling``, then ``ended`` with the rest ``canceled``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qs, urlsplit

from openai_server import LoggedRequest, OpenAIServer, _encode, _render, canonical_body

#: The only path this server answers.
MESSAGES = "/v1/messages"
#: Every kind of fault it can inject (as ``Faults.kinds``).
ANTHROPIC_FAULTS: tuple[str, ...] = ("429", "529", "500", "drop")
#: The API version a request must name.
VERSION = "2023-06-01"


def _error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    return status, _render(status, {"type": "error", "error": {"type": kind, "message": message}}, headers)


class AnthropicServer(OpenAIServer):
    """A loopback Messages API (see the module docstring); counters and faults as ``OpenAIServer``'s."""

    routes = (MESSAGES,)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The Message Batches API, answered by this server's own Messages logic; each of its
        #: requests is in ``log`` (with its path) and counted in ``total_requests``.
        self.message_batches = MessageBatches(self._answer_params, lambda: self.base_url)

    def _answer_params(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """One batch request answered as a live call would be (rules, responder, modes; no fault)."""
        headers = {"x-api-key": self.expected_key or "key", "anthropic-version": VERSION}
        status, reply = self._reply("POST", MESSAGES, headers, params, None)
        try:
            payload: dict[str, Any] = json.loads((reply or b"").partition(b"\r\n\r\n")[2])
        except ValueError:
            return 500, {"type": "error", "error": {"type": "api_error", "message": "the reply was not JSON"}}
        return status or 500, payload

    async def _handle(self, method: str, path: str, headers: dict[str, str], raw: bytes, writer: asyncio.StreamWriter) -> bool:
        if not path.startswith(BATCHES):
            return await super()._handle(method, path, headers, raw, writer)
        if method == "POST" and path == BATCHES and self.message_batches.behaviour.create_delay:
            await asyncio.sleep(self.message_batches.behaviour.create_delay)  # the batch is made after it all the same
        if not self._authorized(headers):
            status, reply = _error(401, "authentication_error", "invalid x-api-key")
        elif headers.get("anthropic-version") != VERSION:
            status, reply = _error(400, "invalid_request_error", "anthropic-version: header is required")
        else:
            status, reply = self.message_batches.handle(method, path, raw)
        with self._state.lock:
            self._state.log.append(LoggedRequest(time.monotonic(), "", None, 0, None, status, path.split("?")[0]))
            self._state.attempts[f"{method} {path}"] += 1
        writer.write(reply)
        await writer.drain()
        return True

    @property
    def base_url(self) -> str:
        """The server's root, as ``ANTHROPIC_BASE_URL`` takes it (the path ``/v1/messages`` is the client's)."""
        return f"http://127.0.0.1:{self.port}"

    def _authorized(self, headers: dict[str, str]) -> bool:
        key = headers.get("x-api-key")
        return key is not None and (self.expected_key is None or key == self.expected_key)

    def _reply(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: dict[str, Any] | None,
        fault: str | None,
    ) -> tuple[int | None, bytes | None]:
        if method != "POST" or path.rstrip("/") != MESSAGES:
            return _error(404, "not_found_error", f"Not found: {method} {path}")
        if not self._authorized(headers):
            return _error(401, "authentication_error", "invalid x-api-key")
        if headers.get("anthropic-version") != VERSION:
            return _error(400, "invalid_request_error", "anthropic-version: header is required")
        if body is None:
            return _error(400, "invalid_request_error", "The request body is not valid JSON.")
        problem = self._problem(body)
        if problem is not None:
            return _error(400, "invalid_request_error", problem)
        if fault is not None:
            return self._fault(fault)
        messages = body["messages"]
        system = body.get("system")
        seen = ([{"role": "system", "content": system}] if system else []) + messages
        try:
            text = self.responder(seen)
        except Exception as exc:  # noqa: BLE001 - a responder bug is the test's 500
            return _error(500, "api_error", f"responder: {exc}")
        return 200, _render(200, _message(body, text))

    @staticmethod
    def _problem(body: dict[str, Any]) -> str | None:
        """What the API would refuse in ``body``, in its words, or ``None``."""
        if not isinstance(body.get("model"), str):
            return "model: Field required"
        tokens = body.get("max_tokens")
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            return "max_tokens: Field required" if tokens is None else "max_tokens: must be a positive integer"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return "messages: Field required"
        for i, message in enumerate(messages):
            role = message.get("role") if isinstance(message, dict) else None
            if role == "system":
                return (
                    f'messages.{i}.role: Unexpected role "system". The Messages API accepts a top-level '
                    "`system` parameter, not \"system\" as an input message role."
                )
            if role not in ("user", "assistant"):
                return f"messages.{i}.role: Input should be 'user' or 'assistant'"
            if not isinstance(message.get("content"), str) or not message["content"]:
                return f"messages.{i}.content: text content blocks must be non-empty"
        if messages[0]["role"] != "user":
            return "messages: first message must use the \"user\" role"
        if "system" in body and not isinstance(body["system"], str):
            return "system: Input should be a valid string"
        return None

    def _fault(self, kind: str) -> tuple[int | None, bytes | None]:
        retry = {"retry-after": self.faults.retry_after} if self.faults.retry_after is not None else {}
        if kind == "429":
            return _error(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit", retry)
        if kind == "529":
            return _error(529, "overloaded_error", "Overloaded", retry)
        if kind == "500":
            return _error(500, "api_error", "Internal server error")
        if kind == "malformed":
            return 200, _encode(200, b'{"type": "message", "content": [', {})
        return super()._fault(kind)


def _message(body: dict[str, Any], text: str) -> dict[str, Any]:
    """A Messages API answer."""
    digest = hashlib.sha256(canonical_body(body).encode()).hexdigest()[:24]
    words = sum(len(str(m.get("content", "")).split()) for m in body["messages"]) + len(str(body.get("system", "")).split())
    return {
        "id": f"msg_{digest}",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": words + 8, "output_tokens": len(text.split())},
    }




# -- the Message Batches API -----------------------------------------------------------------

#: Where the batches live.
BATCHES = "/v1/messages/batches"
#: What a request's id must look like.
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
#: The most requests one batch takes.
MAX_REQUESTS = 100_000


@dataclass
class MessageBatchBehaviour:
    """How the server's batches move: each look at a batch (a retrieve) is one step of its life."""

    #: requests answered per retrieve while ``in_progress`` (``None``: all at once)
    lines_per_poll: int | None = None
    #: while set, a batch answers nothing and stays ``in_progress``
    hold: bool = False
    #: the batch expires once this many of its requests are answered (the rest: ``expired``)
    expire_after: int | None = None
    #: this many creates make their batch and then answer 500 (a gateway that lost the reply)
    create_failures: int = 0
    #: seconds a create takes before the batch is made and the reply sent
    create_delay: float = 0.0


@dataclass
class _MessageBatch:
    id: str
    requests: list[dict[str, Any]]
    created_at: float
    status: str = "in_progress"
    #: results by custom id, in the order they were made
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    ended_at: float | None = None
    cancel_initiated_at: float | None = None


def _stamp(seconds: float | None) -> str | None:
    """RFC 3339, as the API writes its times."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


class MessageBatches:
    """``/v1/messages/batches``: create, retrieve, list, cancel, results (see the module docstring)."""

    def __init__(self, answer: Any, base_url: Any) -> None:
        self._answer = answer
        self._base_url = base_url
        self._lock = threading.Lock()
        self.behaviour = MessageBatchBehaviour()
        self.batches: dict[str, _MessageBatch] = {}
        #: how many times each canonical ``params`` was put into a created batch
        self.requests_by_params: Counter[str] = Counter()

    @property
    def created(self) -> list[str]:
        """Ids of the batches created, in order."""
        with self._lock:
            return list(self.batches)

    def handle(self, method: str, path: str, raw: bytes) -> tuple[int, bytes]:
        """Answer one request: the status and the whole HTTP response."""
        url = urlsplit(path)
        parts = [p for p in url.path.removeprefix(BATCHES).split("/") if p]
        with self._lock:
            try:
                status, payload = self._route(method, parts, parse_qs(url.query), raw)
            except _BatchError as err:
                return _error(err.status, err.kind, err.message)
        if isinstance(payload, bytes):
            return status, _encode(status, payload, {})
        return status, _render(status, payload)

    def _route(self, method: str, parts: list[str], query: dict[str, list[str]], raw: bytes) -> tuple[int, Any]:
        if not parts and method == "POST":
            batch = self._create(raw)
            if self.behaviour.create_failures > 0:
                self.behaviour.create_failures -= 1
                raise _BatchError(500, "api_error", "Internal server error")
            return 200, self._object(batch)
        if not parts and method == "GET":
            return 200, self._list(query)
        if len(parts) == 1 and method == "GET":
            batch = self._batch(parts[0])
            self._step(batch)
            return 200, self._object(batch)
        if parts[1:] == ["cancel"] and method == "POST":
            batch = self._batch(parts[0])
            if batch.status == "ended":
                raise _BatchError(400, "invalid_request_error", f"Batch {batch.id} has already ended and cannot be canceled.")
            if batch.status == "in_progress":
                batch.status, batch.cancel_initiated_at = "canceling", time.time()
            return 200, self._object(batch)
        if parts[1:] == ["results"] and method == "GET":
            batch = self._batch(parts[0])
            if batch.status != "ended":
                raise _BatchError(400, "invalid_request_error", f"Batch {batch.id} has not ended: its results are not available yet.")
            lines = list(batch.results.values())
            random.Random(batch.id).shuffle(lines)  # results come in any order: a client matches them by custom_id
            return 200, "".join(json.dumps(line) + "\n" for line in lines).encode()
        raise _BatchError(404, "not_found_error", f"Not found: {method} {BATCHES}/{'/'.join(parts)}")

    def _create(self, raw: bytes) -> _MessageBatch:
        try:
            body = json.loads(raw)
        except ValueError:
            raise _BatchError(400, "invalid_request_error", "The request body is not valid JSON.") from None
        requests = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(requests, list) or not requests:
            raise _BatchError(400, "invalid_request_error", "requests: Field required (at least 1 item)")
        if len(requests) > MAX_REQUESTS:
            raise _BatchError(400, "invalid_request_error", f"requests: at most {MAX_REQUESTS} items")
        seen: set[str] = set()
        for i, request in enumerate(requests):
            custom_id = request.get("custom_id") if isinstance(request, dict) else None
            if not isinstance(custom_id, str) or not CUSTOM_ID.match(custom_id):
                raise _BatchError(
                    400, "invalid_request_error",
                    f"requests.{i}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'",
                )
            if custom_id in seen:
                raise _BatchError(400, "invalid_request_error", f"requests: custom_id {custom_id!r} is not unique")
            if not isinstance(request.get("params"), dict):
                raise _BatchError(400, "invalid_request_error", f"requests.{i}.params: Field required")
            seen.add(custom_id)
        digest = hashlib.sha256(raw).hexdigest()[:20]
        batch = _MessageBatch(f"msgbatch_{len(self.batches) + 1:04d}{digest}", requests, time.time())
        for request in requests:
            self.requests_by_params[canonical_body(request["params"])] += 1
        self.batches[batch.id] = batch
        return batch

    def _batch(self, batch_id: str) -> _MessageBatch:
        if batch_id not in self.batches:
            raise _BatchError(404, "not_found_error", f"No message batch found with id '{batch_id}'.")
        return self.batches[batch_id]

    def _step(self, batch: _MessageBatch) -> None:
        """One look moves the batch along: requests answered, an expiry, a cancel completing."""
        b = self.behaviour
        if batch.status == "canceling":
            for request in batch.requests:
                batch.results.setdefault(request["custom_id"], {"custom_id": request["custom_id"], "result": {"type": "canceled"}})
            batch.status, batch.ended_at = "ended", time.time()
            return
        if batch.status != "in_progress" or b.hold:
            return
        todo = [r for r in batch.requests if r["custom_id"] not in batch.results]
        if b.lines_per_poll is not None:
            todo = todo[: b.lines_per_poll]
        for request in todo:
            if b.expire_after is not None and len(batch.results) >= b.expire_after:
                break
            status, payload = self._answer(request["params"])
            result = {"type": "succeeded", "message": payload} if status == 200 else {"type": "errored", "error": payload}
            batch.results[request["custom_id"]] = {"custom_id": request["custom_id"], "result": result}
        if b.expire_after is not None and len(batch.results) >= b.expire_after:
            for request in batch.requests:
                batch.results.setdefault(request["custom_id"], {"custom_id": request["custom_id"], "result": {"type": "expired"}})
        if len(batch.results) == len(batch.requests):
            batch.status, batch.ended_at = "ended", time.time()

    def _object(self, batch: _MessageBatch) -> dict[str, Any]:
        kinds = Counter(line["result"]["type"] for line in batch.results.values())
        ended = batch.status == "ended"
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": batch.status,
            "request_counts": {
                "processing": len(batch.requests) - len(batch.results),
                "succeeded": kinds["succeeded"],
                "errored": kinds["errored"],
                "canceled": kinds["canceled"],
                "expired": kinds["expired"],
            },
            "ended_at": _stamp(batch.ended_at),
            "created_at": _stamp(batch.created_at),
            "expires_at": _stamp(batch.created_at + 86_400),
            "archived_at": None,
            "cancel_initiated_at": _stamp(batch.cancel_initiated_at),
            "results_url": f"{self._base_url()}{BATCHES}/{batch.id}/results" if ended else None,
        }

    def _list(self, query: dict[str, list[str]]) -> dict[str, Any]:
        limit = int((query.get("limit") or ["20"])[0])
        if not 1 <= limit <= 1000:
            raise _BatchError(400, "invalid_request_error", "limit: must be between 1 and 1000")
        newest = list(reversed(self.batches.values()))
        after = (query.get("after_id") or [""])[0]
        if after:
            ids = [b.id for b in newest]
            newest = newest[ids.index(after) + 1 :] if after in ids else []
        page = newest[:limit]
        return {
            "data": [self._object(b) for b in page],
            "has_more": len(newest) > limit,
            "first_id": page[0].id if page else None,
            "last_id": page[-1].id if page else None,
        }


class _BatchError(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message
