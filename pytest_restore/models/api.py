"""The model API a provider implements, and the provider's declaration.

Two layers, as in any client of several model vendors:

- :class:`ModelAPI` is one model of one provider reached at one base URL:
  what a chat or embeddings request looks like on its wire (path, headers,
  body), how its answer is read, how its error replies are told apart
  (:meth:`ModelAPI.classify`) and worded. It sends over the shared
  :class:`~pytest_restore.models.http.HTTPTransport` and raises
  :class:`CallFailure` for anything but a usable JSON answer. It knows
  nothing of retries, pacing, caches or progress.
- :class:`~pytest_restore.models.managed.ManagedModel` owns those, once for
  every provider and for chat and embeddings alike.

A provider (:class:`ModelProvider`) declares what it offers in the one
registry: its name (the ``NAME:`` of ``NAME:MODEL``), what it can do
(:attr:`~ModelProvider.capabilities`: ``chat``, ``embeddings``, ``batch``),
the environment variable its key is read from, its prices, and how its
models are made. Nothing outside a provider's module asks which provider a
name belongs to.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pytest_restore.models.base import REPLY_STYLES, ChatModel, ChatRequest, ChatResult
from pytest_restore.models.batch_api import BatchAPI
from pytest_restore.models.http import HTTPTransport, TransportError
from pytest_restore.models.pacing import parse_retry_after
from pytest_restore.models.prompts import VERDICT_SCHEMA, parse_score, parse_verdict
from pytest_restore.models.redact import KEY_VARIABLES

#: What a provider's models can be used for.
CAPABILITIES = ("chat", "embeddings", "batch")


class CallFailure(Exception):
    """A request that got no usable answer, classified.

    ``kind``: ``status`` (an error reply; ``status`` and ``retry_after`` set),
    ``timeout``, ``unreachable`` (nothing listens there, or no such host),
    ``connection`` (failed or ended mid-reply) or ``malformed`` (a body that
    is not JSON). ``detail`` says what happened, in the provider's words when
    it gave any.
    """

    def __init__(self, kind: str, detail: str, *, status: int = 0, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.status = status
        self.retry_after = retry_after


#: Where each structured-reply style is taken, for the line a refusal stops the run with (docs/MODELS.md).
_TAKEN_BY = {"json-schema": " (OpenAI, vLLM, llama-server)", "json-object": " (llama-cpp-python's server)"}

def _is_verdict(response_format: Mapping[str, Any]) -> bool:
    """Whether a body's ``response_format`` is the judge's verdict (the one structured reply the audit asks for
    itself; any other came from a memory library through the run's gateway)."""
    verdict = json.loads(VERDICT_SCHEMA)
    named = response_format.get("json_schema")
    return response_format.get("schema") == verdict or (isinstance(named, Mapping) and named.get("schema") == verdict)


#: How a managed model treats an error status (:meth:`ModelAPI.classify`).
FATAL, OVERLOADED, RETRY, FAIL = "fatal", "overloaded", "retry", "fail"


class ModelAPI(ABC):
    """One model of a provider at one base URL: its wire format, its errors, its key."""

    #: The provider's name (``openai``): model names read ``PROVIDER:MODEL``.
    provider: ClassVar[str] = ""
    #: The environment variable the key is read from (``None``: the provider needs no key).
    key_env: ClassVar[str | None] = None
    #: Where requests go when no base URL is given.
    default_base_url: ClassVar[str] = ""

    def __init__(self, model: str, base_url: str | None = None) -> None:
        """``model`` is the provider's model name; ``base_url`` defaults to :attr:`default_base_url`."""
        self.model = model
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self.transport = HTTPTransport(self.base_url)

    def __repr__(self) -> str:
        # Spelled out so that no attribute (the key) leaks into a repr.
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def key(self) -> str | None:
        """The API key from the environment (``None`` when unset); never stored elsewhere."""
        return os.environ.get(self.key_env) if self.key_env else None

    @property
    def where(self) -> str:
        """Where requests go, for messages."""
        return self.base_url

    @abstractmethod
    def headers(self) -> dict[str, str]:
        """The headers of every request (the key among them, as the provider wants it)."""

    @abstractmethod
    def chat_request(self, request: ChatRequest) -> tuple[str, dict[str, Any]]:
        """The path and JSON body of a chat request."""

    @abstractmethod
    def read_chat(self, reply: Any, request: ChatRequest) -> ChatResult | str:
        """A decoded chat answer as a result (text, tokens, ``extra`` model and finish reason), or why it is unusable."""

    def embeddings_request(self, texts: Sequence[str]) -> tuple[str, dict[str, Any]]:
        """The path and JSON body of an embeddings request (a provider with ``embeddings`` implements it)."""
        raise NotImplementedError(f"{self.provider}: no embeddings")

    def read_embeddings(self, reply: Any, n: int) -> tuple[list[Any], list[int], int] | str:
        """A decoded embeddings answer as (rows, their input indexes, input tokens), or why it is unusable."""
        raise NotImplementedError(f"{self.provider}: no embeddings")

    def error_detail(self, status: int, body: bytes) -> str:
        """The provider's own message in an error reply, short (its error body's shape)."""
        try:
            decoded = json.loads(body)
        except ValueError:
            decoded = None
        message: object = None
        if isinstance(decoded, dict):
            inner = decoded.get("error", decoded)
            message = inner.get("message") if isinstance(inner, dict) else inner
        text = str(message) if message else (body.decode("utf-8", "replace").strip() or f"status {status}")
        return text if len(text) <= 200 else text[:197] + "..."

    def classify(self, status: int) -> str:
        """What an error status means: :data:`FATAL` (every request will fail so: stop the run),
        :data:`OVERLOADED` (retry, with fewer calls in flight), :data:`RETRY` or :data:`FAIL` (not retried)."""
        if status in (401, 403, 404):
            return FATAL
        if status in (429, 503):
            return OVERLOADED
        if status in (408, 409) or status >= 500:
            return RETRY
        return FAIL

    def refused_shape(self, status: int, detail: str, body: Mapping[str, Any]) -> str | None:
        """The one line a server's refusal of the request's structured reply stops the run with (``None``: not that).

        A server that does not take the ``response_format`` asked for refuses
        every request carrying it alike, so the first refusal stops the run
        rather than each call failing in turn. OpenAI's API answers 400
        (``invalid_request_error``) naming ``response_format``, vLLM 400,
        llama-cpp-python's server (0.3.x) a 500 whose message is the pydantic
        validation error naming it. The line names the option to change.
        """
        found = body.get("response_format")
        if not isinstance(found, dict) or "response_format" not in detail:
            return None
        if not (status in (400, 422) or (status == 500 and "validation error" in detail)):
            return None
        kind = str(found.get("type"))
        style = kind.replace("_", "-")
        said = " ".join(detail.split())
        if not _is_verdict(found):  # a memory library's own format, through the run's gateway: not the judge's
            return (
                f"HTTP {status} (not retried): {self.where} does not take the structured reply a memory library "
                f"asked for through the run's gateway (response_format of type {kind!r}); give the libraries a "
                f"writer model whose server takes it (--restore-writer-model: a server taking {kind}, such as "
                f"{_TAKEN_BY.get(style, ' (OpenAI)').strip()[1:-1]}), or leave that library "
                f"out of --restore-policies; the server said: {said}"
            )
        others = " or ".join(f"{s}{_TAKEN_BY.get(s, '')}" for s in (*REPLY_STYLES, "text") if s != style)
        return (
            f"HTTP {status} (not retried): {self.where} does not take the structured reply "
            f"--restore-judge-format {style} asks for (response_format of type {kind!r}); "
            f"try --restore-judge-format {others}; the server said: {said}"
        )

    def fatal_message(self, status: int, detail: str) -> str:
        """The one line a fatal status stops the run with (the key never in it)."""
        if status == 401:
            if self.key_env is None:
                why = f"{self.where} requires a key and {self.provider} declares none"
            elif self.key:
                why = f"${self.key_env} was rejected by {self.where}"
            else:
                why = f"${self.key_env} is not set and {self.where} requires a key"
            return f"HTTP 401 authentication failed: {why} (the key is not shown)"
        if status == 404:
            return f"HTTP 404 (not retried): {detail}; is the model name {self.model!r} right?"
        return f"HTTP {status} (not retried): {detail}; the key is not allowed to use {self.model!r}"

    def send(self, path: str, body: Mapping[str, Any], timeout: float) -> Any:
        """POST ``body`` as JSON and return the decoded answer; raises :class:`CallFailure`."""
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = {"content-type": "application/json", "accept": "application/json", **self.headers()}
        try:
            reply = self.transport.post(path, data, headers, timeout)
        except TransportError as exc:
            raise CallFailure(exc.kind, exc.detail) from None
        if not 200 <= reply.status < 300:
            raise CallFailure(
                "status",
                self.error_detail(reply.status, reply.body),
                status=reply.status,
                retry_after=parse_retry_after(reply.headers),
            )
        try:
            return json.loads(reply.body)
        except (ValueError, RecursionError) as exc:
            raise CallFailure("malformed", f"{type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        """Close the pooled connections."""
        self.transport.close()

    def abort(self) -> None:
        """Cut the exchanges in flight (Ctrl-C) and close the pooled connections."""
        self.transport.abort()


class BatchSettings(Protocol):
    """How batch rounds are followed (``batch.BatchOptions``)."""

    @property
    def poll(self) -> float:
        """The first wait between polls, in seconds."""
        ...

    @property
    def resubmit(self) -> int:
        """How many times what failed is submitted again."""
        ...


@dataclass(frozen=True)
class ModelOptions:
    """How real models are reached and paced."""

    cache_dir: Path
    #: One base URL, or several separated by commas: replicas of one model (see ``managed``)
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
    batch: BatchSettings | None = None

    def pacing(self) -> dict[str, Any]:
        """The keyword arguments every managed model (chat or embeddings) is paced and reached with."""
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
    "writer": None,  # a summary or a facts list: any text (``NONE`` included) is a writer's reply
    "judge": lambda text: parse_verdict(text) is not None,
    "scorer": lambda text: parse_score(text) is not None,
}


class ModelProvider(ABC):
    """A family of models named ``NAME:MODEL`` on the command line, and what it declares.

    Subclass it, set :attr:`name`, implement :meth:`make`, and register an
    instance with the ``pytest_restore_register_providers`` hook (or the
    ``pytest_restore.providers`` entry-point group). What the run asks of a
    provider it asks here: its :attr:`capabilities`, its :attr:`key_env`,
    its :meth:`price` (the dry run says "unknown" for a model without one)
    and, with ``embeddings``, :meth:`make_embedder`.
    """

    #: The prefix before the colon, e.g. ``openai`` for ``openai:gpt-4o-mini``.
    name: ClassVar[str] = ""
    #: Whether its models are real (priced by the dry run, reported as model usage).
    real: ClassVar[bool] = True
    #: ``(module, what to pip install)`` when its models need a package that may be absent.
    requires: ClassVar[tuple[str, str] | None] = None
    #: What its models can be used for: ``chat`` (reader, judge, scorer), ``embeddings``
    #: (``dense:``/``hybrid:`` rankers), ``batch`` (``--restore-batch``).
    capabilities: ClassVar[frozenset[str]] = frozenset({"chat"})
    #: The environment variable its key is read from (``None``: no key); its value is
    #: redacted from every text a model client passes on.
    key_env: ClassVar[str | None] = None
    #: What its batch interface charges against the list price: the factor ``--restore-batch`` prices
    #: its models at (``None``: no batch).
    batch_discount: ClassVar[float | None] = None
    #: What follows ``NAME:`` in a model name, as error messages spell it.
    spelled: ClassVar[str] = "MODEL"
    #: The structured replies its chat models can be asked for (``base.REPLY_STYLES``; ``--restore-judge-format``)
    reply_styles: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.key_env:
            KEY_VARIABLES.add(cls.key_env)

    @abstractmethod
    def make(self, model: str, role: str, options: ModelOptions, *, use_cache: bool = True) -> ChatModel:
        """The model ``model`` in ``role`` (reader, judge or scorer).

        ``options.cache_dir`` is where replies may be cached; a judge or scorer
        should only accept replies that :data:`VALIDATORS` accepts for its role.
        """

    def make_embedder(self, model: str, options: ModelOptions, limits: tuple[int, int] | None = None) -> Any:
        """The embedder ``model``, an ``embeddings.Embedder`` (a provider that declares ``embeddings`` implements it)."""
        raise NotImplementedError(f"{self.name}: no embeddings")

    def batches(self, base_url: str | None) -> BatchAPI:
        """Its batch interface (``batch_api.BatchAPI``: submit a round, poll it, read its answers, cancel
        it) at ``base_url``, the run's option; a provider that declares ``batch`` implements it."""
        raise NotImplementedError(f"{self.name}: no batch interface")

    def cache_name(self, model: str) -> str | None:
        """The name its replies are cached under in :class:`ResponseCache` (``None``: not cached)."""
        return None

    def check(self, model: str, option: str) -> str | None:
        """Why ``model`` cannot serve ``option`` (the option or ini key it came from), in one line; ``None``: it can."""
        return None

    def serves(self, option: str) -> bool:
        """Whether its models can serve ``option`` at all (an unknown model's error lists only those that can)."""
        return True

    def price(self, model: str) -> tuple[float, float] | None:
        """USD per million input and output tokens of a chat model (``None``: unknown)."""
        return None

    def embedding_price(self, model: str) -> float | None:
        """USD per million input tokens of an embedding model (``None``: unknown)."""
        return None

    def key_problem(self, specs: Sequence[str], base_url: str | None) -> str | None:
        """Why ``specs`` (this provider's) cannot be reached for want of a key, or ``None``.

        Only the provider's own endpoint is checked: a server at another base
        URL (a local one) may need no key.
        """
        if not self.key_env or base_url or os.environ.get(self.key_env):
            return None
        return (
            f"{', '.join(sorted(set(specs)))} would call {self.name}'s API but ${self.key_env} is not set "
            "(set it, or point --restore-base-url at a server that needs no key)"
        )


def price_by_family(model: str, table: Mapping[str, tuple[float, float]]) -> tuple[float, float] | None:
    """A model's entry in a price table: exact, else its longest family prefix (``gpt-4o-mini-2024-07-18``)."""
    known = [k for k in table if model == k or model.startswith(k + "-")]
    return table[max(known, key=len)] if known else None
