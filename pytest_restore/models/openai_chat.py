"""The OpenAI provider: OpenAI's API, or any OpenAI-compatible server, for chat, embeddings and batches.

Everything that is OpenAI's lives here: the wire format of chat completions
and embeddings, the key (``OPENAI_API_KEY`` only, sent as a bearer token),
the base URL (``--restore-base-url``, else ``OPENAI_BASE_URL``, else
OpenAI's API), the list prices, the embedding models' limits, and the
decoding of each model family (``decoding.decoding_parameters``: classic chat
models get the request's ``temperature`` and ``max_tokens``; reasoning
families get ``max_completion_tokens`` with room for hidden reasoning and a
reasoning effort). Retries, pacing, caching and failures are the managed
layer's (``managed``), as for every provider. The batch rounds of
``--restore-batch`` go through ``batch`` (the Files and Batches API, with the
official ``openai`` client); what the provider declares (prices, capabilities)
is ``openai_provider``.

The served snapshot id (``gpt-4o-mini-2024-07-18``) goes into
``ChatResult.extra["model"]``, the finish reason into
``extra["finish_reason"]``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from pytest_restore.models.api import (
    ModelAPI,
)
from pytest_restore.models.base import ChatRequest, ChatResult, wire_reply
from pytest_restore.models.decoding import decoding_parameters
from pytest_restore.models.embeddings import EmbeddingLimits, ManagedEmbedder
from pytest_restore.models.managed import failure_cause, split_base_urls
from pytest_restore.models.managed_chat import CACHE_ONLY_MISS, ManagedChatModel
from pytest_restore.models.redact import MIN_KEY_FRAGMENT, REDACTED, KeyRedactor

__all__ = [
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "CACHE_ONLY_MISS",
    "MIN_KEY_FRAGMENT",
    "PLACEHOLDER_KEY",
    "PROVIDER",
    "REDACTED",
    "KeyRedactor",
    "OpenAIAPI",
    "OpenAIChatModel",
    "OpenAIEmbedder",
    "failure_cause",
]

#: The model provider these models belong to: names read ``openai:MODEL``.
PROVIDER = "openai"
#: The environment variable the API key is read from (and nothing else is).
API_KEY_ENV = "OPENAI_API_KEY"
#: The environment variable a base URL is read from when none is given.
BASE_URL_ENV = "OPENAI_BASE_URL"
#: OpenAI's own API.
DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: Sent as the key when the environment has none: local servers need none,
#: and the real API answers it with a 401, which is reported loudly.
PLACEHOLDER_KEY = "not-needed"

#: OpenAI's published embedding limits: 2,048 inputs of at most 8,191 tokens, 300,000 tokens a request.
EMBEDDING_LIMITS: dict[str, EmbeddingLimits] = {
    name: EmbeddingLimits(2048, 8191, 300_000)
    for name in ("text-embedding-3-small", "text-embedding-3-large", "text-embedding-ada-002")
}


class OpenAIAPI(ModelAPI):
    """One model at one OpenAI-compatible base URL: chat completions and embeddings."""

    provider = PROVIDER
    key_env = API_KEY_ENV
    default_base_url = DEFAULT_BASE_URL

    def __init__(self, model: str, base_url: str | None = None) -> None:
        """``base_url`` defaults to ``$OPENAI_BASE_URL``, then to OpenAI's API."""
        super().__init__(model, base_url or os.environ.get(BASE_URL_ENV) or None)
        self.custom_base_url = bool(base_url or os.environ.get(BASE_URL_ENV))

    @property
    def where(self) -> str:
        """The base URL given, or ``api.openai.com``."""
        return self.base_url if self.custom_base_url else "api.openai.com"

    def headers(self) -> dict[str, str]:
        """The key as a bearer token (a placeholder when none is set: local servers need none)."""
        return {"authorization": f"Bearer {self.key or PLACEHOLDER_KEY}"}

    def chat_request(self, request: ChatRequest) -> tuple[str, dict[str, Any]]:
        """``/chat/completions`` with decoding by model family (and ``response_format`` for a structured reply)."""
        return "/chat/completions", {
            "model": self.model,
            "messages": request.as_openai_messages(),
            **decoding_parameters(self.model, request.max_tokens, request.temperature),
            **request.openai_extras(),
        }

    def read_chat(self, reply: Any, request: ChatRequest) -> ChatResult | str:
        """The first choice's text, the served model id, the finish reason and the usage."""
        try:
            choice = reply["choices"][0]
            text = choice["message"]["content"]
            finish_reason = str(choice.get("finish_reason") or "")
            served_model = str(reply.get("model") or "")
            usage = reply.get("usage") or {}
            input_tokens = int(usage.get("prompt_tokens") or 0)
            output_tokens = int(usage.get("completion_tokens") or 0)
            tool_calls = choice["message"].get("tool_calls") or []
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            return f"malformed response: {type(exc).__name__}: {exc}"
        if request.wire is not None:  # a library's request through the gateway: the whole assistant message
            if not isinstance(tool_calls, list) or (not isinstance(text, str) and not tool_calls):
                return f"empty reply (finish_reason={finish_reason or 'none'})"
            calls = [
                {"id": str(c.get("id", "")), "type": "function",
                 "function": {"name": str(c["function"]["name"]), "arguments": str(c["function"].get("arguments") or "{}")}}
                for c in tool_calls if isinstance(c, dict) and isinstance(c.get("function"), dict) and "name" in c["function"]
            ]
            text = wire_reply(text if isinstance(text, str) else None, calls)
        if not isinstance(text, str):
            return f"empty reply (finish_reason={finish_reason or 'none'})"
        return ChatResult(
            text=text,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            extra={"model": served_model, "finish_reason": finish_reason},
        )

    def embeddings_request(self, texts: Sequence[str]) -> tuple[str, dict[str, Any]]:
        """``/embeddings`` with float vectors."""
        return "/embeddings", {"model": self.model, "input": list(texts), "encoding_format": "float"}

    def read_embeddings(self, reply: Any, n: int) -> tuple[list[Any], list[int], int] | str:
        """The rows, their ``index`` fields and the prompt tokens of a decoded reply."""
        try:
            data = reply["data"]
            indexes = [int(item["index"]) for item in data]
            rows = [item["embedding"] for item in data]
            tokens = int((reply.get("usage") or {}).get("prompt_tokens") or 0)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return f"malformed response: {type(exc).__name__}: {exc}"
        return rows, indexes, tokens


def _apis(model: str, base_url: str | None) -> list[OpenAIAPI]:
    return [OpenAIAPI(model, url) for url in split_base_urls(base_url)]


class OpenAIChatModel(ManagedChatModel):
    """A chat model behind an OpenAI-compatible endpoint (the ``ChatModel`` protocol), managed."""

    def __init__(self, *, model: str, base_url: str | None = None, **options: Any) -> None:
        """``model`` is the provider's model name (it also keys the cache); ``base_url`` one URL or
        several separated by commas (replicas); ``options``: ``ManagedChatModel``'s."""
        super().__init__(_apis(model, base_url), **options)


class OpenAIEmbedder(ManagedEmbedder):
    """An embedding model behind an OpenAI-compatible ``/v1/embeddings`` endpoint, managed."""

    def __init__(self, *, model: str, base_url: str | None = None, limits: EmbeddingLimits | None = None, **options: Any) -> None:
        """``model`` is the provider's name (``text-embedding-3-small``); ``options``: ``ManagedCalls``'."""
        super().__init__(_apis(model, base_url), limits=limits or EMBEDDING_LIMITS.get(model), **options)
