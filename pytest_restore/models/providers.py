"""Models by name, and what a grid will cost before it runs.

``--restore-reader/judge/scorer`` (and the robustness reader and audit
judge) take ``fake`` or ``openai:MODEL``. ``openai:`` models go through the
official ``openai`` client to OpenAI's API or to any OpenAI-compatible
server (``--restore-base-url`` or ``OPENAI_BASE_URL``); the key comes only
from ``OPENAI_API_KEY``. Their responses are cached on disk, keyed by the
model and the request, so an unchanged grid sends nothing the second time.
"""

from __future__ import annotations

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
    if spec in FAKES or (spec.startswith(OPENAI_PREFIX) and len(spec) > len(OPENAI_PREFIX)):
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


def render_cost(lines: Sequence[CostLine]) -> list[str]:
    """The dry run's table, one line a model."""
    out = [f"{'role':<10}{'model':<28}{'unique calls':>14}{'cached':>10}{'to send':>10}{'input tok':>13}{'output tok':>13}"]
    for c in lines:
        out.append(
            f"{c.role:<10}{c.model:<28}{c.calls:>14,}{c.cached:>10,}{c.calls - c.cached:>10,}"
            f"{c.input_tokens:>13,}{c.output_tokens:>13,}" + (f"  {c.note}" if c.note else "")
        )
    return out


def cached_text(cache: ResponseCache | None, spec: str, request: ChatRequest) -> str | None:
    """A real model's cached reply to ``request``, without counting it as a hit."""
    if cache is None or not is_real(spec):
        return None
    result = cache.peek(request_key(spec[len(OPENAI_PREFIX) :], request))
    return result.text if result is not None else None
