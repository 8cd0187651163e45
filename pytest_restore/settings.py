"""The audit's settings, declared once: every setting a run is asked and its report shows, typed.

:class:`AuditSettings` sits below every stage so that both ends of a run
derive from this one declaration: the run core's ``RestoreSettings``
(``run/settings.py``) is an ``AuditSettings`` parsed from the options, with
what a report does not show added (where the report goes, where each value
came from); the report's ``run.settings`` (``report/inputs.py``) is its JSON
form (:meth:`AuditSettings.to_json`), read back from ``summary.json`` as the
file holds it. Imports nothing from the package.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any


@dataclass(frozen=True, kw_only=True)
class AuditSettings:
    """What a run was asked, one field per ``--restore-*`` option it shows, every default resolved.

    Each field is its option's name with ``_``, but two: ``prices`` is the repeated ``--restore-price``,
    and ``writer`` is ``--restore-writer-model`` (``None`` when it names no model but the reader).
    """

    data: str | None
    budgets: tuple[int, ...]
    policies: tuple[str, ...] | None
    seeds: tuple[int, ...]
    granularity: str
    questions: int | None
    subset_seed: int
    reader: str
    judge: str
    scorer: str
    embedded_questions: int
    bootstrap: int
    bootstrap_seed: int
    equivalence_margin: float
    family_checks: str
    base_url: str | None
    cache: str | None
    max_concurrency: int
    rpm: float | None
    tpm: float | None
    max_tries: int
    timeout: float
    prompts: str | None
    robustness_reader: str | None
    audit_judge: str | None
    audit_judge_sample: int
    calibration: str
    dry_run: bool
    ranker: str = "bm25-lite"
    #: ``--restore-rankers``: the rankers compared in one run (empty: the one ``ranker``)
    rankers: tuple[str, ...] = ()
    #: ``--restore-embed-limits``: (inputs per request, tokens per text) of the rankers' embedder
    embed_limits: tuple[int, int] | None = None
    ablations: bool = False
    max_retry_after: float = 60.0
    #: ``(model, input USD, output USD)`` per million tokens, from ``--restore-price``
    prices: tuple[tuple[str, float, float], ...] = ()
    #: ``--restore-batch``: real models' calls go out as Batch API rounds, never live
    batch: bool = False
    batch_poll: float = 30.0
    batch_resubmit: int = 0
    #: ``--restore-batch-export`` / ``--restore-batch-round``: a dry run writes that round's input file
    batch_export: str | None = None
    batch_round: str | None = None
    #: ``--restore-writer-model``: what the memory systems that write with a model write with (``None``: each reader)
    writer: str | None = None
    #: ``--restore-judge-format``: the judge's reply, one word (``text``) or a structured verdict in a style
    judge_format: str = "text"

    def to_json(self) -> dict[str, Any]:
        """The declared settings as plain JSON values (tuples as lists), a subclass's own fields left out."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(AuditSettings)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AuditSettings:
        """The declared settings back from :meth:`to_json`'s form (lists as tuples); a field the file
        lacks takes its declared default, and a missing field without one is a ``KeyError`` naming it."""
        given = {f.name: _tupled(data[f.name]) for f in fields(AuditSettings) if f.name in data}
        missing = [f.name for f in fields(AuditSettings) if f.name not in given and f.default is MISSING]
        if missing:
            raise KeyError(missing[0])
        return cls(**given)


def setting_names() -> tuple[str, ...]:
    """The declared settings' names, in declaration order."""
    return tuple(f.name for f in fields(AuditSettings))


def _tupled(value: Any) -> Any:
    return tuple(_tupled(v) for v in value) if isinstance(value, list) else value


def _plain(value: Any) -> Any:
    return [_plain(v) for v in value] if isinstance(value, tuple) else value
