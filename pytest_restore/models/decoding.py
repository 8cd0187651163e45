"""What a model family is sent, and what sending it costs.

OpenAI's reasoning families (gpt-5*, o1, o3, o4) take other decoding fields
than the chat families: no temperature, ``max_completion_tokens`` with room
for hidden reasoning, and a reasoning effort. This module says which family a
model is of, builds the decoding fields of a request body, describes them in
words for the report, and estimates the tokens a set of requests costs (the
dry run's price). It needs no ``openai`` package.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from pytest_restore.data.tokens import count_tokens
from pytest_restore.models.base import ChatRequest, ChatResult

#: Output tokens a reasoning model may spend thinking, on top of the reply's budget.
REASONING_ALLOWANCE = 2048
#: The reasoning effort asked of reasoning families (every one of them accepts "low").
REASONING_EFFORT = "low"

#: ``ChatResult.extra["usage"]`` of a result whose tokens were estimated: the model reported none.
ESTIMATED = "estimated"

# How tokens of the chat format add up (OpenAI's cookbook accounting for the
# gpt-4o family): each message costs its content plus a few tokens for the
# role and separators, and the reply is primed with a few more.
_TOKENS_PER_MESSAGE = 4
_TOKENS_PER_REPLY = 3


def is_reasoning_model(model: str) -> bool:
    """Whether ``model`` is of an OpenAI reasoning family (gpt-5*, o1*, o3*, o4*).

    Those reject ``max_tokens`` and any non-default temperature, and count
    their hidden reasoning inside ``max_completion_tokens``. A fine-tuned
    name (``ft:o4-mini:...``) belongs to its base model's family.
    """
    base = model.split("/")[-1].lower().removeprefix("ft:")
    return base.startswith("gpt-5") or re.match(r"o[134](-|$)", base) is not None


def decoding_parameters(model: str, max_tokens: int, temperature: float) -> dict[str, Any]:
    """The decoding fields of a chat-completions body for ``model`` (see ``is_reasoning_model``)."""
    if is_reasoning_model(model):
        return {
            "max_completion_tokens": max_tokens + REASONING_ALLOWANCE,
            "reasoning_effort": REASONING_EFFORT,
        }
    return {"max_tokens": max_tokens, "temperature": temperature}


def describe_decoding(model: str) -> dict[str, str]:
    """What is sent to ``model``, in words (summary.json and report.md show it per model)."""
    if is_reasoning_model(model):
        return {
            "family": "reasoning",
            "temperature": "model default (the family rejects any other; not greedy)",
            "max_completion_tokens": f"output budget + {REASONING_ALLOWANCE} reasoning tokens",
            "reasoning_effort": REASONING_EFFORT,
        }
    return {"family": "chat", "temperature": "0 (greedy)", "max_tokens": "output budget"}


def estimate_tokens(requests: Sequence[ChatRequest], model: str = "") -> tuple[int, int]:
    """Tokens that sending ``requests`` costs: ``(input_tokens, output_tokens_upper_bound)``.

    Identical requests count once, because ``OpenAIChatModel.run`` sends them
    once. Input tokens are exact o200k_base counts of the message contents
    plus the chat format's per-message overhead; the output bound is the sum
    of ``max_tokens`` (plus the reasoning allowance when ``model`` is of a
    reasoning family). Filter out requests ``ResponseCache.contains`` already
    answers to price only what would be sent.
    """
    distinct = list(dict.fromkeys(requests))
    contents = [content for request in distinct for _, content in request.messages]
    counts = iter(count_tokens(contents))
    input_tokens = sum(chat_input_tokens([next(counts) for _ in request.messages]) for request in distinct)
    # a reasoning model may spend its whole thinking allowance on top of the reply
    extra = REASONING_ALLOWANCE if is_reasoning_model(model) else 0
    output_tokens = sum(request.max_tokens + extra for request in distinct)
    return input_tokens, output_tokens


def chat_input_tokens(message_counts: Sequence[int]) -> int:
    """A request's input tokens from its messages' content counts: each plus the chat format's overhead."""
    return _TOKENS_PER_REPLY + sum(message_counts) + _TOKENS_PER_MESSAGE * len(message_counts)


def with_usage(
    result: ChatResult, request: ChatRequest, message_counts: Callable[[], Sequence[int]] | None = None
) -> ChatResult:
    """``result`` with its token usage: as the model reported it, else estimated and marked so.

    A model that reports no usage (no ``usage`` object, or zeros: a local
    server, a fake) gets the request's input tokens as :func:`estimate_tokens`
    counts them and the reply's o200k tokens as its output, with
    ``extra["usage"] = "estimated"``. A failed call is returned as it is.
    ``message_counts``, when given, counts the request's messages from the
    parts they were built of (:meth:`PromptSet.reader_tokens`, exactly
    :func:`estimate_tokens`' counts): no prompt is encoded whole.
    """
    if result.text is None or result.input_tokens or result.output_tokens:
        return result
    tokens_in = chat_input_tokens(message_counts()) if message_counts is not None else estimate_tokens([request])[0]
    tokens_out = count_tokens([result.text])[0]
    extra = {**result.extra, "usage": ESTIMATED}
    if type(result) is ChatResult:  # made directly: replace() reads the class's fields again at every call
        return ChatResult(result.text, result.error, tokens_in, tokens_out, result.cached, extra)
    return replace(result, input_tokens=tokens_in, output_tokens=tokens_out, extra=extra)


def is_estimated(result: ChatResult) -> bool:
    """Whether ``result``'s token usage is an estimate (:func:`with_usage`)."""
    return result.extra.get("usage") == ESTIMATED
