"""Models by name, the one registry of providers, and what a grid will cost before it runs.

``--restore-reader/judge/scorer`` (and the robustness reader and audit
judge) take ``fake`` (the offline stand-ins) or ``PROVIDER:MODEL``, where
``PROVIDER`` is a registered :class:`ModelProvider`. Built in: ``openai``
(OpenAI's API or any OpenAI-compatible server, ``openai_chat``) and
``anthropic`` (Anthropic's Messages API, ``anthropic_messages``). What a
provider can do (chat, embeddings, batch), the variable its key is read
from and its prices are asked of the provider; nothing here knows one
provider from another. Replies are cached on disk, keyed by the model and
the request, so an unchanged grid sends nothing the second time. A user's
provider registers like a policy: the ``pytest_restore_register_providers``
hook or the ``pytest_restore.providers`` entry-point group.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from pytest_restore.models.anthropic_messages import AnthropicProvider
from pytest_restore.models.api import VALIDATORS, ModelOptions, ModelProvider
from pytest_restore.models.base import ChatModel, ChatRequest
from pytest_restore.models.batch_api import BatchAPI, BatchError
from pytest_restore.models.batch_ledger import LedgerEntry
from pytest_restore.models.cache import ResponseCache, request_key
from pytest_restore.models.decoding import estimate_tokens
from pytest_restore.models.embeddings import DEFAULT_LIMITS, Embedder, FakeEmbedder, TextVectors
from pytest_restore.models.f1_judge import F1Provider
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.models.openai_provider import OpenAIProvider
from pytest_restore.registry import Registry

__all__ = ["VALIDATORS", "AnthropicProvider", "ModelOptions", "ModelProvider", "OpenAIProvider"]

ROLES = ("reader", "judge", "scorer")
#: The deterministic stand-ins: ``fake`` in every role; ``fake-strong``, a reader
#: that makes fewer utilisation errors (for trying the robustness reader offline).
FAKES = ("fake", "fake-strong")


class ModelSpecError(ValueError):
    """A model name that is neither a fake nor ``PROVIDER:MODEL`` of a registered provider."""


class ProviderRegistry(Registry[ModelProvider]):
    """Model providers by name, in the order they were registered."""

    kind = "model provider"
    item_type = ModelProvider
    entry_point_group = "pytest_restore.providers"


BUILTIN_PROVIDERS: tuple[type[ModelProvider], ...] = (OpenAIProvider, AnthropicProvider, F1Provider)


def default_providers() -> ProviderRegistry:
    """The built-in providers plus those installed packages declare as entry points."""
    return ProviderRegistry.default(BUILTIN_PROVIDERS)


@lru_cache(maxsize=1)
def _builtin_providers() -> ProviderRegistry:
    return default_providers()


def resolve(spec: str, providers: ProviderRegistry | None = None) -> tuple[ModelProvider, str] | None:
    """The provider and model a ``NAME:MODEL`` spec names, or ``None`` (the built-in providers unless given)."""
    name, colon, model = spec.partition(":")
    registry = providers if providers is not None else _builtin_providers()
    if not colon or not model or name not in registry:
        return None
    return registry[name], model


def providers_with(capability: str, providers: ProviderRegistry | None = None) -> list[str]:
    """The names of the providers that declare ``capability`` (``chat``, ``embeddings``, ``batch``)."""
    registry = providers if providers is not None else _builtin_providers()
    return [name for name in registry if capability in registry[name].capabilities]


def can(spec: str, capability: str, providers: ProviderRegistry | None = None) -> bool:
    """Whether the provider of a real model name declares ``capability``."""
    resolved = resolve(spec, providers)
    return resolved is not None and capability in resolved[0].capabilities


_resolve = resolve


def check_spec(spec: str, option: str, providers: ProviderRegistry | None = None) -> None:
    """Reject a malformed model name early, with the option it came from."""
    if spec in FAKES:
        return
    resolved = _resolve(spec, providers)
    if resolved is not None:
        needed = resolved[0].requires
        if needed is not None and importlib.util.find_spec(needed[0]) is None:
            raise ModelSpecError(f"{option}: {spec} needs the {needed[0]} package: pip install '{needed[1]}'")
        problem = resolved[0].check(resolved[1], option)
        if problem is not None:
            raise ModelSpecError(problem)
        return
    registry = providers if providers is not None else _builtin_providers()
    fakes = "'fake', 'fake-strong'" if "reader" in option else "'fake'"  # the strong fake is a reader only
    names = ", ".join(f"'{name}:{registry[name].spelled}'" for name in registry if registry[name].serves(option))
    raise ModelSpecError(f"{option}: unknown model {spec!r}; use {fakes} or {names}")


def reply_problem(spec: str, style: str, option: str, providers: ProviderRegistry | None = None) -> str | None:
    """Why the model ``spec`` cannot be asked for a structured reply in ``style`` (``option``: where it was asked), in one line."""
    if spec in FAKES:
        return None  # the fake judge answers a structured request in its shape
    resolved = _resolve(spec, providers)
    if resolved is None or style in resolved[0].reply_styles:
        return None
    registry = providers if providers is not None else _builtin_providers()
    able = ", ".join(f"{name}:" for name in registry if style in registry[name].reply_styles) or "none"
    return (
        f"{option} {style}: {spec} cannot be asked for a structured reply ({resolved[0].name}: declares no "
        f"{style} replies; providers that do: {able}); use --restore-judge-format text"
    )


def is_real(spec: str, providers: ProviderRegistry | None = None) -> bool:
    """Whether a model name calls a real model."""
    resolved = _resolve(spec, providers)
    return resolved is not None and resolved[0].real


def make_model(
    spec: str, role: str, options: ModelOptions, *, use_cache: bool = True, providers: ProviderRegistry | None = None
) -> ChatModel:
    """The model a name stands for, in a role (reader, judge or scorer)."""
    if spec == "fake-malformed" and role == "writer":  # the fake writer with every answer broken (models.fake_writer)
        from pytest_restore.models.fake_writer import FakeWriter

        return FakeWriter(malformed=1.0)
    check_spec(spec, f"--restore-{role}", providers)
    if spec == "fake-strong":
        if role != "reader":
            raise ModelSpecError(f"--restore-{role}: 'fake-strong' is a reader only")
        return FakeReader(name="fake-strong", utilisation_scale=0.4)
    if spec == "fake":
        if role in ("reader", "writer"):  # the fake reader writes as the offline writers do
            return FakeReader()
        return FakeJudge() if role == "judge" else FakeScorer()
    resolved = _resolve(spec, providers)
    assert resolved is not None  # check_spec passed
    provider, model = resolved
    return provider.make(model, role, options, use_cache=use_cache)


def cache_name(spec: str, providers: ProviderRegistry | None = None) -> str | None:
    """The name a model's replies are cached under (``None``: a fake, or a provider that caches nothing)."""
    resolved = _resolve(spec, providers)
    return resolved[0].cache_name(resolved[1]) if resolved is not None else None


