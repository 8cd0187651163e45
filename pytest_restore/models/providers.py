"""Models by name, and what a grid will cost before it runs.

``--restore-reader/judge/scorer`` (and the robustness reader and audit
judge) take ``fake`` (the offline stand-ins) or ``PROVIDER:MODEL``, where
``PROVIDER`` is a registered :class:`ModelProvider`. The built-in provider
is ``openai``: its models go through the official ``openai`` client to
OpenAI's API or to any OpenAI-compatible server (``--restore-base-url`` or
``OPENAI_BASE_URL``); the key comes only from ``OPENAI_API_KEY``. Their
responses are cached on disk, keyed by the model and the request, so an
unchanged grid sends nothing the second time. A user's provider registers
like a policy: the ``pytest_restore_register_providers`` hook or the
``pytest_restore.providers`` entry-point group.
"""

from __future__ import annotations

import importlib.util
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from pytest_restore.models.base import ChatModel, ChatRequest
from pytest_restore.models.batch import BatchChatModel, BatchOptions, BatchRunner
from pytest_restore.models.cache import ResponseCache, request_key
from pytest_restore.models.decoding import estimate_tokens
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.models.openai_chat import API_KEY_ENV, OpenAIChatModel
from pytest_restore.models.openai_chat import PROVIDER as OPENAI
from pytest_restore.models.progress import Progress
from pytest_restore.models.prompts import parse_score, parse_verdict
from pytest_restore.registry import Registry

ROLES = ("reader", "judge", "scorer")
#: The deterministic stand-ins: ``fake`` in every role; ``fake-strong``, a reader
#: that makes fewer utilisation errors (for trying the robustness reader offline).
FAKES = ("fake", "fake-strong")


class ModelSpecError(ValueError):
    """A model name that is neither a fake nor ``PROVIDER:MODEL`` of a registered provider."""


@dataclass(frozen=True)
class ModelOptions:
    """How real models are reached and paced."""

    cache_dir: Path
    base_url: str | None = None
    max_concurrency: int = 16
    rpm: float | None = None
    tpm: float | None = None
    max_tries: int = 6
    timeout: float = 60.0
    max_retry_after: float = 60.0
    quiet: bool = False
    #: The run whose processes share their failed calls through the cache (``None``: not shared).
    run: str | None = None
    #: ``--restore-batch``: every call goes out in a Batch API round, none live
    batch: BatchOptions | None = None

    def pacing(self) -> dict[str, Any]:
        """The keyword arguments every OpenAI-compatible model (chat or embeddings) is paced and reached with."""
        return {
            "base_url": self.base_url,
            "max_concurrency": self.max_concurrency,
            "rpm": self.rpm,
            "tpm": self.tpm,
            "max_tries": self.max_tries,
            "timeout": self.timeout,
            "max_retry_after": self.max_retry_after,
        }


#: What a reply must look like before it is accepted (else it is retried, then failed).
VALIDATORS: dict[str, Callable[[str], bool] | None] = {
    "reader": None,
    "judge": lambda text: parse_verdict(text) is not None,
    "scorer": lambda text: parse_score(text) is not None,
}


class ModelProvider(ABC):
    """A family of models named ``NAME:MODEL`` on the command line.

    Subclass it, set :attr:`name`, implement :meth:`make`, and register an
    instance with the ``pytest_restore_register_providers`` hook (or the
    ``pytest_restore.providers`` entry-point group).
    """

    #: The prefix before the colon, e.g. ``openai`` for ``openai:gpt-4o-mini``.
    name: ClassVar[str] = ""
    #: Whether its models are real (priced by the dry run, reported as model usage).
    real: ClassVar[bool] = True
    #: ``(module, what to pip install)`` when its models need a package that may be absent.
    requires: ClassVar[tuple[str, str] | None] = None

    @abstractmethod
    def make(self, model: str, role: str, options: ModelOptions, *, use_cache: bool = True) -> ChatModel:
        """The model ``model`` in ``role`` (reader, judge or scorer).

        ``options.cache_dir`` is where replies may be cached; a judge or scorer
        should only accept replies that :data:`VALIDATORS` accepts for its role.
        """

    def cache_name(self, model: str) -> str | None:
        """The name its replies are cached under in :class:`ResponseCache` (``None``: not cached)."""
        return None


class OpenAIProvider(ModelProvider):
    """OpenAI's API or any OpenAI-compatible server, through the official client."""

    name = OPENAI
    # an extra: the fake models (and sessions that are not audits) never load it
    requires = ("openai", "pytest-restore[openai]")

    def make(self, model: str, role: str, options: ModelOptions, *, use_cache: bool = True) -> ChatModel:
        """An :class:`OpenAIChatModel` with the run's pacing, retries and response cache.

        Under ``--restore-batch`` it answers from the cache alone, inside a
        :class:`BatchChatModel` that sends what the cache lacks as a batch round.
        """
        if options.batch is not None:
            inner = OpenAIChatModel(
                model=model,
                base_url=options.base_url,
                cache=ResponseCache(options.cache_dir) if use_cache else None,
                validator=VALIDATORS[role],
                cache_only=True,
            )
            runner = BatchRunner(
                options.cache_dir,
                VALIDATORS,
                base_url=options.base_url,
                poll=options.batch.poll,
                resubmit=options.batch.resubmit,
            )
            return BatchChatModel(inner, role, runner)
        return OpenAIChatModel(
            model=model,
            cache=ResponseCache(options.cache_dir, run=options.run) if use_cache else None,
            **options.pacing(),
            validator=VALIDATORS[role],
            progress=Progress(label=f"{role} calls", quiet=options.quiet),
        )

    def cache_name(self, model: str) -> str | None:
        """Replies are cached under the bare model name."""
        return model


