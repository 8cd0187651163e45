"""The OpenAI provider's declaration: what it can do, its key, its list prices, and how its models are made.

Its wire format and models are ``openai_chat``; its batch interface ``openai_batches``
(rounds are run by ``batch``, as every provider's).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import ClassVar

from pytest_restore.models.api import VALIDATORS, ModelOptions, ModelProvider, price_by_family
from pytest_restore.models.base import REPLY_STYLES, ChatModel
from pytest_restore.models.batch import batch_model
from pytest_restore.models.cache import ResponseCache
from pytest_restore.models.embeddings import EmbeddingLimits
from pytest_restore.models.openai_batches import OpenAIBatches
from pytest_restore.models.openai_chat import (
    API_KEY_ENV,
    BASE_URL_ENV,
    EMBEDDING_LIMITS,
    PROVIDER,
    OpenAIChatModel,
    OpenAIEmbedder,
)
from pytest_restore.models.progress import Progress

#: List prices in USD per million tokens (input, output) of the paper's models, as
#: OpenAI published them in 2026; ``--restore-price MODEL=IN,OUT`` adds or overrides
#: one. A dated id (``gpt-4o-mini-2024-07-18``) takes its family's price.
PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-5.4-mini": (0.75, 4.50),
    "gpt-5.5": (5.00, 30.00),
}
#: USD per million input tokens of OpenAI's embedding models (list prices).
EMBEDDING_PRICES: dict[str, float] = {
    "text-embedding-3-small": 0.02,
    "text-embedding-3-large": 0.13,
    "text-embedding-ada-002": 0.10,
}
#: What the Batch API charges against the list price.
BATCH_DISCOUNT = 0.5


class OpenAIProvider(ModelProvider):
    """OpenAI's API or any OpenAI-compatible server."""

    name = PROVIDER
    # an extra: the batch rounds use the official client; the fake models never load it
    requires = ("openai", "pytest-restore[openai]")
    capabilities = frozenset({"chat", "embeddings", "batch"})
    key_env = API_KEY_ENV
    batch_discount = BATCH_DISCOUNT
    # OpenAI's structured outputs (json-schema) and JSON mode with a schema (json-object, llama-cpp-python's
    # server); which one a server takes is the user's choice: OpenAI refuses a schema in json_object and
    # llama-cpp-python refuses the json_schema type
    reply_styles = frozenset(REPLY_STYLES)
    api_host: ClassVar[str] = "api.openai.com"

    def make(self, model: str, role: str, options: ModelOptions, *, use_cache: bool = True) -> ChatModel:
        """An :class:`OpenAIChatModel` with the run's pacing, retries and response cache.

        Under ``--restore-batch`` it answers from the cache alone, inside a
        ``BatchChatModel`` that sends what the cache lacks as a batch round.
        """
        if options.batch is not None:
            inner = OpenAIChatModel(
                model=model,
                base_url=options.base_url,
                cache=ResponseCache(options.cache_dir) if use_cache else None,
                validator=VALIDATORS[role],
                cache_only=True,
            )
            return batch_model(inner, role, options, self.batches(options.base_url))
        return OpenAIChatModel(
            model=model,
            cache=ResponseCache(options.cache_dir, run=options.run) if use_cache else None,
            **options.pacing(),
            validator=VALIDATORS[role],
            progress=Progress(label=f"{role} calls", quiet=options.quiet),
        )

    def make_embedder(self, model: str, options: ModelOptions, limits: tuple[int, int] | None = None) -> OpenAIEmbedder:
        """An :class:`OpenAIEmbedder` paced and retried as the run's chat models."""
        known = EMBEDDING_LIMITS.get(model)
        return OpenAIEmbedder(
            model=model,
            limits=EmbeddingLimits.of(known, limits),
            **options.pacing(),
            progress=Progress(label="embedding requests", quiet=options.quiet),
        )

    def batches(self, base_url: str | None) -> OpenAIBatches:
        """The Files and Batches API (``--restore-base-url``, else ``$OPENAI_BASE_URL``, else OpenAI's)."""
        return OpenAIBatches(base_url)

    def cache_name(self, model: str) -> str | None:
        """Replies are cached under the bare model name."""
        return model

    def price(self, model: str) -> tuple[float, float] | None:
        """The list price of the model's family (:data:`PRICES`)."""
        return price_by_family(model, PRICES)

    def embedding_price(self, model: str) -> float | None:
        """The list price of an embedding model (:data:`EMBEDDING_PRICES`)."""
        found = price_by_family(model, {k: (v, 0.0) for k, v in EMBEDDING_PRICES.items()})
        return found[0] if found is not None else None

    def key_problem(self, specs: Sequence[str], base_url: str | None) -> str | None:
        """Only OpenAI's own API needs ``$OPENAI_API_KEY``; ``$OPENAI_BASE_URL`` points elsewhere too."""
        if base_url or os.environ.get(BASE_URL_ENV) or os.environ.get(API_KEY_ENV):
            return None
        return (
            f"{', '.join(sorted(set(specs)))} would call {self.api_host} but ${API_KEY_ENV} is not set "
            "(set it, or point --restore-base-url at a server that needs no key)"
        )
