"""The Anthropic provider: Anthropic's Messages API as reader, judge or scorer (``anthropic:MODEL``).

Everything that is Anthropic's lives in this module: the key
(``ANTHROPIC_API_KEY`` only, sent as ``x-api-key``), the API version header,
the base URL (commas for replicas: ``ANTHROPIC_BASE_URL``, which wins as
the provider's own setting, else the run's ``--restore-base-url``, else
Anthropic's API; a run that mixes providers and points ``--restore-base-url``
at another provider's server sets ``ANTHROPIC_BASE_URL`` for this one), the request (``max_tokens`` always sent; the system prompt as
the top-level ``system`` field, since the API refuses a ``system`` role
among the messages), the answer (its ``text`` content blocks, ``usage`` and
``stop_reason``), its error body (``{"type": "error", "error": {"type",
"message"}}``), its 529 "overloaded" (retried with fewer calls in flight,
as a 429) and its list prices. Retries, ``retry-after``, pacing, caching and
failures are the managed layer's, as for every provider. Its batch interface
(the Message Batches API, at half the list price) is ``anthropic_batches``.

It speaks HTTP through the shared standard-library transport
(``models.http``) rather than the ``anthropic`` SDK: the SDK would be a
second HTTP stack with its own retries, timeouts and error types to switch
off and map back (as the OpenAI client's were), for one POST whose body and
answer fit in a page; without it the provider installs nothing and costs
the managed layer no extra work per call.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

from pytest_restore.models.anthropic_batches import AnthropicBatches
from pytest_restore.models.api import (
    OVERLOADED,
    VALIDATORS,
    ModelAPI,
    ModelOptions,
    ModelProvider,
    price_by_family,
)
from pytest_restore.models.base import (
    ChatModel,
    ChatRequest,
    ChatResult,
    canonical_json,
    wire_reply,
)
from pytest_restore.models.batch import batch_model
from pytest_restore.models.cache import ResponseCache
from pytest_restore.models.managed import split_base_urls
from pytest_restore.models.managed_chat import ManagedChatModel
from pytest_restore.models.progress import Progress

#: The model provider these models belong to: names read ``anthropic:MODEL``.
PROVIDER = "anthropic"
#: The environment variable the API key is read from (and nothing else is).
API_KEY_ENV = "ANTHROPIC_API_KEY"
#: The environment variable a base URL (or several, comma-separated: replicas) is read from.
BASE_URL_ENV = "ANTHROPIC_BASE_URL"
#: Anthropic's own API.
DEFAULT_BASE_URL = "https://api.anthropic.com"
#: The API version every request names (``anthropic-version``).
API_VERSION = "2023-06-01"
#: Anthropic's "overloaded" status: retried with fewer calls in flight.
OVERLOADED_STATUS = 529
#: List prices in USD per million tokens (input, output), as Anthropic published them;
#: a dated id (``claude-haiku-4-5-20251001``) takes its family's price.
PRICES: dict[str, tuple[float, float]] = {
    "claude-haiku-4-5": (1.00, 5.00),
    "claude-sonnet-4-5": (3.00, 15.00),
    "claude-opus-4-5": (5.00, 25.00),
}
#: What the Message Batches API charges against the list price.
BATCH_DISCOUNT = 0.5


class AnthropicAPI(ModelAPI):
    """One Claude model at one base URL: ``POST /v1/messages``."""

    provider = PROVIDER
    key_env = API_KEY_ENV
    default_base_url = DEFAULT_BASE_URL

    def headers(self) -> dict[str, str]:
        """The key (``x-api-key``, only when set) and the API version."""
        key = self.key
        return {"anthropic-version": API_VERSION, **({"x-api-key": key} if key else {})}

    def chat_request(self, request: ChatRequest) -> tuple[str, dict[str, Any]]:
        """System messages joined into the top-level ``system`` field; the others as messages."""
        if request.wire is not None:
            return "/v1/messages", {"model": self.model, **translated_request(request)}
        system = "\n\n".join(content for role, content in request.messages if role == "system")
        messages = [{"role": role, "content": content} for role, content in request.messages if role != "system"]
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "messages": messages,
        }
        if system:
            body["system"] = system
        return "/v1/messages", body

    def read_chat(self, reply: Any, request: ChatRequest) -> ChatResult | str:
        """The text blocks of the answer, its usage, model and stop reason."""
        try:
            if reply.get("type") != "message":
                return f"malformed response: type {reply.get('type')!r}, not a message"
            blocks = reply["content"]
            if request.wire is not None:
                blocks = [{"type": "text", "text": translated_reply(blocks, request)}]
            texts = [block["text"] for block in blocks if block.get("type") == "text"]
            stop_reason = str(reply.get("stop_reason") or "")
            usage = reply.get("usage") or {}
            input_tokens = int(usage.get("input_tokens") or 0)
            output_tokens = int(usage.get("output_tokens") or 0)
            served_model = str(reply.get("model") or "")
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            return f"malformed response: {type(exc).__name__}: {exc}"
        if not texts or not all(isinstance(t, str) for t in texts):
            return f"empty reply (stop_reason={stop_reason or 'none'})"
        return ChatResult(
            text="".join(texts),
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            extra={"model": served_model, "finish_reason": stop_reason},
        )

    def error_detail(self, status: int, body: bytes) -> str:
        """``error.type: error.message`` of Anthropic's error body."""
        try:
            error = json.loads(body)["error"]
            text = f"{error['type']}: {error['message']}"
        except (ValueError, KeyError, TypeError):
            return super().error_detail(status, body)
        return text if len(text) <= 200 else text[:197] + "..."

    def classify(self, status: int) -> str:
        """As any provider, and 529 (overloaded) is retried with fewer calls in flight."""
        return OVERLOADED if status == OVERLOADED_STATUS else super().classify(status)


