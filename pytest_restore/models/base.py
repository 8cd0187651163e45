"""Models: the one interface every reader, judge and importance scorer sits behind.

A model takes chat requests (messages in) and returns results (text out). The
audit builds all the requests of a stage first and hands them over in one
batch, so that a real provider can deduplicate, cache and run them
concurrently, while the fake models answer them one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

#: One chat message as ``(role, content)``; roles are ``system`` and ``user``.
Message = tuple[str, str]


@dataclass(frozen=True)
class ChatRequest:
    """One call to a chat model: everything that can change its output."""

    messages: tuple[Message, ...]
    max_tokens: int
    temperature: float = 0.0

    def as_openai_messages(self) -> list[dict[str, str]]:
        """The messages in the OpenAI chat-completions wire format."""
        return [{"role": role, "content": content} for role, content in self.messages]


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