class ProviderRegistry(Registry[ModelProvider]):
    """Model providers by name, in the order they were registered."""

    kind = "model provider"
    item_type = ModelProvider
    entry_point_group = "pytest_restore.providers"


BUILTIN_PROVIDERS: tuple[type[ModelProvider], ...] = (OpenAIProvider,)


def default_providers() -> ProviderRegistry:
    """The built-in providers plus those installed packages declare as entry points."""
    return ProviderRegistry.default(BUILTIN_PROVIDERS)


@lru_cache(maxsize=1)
def _builtin_providers() -> ProviderRegistry:
    return default_providers()


def _resolve(spec: str, providers: ProviderRegistry | None) -> tuple[ModelProvider, str] | None:
    """The provider and model a ``NAME:MODEL`` spec names, or ``None``."""
    name, colon, model = spec.partition(":")
    registry = providers if providers is not None else _builtin_providers()
    if not colon or not model or name not in registry:
        return None
    return registry[name], model


def check_spec(spec: str, option: str, providers: ProviderRegistry | None = None) -> None:
    """Reject a malformed model name early, with the option it came from."""
    if spec in FAKES:
        return
    resolved = _resolve(spec, providers)
    if resolved is not None:
        needed = resolved[0].requires
        if needed is not None and importlib.util.find_spec(needed[0]) is None:
            raise ModelSpecError(f"{option}: {spec} needs the {needed[0]} package: pip install '{needed[1]}'")
        return
    names = ", ".join(f"'{name}:MODEL'" for name in (providers if providers is not None else _builtin_providers()))
    raise ModelSpecError(f"{option}: unknown model {spec!r}; use 'fake', 'fake-strong' (a reader) or {names}")


def is_real(spec: str, providers: ProviderRegistry | None = None) -> bool:
    """Whether a model name calls a real model."""
    resolved = _resolve(spec, providers)
    return resolved is not None and resolved[0].real


def make_model(
    spec: str, role: str, options: ModelOptions, *, use_cache: bool = True, providers: ProviderRegistry | None = None
) -> ChatModel:
    """The model a name stands for, in a role (reader, judge or scorer)."""
    check_spec(spec, f"--restore-{role}", providers)
    if spec == "fake-strong":
        if role != "reader":
            raise ModelSpecError(f"--restore-{role}: 'fake-strong' is a reader only")
        return FakeReader(name="fake-strong", utilisation_scale=0.4)
    if spec == "fake":
        if role == "reader":
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


def missing_key_problem(specs: Sequence[str], base_url: str | None) -> str | None:
    """Why real models named in ``specs`` cannot be reached for want of a key, or ``None``.

    OpenAI's API needs ``OPENAI_API_KEY``; a server at another base URL (a
    local llama.cpp or Ollama) may need none, so only the default endpoint
    is checked.
    """
    real = [spec for spec in specs if is_real(spec)]
    if not real or base_url or os.environ.get(API_KEY_ENV):
        return None
    return (
        f"{', '.join(sorted(set(real)))} would call api.openai.com but ${API_KEY_ENV} is not set "
        "(set it, or point --restore-base-url at a server that needs no key)"
    )


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


#: List prices in USD per million tokens (input, output) of the paper's models, as
#: OpenAI published them in 2026; ``--restore-price MODEL=IN,OUT`` adds or overrides
#: one. A dated id (``gpt-4o-mini-2024-07-18``) takes its family's price.
PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-5.4-mini": (0.75, 4.50),
    "gpt-5.5": (5.00, 30.00),
}


def parse_price(text: str, where: str = "--restore-price") -> tuple[str, tuple[float, float]]:
    """``"MODEL=IN,OUT"`` (USD per million tokens) -> ``(MODEL, (IN, OUT))``."""
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
    return model.strip().removeprefix(f"{OPENAI}:"), (in_price, out_price)


def price_of(spec: str, prices: dict[str, tuple[float, float]]) -> tuple[float, float] | None:
    """The price of a model name: exact, else its longest known prefix; fakes are free."""
    if not is_real(spec):
        return (0.0, 0.0)
    name = spec.partition(":")[2]
    known = [k for k in prices if name == k or name.startswith(k + "-")]
    return prices[max(known, key=len)] if known else None


#: What the Batch API charges against the list price.
BATCH_DISCOUNT = 0.5


def render_cost(
    lines: Sequence[CostLine], prices: dict[str, tuple[float, float]] | None = None, *, batch: bool = False
) -> list[str]:
    """The dry run's table, one line a model, with the estimated cost of what is still to send.

    ``batch``: at batch prices, half the built-in list prices; a price given
    with ``--restore-price`` is taken as the price to pay, as given.
    """
    builtin = {m: (i * BATCH_DISCOUNT, o * BATCH_DISCOUNT) for m, (i, o) in PRICES.items()} if batch else PRICES
    table = dict(builtin, **(prices or {}))
    header = (
        f"{'role':<10}{'model':<28}{'unique calls':>14}{'cached':>10}{'to send':>10}{'input tok':>13}"
        f"{'output tok':>13}{'est. USD':>10}"
    )
    out = [header]
    total = 0.0
    unpriced: list[str] = []
    for c in lines:
        price = price_of(c.model, table)
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
    at = " at batch prices (half the built-in list prices; --restore-price as given)" if batch else ""
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