class AnthropicProvider(ModelProvider):
    """Anthropic's Messages API (chat and its Message Batches; no embeddings endpoint)."""

    name = PROVIDER
    capabilities = frozenset({"chat", "batch"})
    key_env = API_KEY_ENV
    batch_discount = BATCH_DISCOUNT
    # no structured replies (reply_styles empty): the Messages API has no response_format; a run asking its
    # judge for one stops at the settings (providers.reply_problem), before any call

    def make(self, model: str, role: str, options: ModelOptions, *, use_cache: bool = True) -> ChatModel:
        """A managed model over the Messages API with the run's pacing, retries and response cache.

        Under ``--restore-batch`` it answers from the cache alone, inside a
        ``BatchChatModel`` that sends what the cache lacks as a Message Batch.
        """
        apis = [AnthropicAPI(model, url) for url in split_base_urls(resolved_base_url(options.base_url))]
        if options.batch is not None:
            inner = ManagedChatModel(
                apis,
                cache=ResponseCache(options.cache_dir) if use_cache else None,
                cache_name=self.cache_name(model),
                validator=VALIDATORS[role],
                cache_only=True,
            )
            return batch_model(inner, role, options, self.batches(options.base_url))
        pacing = {k: v for k, v in options.pacing().items() if k != "base_url"}
        return ManagedChatModel(
            apis,
            cache=ResponseCache(options.cache_dir, run=options.run) if use_cache else None,
            cache_name=self.cache_name(model),
            validator=VALIDATORS[role],
            progress=Progress(label=f"{role} calls", quiet=options.quiet),
            **pacing,
        )

    def batches(self, base_url: str | None) -> AnthropicBatches:
        """The Message Batches API, where this provider's calls go (:func:`resolved_base_url`)."""
        return AnthropicBatches(AnthropicAPI, resolved_base_url(base_url), reader=answer_reader)

    def cache_name(self, model: str) -> str | None:
        """``anthropic:MODEL``: no other provider's model of the same name shares its replies."""
        return f"{PROVIDER}:{model}"

    def price(self, model: str) -> tuple[float, float] | None:
        """The list price of the model's family (:data:`PRICES`)."""
        return price_by_family(model, PRICES)

    def key_problem(self, specs: Sequence[str], base_url: str | None) -> str | None:
        """Anthropic's own API needs ``$ANTHROPIC_API_KEY``; another base URL may point at a server that does not."""
        if resolved_base_url(base_url) or os.environ.get(API_KEY_ENV):
            return None
        return (
            f"{', '.join(sorted(set(specs)))} would call api.anthropic.com but ${API_KEY_ENV} is not set "
            f"(set it, or point ${BASE_URL_ENV} or --restore-base-url at a server that needs no key)"
        )


def answer_reader(model: str, validator: Callable[[str], bool] | None) -> ManagedChatModel:
    """The managed model whose rules a batch's answer to ``model`` (``anthropic:MODEL``) is read by; it sends nothing."""
    return ManagedChatModel([AnthropicAPI(model.removeprefix(f"{PROVIDER}:"))], cache_name=model, validator=validator)


