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
"""

from __future__ import annotations

import hashlib
from typing import Any

from openai_server import OpenAIServer, _encode, _render, canonical_body

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