def missing_key_problem(
    specs: Sequence[str], base_url: str | None, providers: ProviderRegistry | None = None
) -> str | None:
    """Why real models named in ``specs`` cannot be reached for want of a key, or ``None``.

    Each provider is asked about its own models (``ModelProvider.key_problem``):
    its own endpoint needs its key; a server at another base URL may need none.
    """
    by_provider: dict[str, tuple[ModelProvider, list[str]]] = {}
    for spec in specs:
        resolved = resolve(spec, providers)
        if resolved is not None and resolved[0].real:
            by_provider.setdefault(resolved[0].name, (resolved[0], []))[1].append(spec)
    for provider, named in by_provider.values():
        problem = provider.key_problem(named, base_url)
        if problem is not None:
            return problem
    return None


def batch_client(entry: LedgerEntry, providers: ProviderRegistry | None = None) -> BatchAPI:
    """The batch interface a ledger entry's batch is followed through: its provider's, at its base URL
    (``batch status``, ``batch cancel``); :class:`BatchError` for a provider not registered or not batching."""
    registry = providers if providers is not None else _builtin_providers()
    if entry.provider not in registry or "batch" not in registry[entry.provider].capabilities:
        raise BatchError(f"{entry.batch_id or entry.name}: provider {entry.provider!r} does not batch here")
    return registry[entry.provider].batches(entry.base_url or None)


def close_model(model: object) -> None:
    """Release a model's connections and progress display, when it has any."""
    close = getattr(model, "close", None)
    if callable(close):
        close()