def resolved_base_url(option: str | None) -> str | None:
    """Where ``anthropic:`` models are sent: ``$ANTHROPIC_BASE_URL``, else the run's ``--restore-base-url``
    (``option``), else ``None`` (Anthropic's API). The provider's own variable wins over the run-wide option."""
    return os.environ.get(BASE_URL_ENV) or option or None


# -- a library's request through the gateway: OpenAI's tools and formats in Anthropic's terms ----------


def _text_of(content: Any) -> str:
    """An OpenAI message's content as text (a list of parts: their ``text`` joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def format_tool(request: ChatRequest) -> tuple[str, dict[str, Any]] | None:
    """The tool a structured reply is asked through (Anthropic has no ``response_format``): its name and schema."""
    if request.reply_format is not None:
        return request.reply_format.name or "reply", json.loads(request.reply_format.schema)
    found = request.wire_fields().get("response_format")
    if isinstance(found, dict) and found.get("type") == "json_schema":
        spec = found.get("json_schema") or {}
        return str(spec.get("name") or "reply"), dict(spec.get("schema") or {"type": "object"})
    return None


def translated_request(request: ChatRequest) -> dict[str, Any]:
    """An OpenAI-shaped request of the gateway (tools, tool calls, tool results, a JSON format) as a Messages body.

    System messages go to ``system``; an assistant's ``tool_calls`` become
    ``tool_use`` blocks and a ``tool`` message a ``tool_result`` block in a
    user turn (consecutive turns of one role merged, as the API wants them
    alternating); ``tools`` take their ``parameters`` as ``input_schema``;
    ``tool_choice`` ``required`` is ``any``, a named function ``tool``; a
    ``json_schema`` format is a tool of that schema the model must call, a
    ``json_object`` one an instruction in the system prompt.
    """
    wire = request.wire_fields()
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def put(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for message in request.as_openai_messages():
        role, content = message.get("role"), message.get("content")
        if role in ("system", "developer"):
            system.append(_text_of(content))
        elif role == "tool":
            put("user", [{"type": "tool_result", "tool_use_id": str(message.get("tool_call_id", "")), "content": _text_of(content)}])
        elif role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": _text_of(content)}] if _text_of(content) else []
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    arguments = {}
                blocks.append({"type": "tool_use", "id": str(call.get("id", "")), "name": str(function.get("name", "")), "input": arguments})
            put("assistant", blocks or [{"type": "text", "text": ""}])
        else:
            put("user", [{"type": "text", "text": _text_of(content)}])
    body: dict[str, Any] = {"max_tokens": request.max_tokens, "temperature": request.temperature, "messages": turns}
    tools = [
        {"name": str(t["function"]["name"]), "description": str(t["function"].get("description", "")),
         "input_schema": t["function"].get("parameters") or {"type": "object", "properties": {}}}
        for t in wire.get("tools") or [] if isinstance(t, dict) and isinstance(t.get("function"), dict)
    ]
    choice = wire.get("tool_choice")
    fmt = format_tool(request)
    if fmt is not None and not tools:
        tools = [{"name": fmt[0], "description": "Reply with this JSON object.", "input_schema": fmt[1]}]
        body["tool_choice"] = {"type": "tool", "name": fmt[0]}
    elif isinstance(choice, dict):
        body["tool_choice"] = {"type": "tool", "name": str((choice.get("function") or {}).get("name", ""))}
    elif choice == "required":
        body["tool_choice"] = {"type": "any"}
    elif choice == "none":
        tools = []
    if tools:
        body["tools"] = tools
    response_format = wire.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_object":
        system.append("Reply with one JSON object and nothing else.")
    if system:
        body["system"] = "\n\n".join(system)
    return body


def translated_reply(blocks: Sequence[Any], request: ChatRequest) -> str:
    """An answer's content blocks as the gateway's reply (``base.wire_reply``): text, and ``tool_use`` as tool calls
    (the structured reply's own tool as the text of the reply)."""
    fmt = format_tool(request)
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        if block.get("type") == "text":
            texts.append(str(block["text"]))
        elif block.get("type") == "tool_use":
            if fmt is not None and block.get("name") == fmt[0] and not request.wire_fields().get("tools"):
                texts.append(canonical_json(block.get("input") or {}))
            else:
                calls.append({"id": str(block.get("id", "")), "type": "function",
                              "function": {"name": str(block.get("name", "")), "arguments": canonical_json(block.get("input") or {})}})
    return wire_reply("".join(texts) if texts else None, calls)
