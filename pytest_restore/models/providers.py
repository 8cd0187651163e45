"""Models by name, and what a grid will cost before it runs.

``--restore-reader/judge/scorer`` (and the robustness reader and audit
judge) take ``fake`` or ``openai:MODEL``. ``openai:`` models go through the
official ``openai`` client to OpenAI's API or to any OpenAI-compatible
server (``--restore-base-url`` or ``OPENAI_BASE_URL``); the key comes only
from ``OPENAI_API_KEY``. Their responses are cached on disk, keyed by the
model and the request, so an unchanged grid sends nothing the second time.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_restore.models.base import ChatModel, ChatRequest
from pytest_restore.models.cache import ResponseCache, request_key
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.models.openai_chat import API_KEY_ENV, OpenAIChatModel, estimate_tokens
from pytest_restore.models.progress import Progress
from pytest_restore.models.prompts import parse_score, parse_verdict

ROLES = ("reader", "judge", "scorer")
#: The deterministic stand-ins: ``fake`` in every role; ``fake-strong``, a reader
#: that makes fewer utilisation errors (for trying the robustness reader offline).
FAKES = ("fake", "fake-strong")
OPENAI_PREFIX = "openai:"


class ModelSpecError(ValueError):
    """A model name that is neither ``fake`` nor ``openai:MODEL``."""


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


def check_spec(spec: str, option: str) -> None:
    """Reject a malformed model name early, with the option it came from."""
    if spec in FAKES:
        return
    if spec.startswith(OPENAI_PREFIX) and len(spec) > len(OPENAI_PREFIX):
        if importlib.util.find_spec("openai") is None:  # an extra: the fake models never need it
            raise ModelSpecError(f"{option}: {spec} needs the openai package: pip install 'pytest-restore[openai]'")
        return
    raise ModelSpecError(f"{option}: unknown model {spec!r}; use 'fake', 'fake-strong' (a reader) or 'openai:MODEL'")


def is_real(spec: str) -> bool:
    """Whether a model name calls a real model."""
    return spec.startswith(OPENAI_PREFIX)


#: What a reply must look like before it is accepted (else it is retried, then failed).
VALIDATORS: dict[str, Callable[[str], bool] | None] = {
    "reader": None,
    "judge": lambda text: parse_verdict(text) is not None,
    "scorer": lambda text: parse_score(text) is not None,
}


def make_model(spec: str, role: str, options: ModelOptions, *, use_cache: bool = True) -> ChatModel:
    """The model a name stands for, in a role (reader, judge or scorer)."""
    check_spec(spec, f"--restore-{role}")
    if spec == "fake-strong":
        if role != "reader":
            raise ModelSpecError(f"--restore-{role}: 'fake-strong' is a reader only")
        return FakeReader(name="fake-strong", utilisation_scale=0.4)
    if spec == "fake":
        if role == "reader":
            return FakeReader()
        return FakeJudge() if role == "judge" else FakeScorer()
    return OpenAIChatModel(
        model=spec[len(OPENAI_PREFIX) :],
        base_url=options.base_url,
        cache=ResponseCache(options.cache_dir) if use_cache else None,
        max_concurrency=options.max_concurrency,
        rpm=options.rpm,
        tpm=options.tpm,
        max_tries=options.max_tries,
        timeout=options.timeout,
        max_retry_after=options.max_retry_after,
        validator=VALIDATORS[role],
        progress=Progress(label=f"{role} calls", quiet=options.quiet),
    )


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
    role: str, spec: str, requests: Sequence[ChatRequest], cache: ResponseCache | None, note: str = ""
) -> CostLine:
    """Unique calls, those already cached, and token estimates for the rest."""
    unique = list(dict.fromkeys(requests))
    name = spec[len(OPENAI_PREFIX) :] if is_real(spec) else spec
    cached = [r for r in unique if cache is not None and is_real(spec) and cache.contains(name, r)]
    todo = [r for r in unique if r not in set(cached)]
    tokens_in, tokens_out = estimate_tokens(todo, name)
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
    return model.strip().removeprefix(OPENAI_PREFIX), (in_price, out_price)


def price_of(spec: str, prices: dict[str, tuple[float, float]]) -> tuple[float, float] | None:
    """The price of a model name: exact, else its longest known prefix; fakes are free."""
    if not is_real(spec):
        return (0.0, 0.0)
    name = spec[len(OPENAI_PREFIX) :]
    known = [k for k in prices if name == k or name.startswith(k + "-")]
    return prices[max(known, key=len)] if known else None


def render_cost(lines: Sequence[CostLine], prices: dict[str, tuple[float, float]] | None = None) -> list[str]:
    """The dry run's table, one line a model, with the estimated cost of what is still to send."""
    table = dict(PRICES, **(prices or {}))
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
    summary = f"estimated cost of what is still to send: at most ${total:,.2f}"
    if unpriced:
        names = ", ".join(sorted(set(unpriced)))
        summary += f" plus {names} (no price known: give --restore-price MODEL=IN,OUT in USD per million tokens)"
    out.append(summary + " (output tokens counted at their cap)")
    return out


def cached_text(cache: ResponseCache | None, spec: str, request: ChatRequest) -> str | None:
    """A real model's cached reply to ``request``, without counting it as a hit."""
    if cache is None or not is_real(spec):
        return None
    result = cache.peek(request_key(spec[len(OPENAI_PREFIX) :], request))
    return result.text if result is not None else None