@dataclass(frozen=True)
class CostLine:
    """One row of a dry run: what one model will be asked."""

    role: str
    model: str
    calls: int
    cached: int
    input_tokens: int
    output_tokens: int
    note: str = ""


def cost_line(
    role: str,
    spec: str,
    requests: Sequence[ChatRequest],
    cache: ResponseCache | None,
    note: str = "",
    providers: ProviderRegistry | None = None,
) -> CostLine:
    """Unique calls, those already cached, and token estimates for the rest."""
    unique = list(dict.fromkeys(requests))
    name = cache_name(spec, providers)
    cached = [r for r in unique if cache is not None and name is not None and cache.contains(name, r)]
    todo = [r for r in unique if r not in set(cached)]
    # the model's own name decides its decoding (and so its output budget); a fake is named as is
    tokens_in, tokens_out = estimate_tokens(todo, name if name is not None else spec.partition(":")[2] or spec)
    return CostLine(role, spec, len(unique), len(cached), tokens_in, tokens_out, note)


def parse_price(text: str, where: str = "--restore-price") -> tuple[str, tuple[float, float]]:
    """``"MODEL=IN,OUT"`` (USD per million tokens) -> ``(MODEL, (IN, OUT))``; MODEL bare or ``PROVIDER:MODEL``."""
    model, sep, rates = text.partition("=")
    parts = rates.split(",")
    try:
        if not sep or not model.strip() or len(parts) != 2:
            raise ValueError
        in_price, out_price = float(parts[0]), float(parts[1])
    except ValueError:
        raise ModelSpecError(f"{where}: {text!r} is not MODEL=IN,OUT (USD per million tokens)") from None
    if in_price < 0 or out_price < 0:
        raise ModelSpecError(f"{where}: {text!r}: prices cannot be negative")
    return model.strip(), (in_price, out_price)


def price_of(
    spec: str,
    prices: dict[str, tuple[float, float]] | None = None,
    providers: ProviderRegistry | None = None,
    *,
    batch: bool = False,
) -> tuple[float, float] | None:
    """The price of a model name (``None``: unknown); a model that is not real is free.

    A price given (``--restore-price``, as ``PROVIDER:MODEL`` or the bare
    model) is taken as given, exact or by family; else the provider's own
    declaration, at its batch discount under ``batch``; for an embedding model
    (a memory library's embedder), its embedding price in and nothing out.
    """
    resolved = resolve(spec, providers)
    if resolved is None or not resolved[0].real:
        return (0.0, 0.0)
    provider, model = resolved
    given = prices or {}
    if spec in given:
        return given[spec]
    known = [k for k in given if model == k or model.startswith(k + "-")]
    if known:
        return given[max(known, key=len)]
    declared = provider.price(model)
    if declared is None:  # an embedding model's: its price per million input tokens, nothing out (never batched)
        embedding = provider.embedding_price(model)
        return (embedding, 0.0) if embedding is not None else None
    if not batch:
        return declared
    discount = provider.batch_discount if provider.batch_discount is not None else 1.0
    return (declared[0] * discount, declared[1] * discount)


def render_cost(
    lines: Sequence[CostLine],
    prices: dict[str, tuple[float, float]] | None = None,
    *,
    batch: bool = False,
    providers: ProviderRegistry | None = None,
) -> list[str]:
    """The dry run's table, one line a model, with the estimated cost of what is still to send.

    Each model is priced by its provider's declaration (``unknown`` when it
    declares none); ``batch``: at the provider's batch discount; a price given
    with ``--restore-price`` is taken as the price to pay, as given.
    """
    header = (
        f"{'role':<10}{'model':<28}{'unique calls':>14}{'cached':>10}{'to send':>10}{'input tok':>13}"
        f"{'output tok':>13}{'est. USD':>10}"
    )
    out = [header]
    total = 0.0
    unpriced: list[str] = []
    for c in lines:
        price = price_of(c.model, prices, providers, batch=batch)
        if price is None:
            cost = "?"
            unpriced.append(c.model)
        else:
            usd = (c.input_tokens * price[0] + c.output_tokens * price[1]) / 1e6
            total += usd
            cost = f"{usd:,.2f}"
        out.append(
            f"{c.role:<10}{c.model:<28}{c.calls:>14,}{c.cached:>10,}{c.calls - c.cached:>10,}"
            f"{c.input_tokens:>13,}{c.output_tokens:>13,}{cost:>10}" + (f"  {c.note}" if c.note else "")
        )
    at = " at batch prices (the providers' batch discounts on their list prices; --restore-price as given)" if batch else ""
    if not unpriced:
        out.append(f"estimated cost of what is still to send: at most ${total:,.2f}{at} (output tokens counted at their cap)")
        return out
    # A sum that leaves a model out is no bound: say the cost is unknown, and what would make it known.
    names = sorted(set(unpriced))
    example = names[0].partition(":")[2] or names[0]
    priced = f"; the models with a price: at most ${total:,.2f}{at}" if total > 0 else ""
    out.append(
        f"estimated cost of what is still to send: unknown, no price is known for {', '.join(names)} "
        f"(give --restore-price {example}=IN,OUT in USD per million input and output tokens){priced}"
    )
    return out


