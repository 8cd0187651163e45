"""The run's rankers that read embeddings: made for the name asked, embedded ahead, priced by the dry run.

``--restore-ranker dense:EMBEDDER`` (or ``hybrid:EMBEDDER``) names a ranker
no registry holds until the run asks for it: :func:`register_embedding_ranker`
makes it over the embedder's on-disk store and registers it like any other
ranker. The controller then embeds every text the audit will rank, once,
before any worker starts (:func:`embed_ahead`): the workers only read the
store, so an xdist run sends each text once, and a failed embedding call
stops the run in one line before the grid. A dry run embeds nothing: it
says what the embedding would cost (:func:`embedding_dry_run`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pytest_restore.audit.run import AuditConfig, audited_questions
from pytest_restore.data.dataset import Dataset
from pytest_restore.data.units import unit_contents
from pytest_restore.memory.retrieval import RankerRegistry, embedding_ranker
from pytest_restore.models.embeddings import EmbeddingError, TextVectors, embedder_of
from pytest_restore.models.providers import ModelOptions, embedding_cost_line, make_embedder


def register_embedding_ranker(
    rankers: RankerRegistry,
    name: str,
    options: ModelOptions,
    limits: tuple[int, int] | None = None,
    say: Callable[[str], None] | None = None,
    sources: dict[str, TextVectors] | None = None,
) -> TextVectors | None:
    """Register the ``dense:``/``hybrid:`` ranker ``name`` (unless registered already); its vectors' source, or ``None``.

    ``sources`` holds the sources made so far, by embedder: ``dense:fake`` and
    ``hybrid:fake`` read the same one (each text embedded once for both).
    """
    embedder = embedder_of(name)
    if embedder is None or name in rankers:
        return None
    sources = {} if sources is None else sources
    if embedder not in sources:
        sources[embedder] = TextVectors(make_embedder(embedder, options, limits), options.cache_dir, say=say)
    rankers.register(embedding_ranker(name, sources[embedder]))
    return sources[embedder]


def audited_texts(dataset: Dataset, config: AuditConfig) -> list[str]:
    """Every text a dense ranker of the audit embeds (questions and unit contents), once each."""
    texts: dict[str, None] = {}
    for question in audited_questions(dataset, config):
        texts[question.question] = None
        texts.update(dict.fromkeys(unit_contents(question, config.granularity)))
    return list(texts)


def embed_ahead(vectors: TextVectors, dataset: Dataset, config: AuditConfig) -> str | None:
    """Embed every text the audit will rank; ``None``, or the one line that says why it could not be done."""
    try:
        vectors.ensure(audited_texts(dataset, config))
    except EmbeddingError as err:
        return str(err)
    return None


def embedding_check(sources: Sequence[TextVectors], dataset: Dataset, config: AuditConfig) -> dict[str, Any]:
    """The report's account of the run's embeddings: per embedder, texts, what this run sent, truncations, storage."""
    texts = audited_texts(dataset, config)
    result = {}
    for vectors in sources:
        stats = vectors.embedder.stats
        result[vectors.name] = {
            "distinct_texts": sum(1 for t in texts if t),
            "embedded_this_run": stats.embedded,
            "truncated": stats.truncated,
            "requests": stats.requests,
            "tokens": stats.tokens,
            "split": stats.split,
            "dimensions": vectors.store.dimensions,
            "store_bytes": vectors.store.nbytes(),
        }
    return result  # run/checks.py's Embeddings


def embedding_dry_run(vectors: TextVectors, dataset: Dataset, config: AuditConfig) -> list[str]:
    """The dry run's lines for the embedder: texts, those stored, tokens and cost of the rest."""
    texts = audited_texts(dataset, config)
    line = embedding_cost_line(vectors.name, texts, vectors)
    if vectors.missing(texts):
        line += "; the reader calls above were planned with bm25-lite's contexts (the dense ones are not known yet)"
    return [line]

