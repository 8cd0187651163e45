"""Models: the one interface every reader, judge and importance scorer sits behind.

A model takes chat requests (messages in) and returns results (text out). The
audit builds all the requests of a stage first and hands them over in one
batch, so that a real provider can deduplicate, cache and run them
concurrently, while the fake models answer them one by one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

#: One chat message as ``(role, content)``; roles are ``system`` and ``user``.
Message = tuple[str, str]

#: How a structured reply is asked of an OpenAI-compatible server (``ReplyFormat.style``):
#: ``json-schema`` is OpenAI's structured outputs (``{"type": "json_schema", "json_schema": {...}}``,
#: also vLLM's and llama.cpp's llama-server); ``json-object`` is JSON mode with the schema beside it
#: (``{"type": "json_object", "schema": {...}}``, llama-cpp-python's server and llama-server).
REPLY_STYLES = ("json-schema", "json-object")


@dataclass(frozen=True)
class ReplyFormat:
    """A structured reply: one JSON object following ``schema``, asked for as ``style`` says.

    The server constrains its decoding to the schema (OpenAI's structured
    outputs, vLLM's guided decoding, llama.cpp's grammars), so even a model
    that cannot follow the prompt's instructions replies in that shape.
    """

    #: the schema's name (OpenAI's ``json_schema.name``)
    name: str
    #: the JSON schema as compact JSON text (hashable; it keys the cache with the rest of the request)
    schema: str
    #: one of :data:`REPLY_STYLES`
    style: str = "json-schema"

    def as_openai(self) -> dict[str, Any]:
        """The ``response_format`` of an OpenAI-compatible chat-completions body."""
        schema = json.loads(self.schema)
        if self.style == "json-object":
            return {"type": "json_object", "schema": schema}
        return {"type": "json_schema", "json_schema": {"name": self.name, "strict": True, "schema": schema}}

    def to_json(self) -> dict[str, str]:
        """Plain values (the cache key, a batch ledger)."""
        return {"name": self.name, "schema": self.schema, "style": self.style}


@dataclass(frozen=True)
class ChatRequest:
    """One call to a chat model: everything that can change its output."""

    messages: tuple[Message, ...]
    max_tokens: int
    temperature: float = 0.0
    #: ``None``: a reply in free text
    reply_format: ReplyFormat | None = None
    #: ``None``: a request of the audit's own. Set: a third-party library's request through the run's
    #: gateway, as the canonical JSON of what OpenAI's wire carries beyond ``messages`` (:data:`WIRE_FIELDS`:
    #: the messages in full, with assistant ``tool_calls`` and ``tool`` results, ``tools``, ``tool_choice``,
    #: a ``response_format`` that is no :class:`ReplyFormat`). It keys the cache with the rest; the reply
    #: to such a request is an assistant message as JSON (:func:`wire_reply`), not free text.
    wire: str | None = None

    def wire_fields(self) -> dict[str, Any]:
        """:attr:`wire` decoded (empty for a request of the audit's own)."""
        return dict(json.loads(self.wire)) if self.wire is not None else {}

    def as_openai_messages(self) -> list[dict[str, Any]]:
        """The messages in the OpenAI chat-completions wire format (in full for a gateway's request)."""
        full = self.wire_fields().get("messages")
        if full is not None:
            return list(full)
        return [{"role": role, "content": content} for role, content in self.messages]

    def openai_extras(self) -> dict[str, Any]:
        """What an OpenAI-compatible body adds for this request besides model, messages and decoding."""
        extras: dict[str, Any] = {"response_format": self.reply_format.as_openai()} if self.reply_format is not None else {}
        extras.update({k: v for k, v in self.wire_fields().items() if k != "messages"})
        return extras


#: What a gateway's request keeps of OpenAI's wire in :attr:`ChatRequest.wire`.
WIRE_FIELDS = ("messages", "tools", "tool_choice", "response_format", "parallel_tool_calls")


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys: one text for one value (hashable, a cache key's part)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def wire_reply(content: str | None, tool_calls: Sequence[Mapping[str, Any]] = ()) -> str:
    """The reply text of a gateway's request: the assistant message (its text and its tool calls) as JSON.

    Each tool call is ``{"id", "type": "function", "function": {"name", "arguments"}}``, ``arguments``
    a JSON text, as OpenAI's wire has it.
    """
    return canonical_json({"content": content, "tool_calls": [dict(call) for call in tool_calls]})


def read_wire_reply(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """The text and tool calls of :func:`wire_reply`'s form (``ValueError`` for anything else)."""
    decoded = json.loads(text)
    if not isinstance(decoded, dict) or not isinstance(decoded.get("tool_calls", []), list):
        raise ValueError("not an assistant message")  # noqa: TRY004 - a reply that does not parse, as json.loads says
    content = decoded.get("content")
    return (content if isinstance(content, str) else None), [dict(c) for c in decoded.get("tool_calls", [])]


@dataclass(frozen=True)
class ChatResult:
    """The outcome of one request.

    ``text`` is ``None`` when the call failed for good (after its retries);
    ``error`` then says why. A failed call is never scored as a wrong answer.
    """

    text: str | None
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cached: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether the call produced text."""
        return self.text is not None


@runtime_checkable
class ChatModel(Protocol):
    """A frozen chat model: the reader, the judge or the importance scorer."""

    @property
    def name(self) -> str:
        """The model's name as it appears in records and reports (``fake``, ``openai:gpt-4o-mini``)."""
        ...

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Answer every request, in order. Never raises for a single failed call."""
        ...


@runtime_checkable
class ServiceModel(ChatModel, Protocol):
    """A chat model that calls a service (a provider's model, managed): what the run reads of it.

    The fakes answer in-process and are plain :class:`ChatModel`; every real
    model (the managed one, a batch round's) is this too.
    """

    @property
    def model(self) -> str:
        """The provider's model name (without ``PROVIDER:``)."""
        ...

    @property
    def fatal_error(self) -> str | None:
        """The first error every later call would share (a rejected key, an unknown model, an
        unreachable server, a structured reply the server refuses, a cache that cannot be written):
        the run stops on it."""
        ...

    @property
    def fatal_io(self) -> bool:
        """Whether ``fatal_error`` is a file that could not be written (exit 74), not the model's."""
        ...

    @property
    def failure_causes(self) -> Mapping[str, int]:
        """Failed calls (after their retries) by cause."""
        ...

    @property
    def concurrency_peak(self) -> int:
        """The most calls in flight at once (0 before any call, or with no client-side concurrency)."""
        ...

    def close(self) -> None:
        """Release connections and threads."""
        ...