def cached_text(
    cache: ResponseCache | None, spec: str, request: ChatRequest, providers: ProviderRegistry | None = None
) -> str | None:
    """A real model's cached reply to ``request``, without counting it as a hit."""
    name = cache_name(spec, providers)
    if cache is None or name is None:
        return None
    result = cache.peek(request_key(name, request))
    return result.text if result is not None else None


# -- embedders -----------------------------------------------------------------------


def _embedding_provider(spec: str, providers: ProviderRegistry | None = None) -> tuple[ModelProvider, str] | None:
    """The provider (declaring ``embeddings``) and model an embedder name names, or ``None``."""
    resolved = resolve(spec, providers)
    if resolved is None or "embeddings" not in resolved[0].capabilities:
        return None
    return resolved


def check_embedder(spec: str, option: str, providers: ProviderRegistry | None = None) -> None:
    """Reject an embedder name that is neither ``fake`` nor ``PROVIDER:MODEL`` of a provider with embeddings."""
    if spec == "fake" or _embedding_provider(spec, providers) is not None:
        return
    names = ", ".join(f"'{name}:MODEL'" for name in providers_with("embeddings", providers))
    raise ValueError(f"{option}: unknown embedder {spec!r}; use 'fake' or {names}")


def make_embedder(
    spec: str, options: ModelOptions, limits: tuple[int, int] | None = None, providers: ProviderRegistry | None = None
) -> Embedder:
    """The embedder a name stands for, paced and retried as the run's chat models (``options``: ``ModelOptions``)."""
    check_embedder(spec, "--restore-ranker", providers)
    if spec == "fake":
        return FakeEmbedder()
    resolved = _embedding_provider(spec, providers)
    assert resolved is not None
    provider, model = resolved
    embedder: Embedder = provider.make_embedder(model, options, limits)
    return embedder


def embedding_price(spec: str, providers: ProviderRegistry | None = None) -> float | None:
    """USD per million input tokens of an embedder (0 for the fake, ``None`` when unknown)."""
    if spec == "fake":
        return 0.0
    resolved = _embedding_provider(spec, providers)
    if resolved is None:
        return None
    price: float | None = resolved[0].embedding_price(resolved[1])
    return price


def embedding_cost_line(
    spec: str, texts: Sequence[str], vectors: TextVectors, providers: ProviderRegistry | None = None
) -> str:
    """The dry run's line for an embedder: distinct texts, those stored, tokens and cost of the rest."""
    from pytest_restore.data.tokens import count_tokens  # tiktoken: loaded when a dry run needs it

    distinct = list(dict.fromkeys(texts))
    todo = vectors.missing(distinct)
    tokens = sum(count_tokens(todo)) if spec != "fake" else 0
    price = embedding_price(spec, providers)
    cost = "free (offline)" if spec == "fake" else ("?" if price is None else f"${tokens * price / 1e6:,.2f}")
    limits = getattr(vectors.embedder, "limits", DEFAULT_LIMITS)
    requests = 0
    if todo and spec != "fake":
        requests = max(math.ceil(len(todo) / limits.max_inputs), math.ceil(tokens / (limits.max_request_tokens or tokens)))
    return (
        f"embedder {spec}: {len(distinct):,} distinct texts, {len(distinct) - len(todo):,} stored, "
        f"{len(todo):,} to embed ({tokens:,} o200k tokens in about {requests:,} requests): est. {cost}"
    )
