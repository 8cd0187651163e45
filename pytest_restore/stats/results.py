"""The statistics' result types: settings, per-cell figures, tests, H2 pairs.

Also the policy names, the one policy order and the one cell order, the
``cells.csv`` columns and the budget labels the statistics and the report share. Floats are rounded to 6 decimals
in every JSON/CSV form.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from pytest_restore.bootstrap import (
    DEFAULT_ALPHA,
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
)
from pytest_restore.record import CellKey
from pytest_restore.stats.answers import ANSWER_COLUMNS, AnswerFigures
from pytest_restore.stats.retrieval import RETRIEVAL_COLUMNS, RetrievalFigures

DEFAULT_CALIPER = 0.05
DEFAULT_EQUIVALENCE_MARGIN = 0.03

#: The H1/H3 family: the evicting baselines and the control (x every budget).
FAMILY_POLICIES: tuple[str, ...] = ("fifo", "random", "redundancy", "control")
#: The baselines the positive control is contrasted against.
BASELINES: tuple[str, ...] = ("fifo", "random", "redundancy")
#: The deliberately destructive positive control.
CONTROL = "control"
#: The zero-destruction reference; never part of a test family.
REFERENCE = "no-evict"
#: The order of the built-in policies (the paper's; ``memory.eviction.BUILTIN_POLICIES`` is
#: declared in it, which a test keeps so), then the built-in memory systems
#: (``memory.derived.BUILTIN_SYSTEMS``); user policies follow alphabetically.
POLICY_ORDER: tuple[str, ...] = (
    "no-evict",
    "fifo",
    "random",
    "redundancy",
    "llm-importance",
    "control",
    "session-summary",
    "fact-extract",
    "session-summary-model",
    "fact-extract-model",
)

#: What each built-in policy does, in a few words, keyed as :data:`POLICY_ORDER` (a test keeps the
#: two in step): the legend under the terminal's table, so its first screen explains its own rows.
POLICY_GLOSS: Mapping[str, str] = {
    "no-evict": "keeps all (the reference)",
    "fifo": "evicts the oldest",
    "random": "evicts at random",
    "redundancy": "evicts near-duplicates first",
    "llm-importance": "evicts what a model scores least important",
    "control": "evicts the most fact-dense, so the gold, first (a positive control)",
    "session-summary": "keeps a summary per session",
    "fact-extract": "keeps the facts of each turn",
    "session-summary-model": "session-summary written by a model",
    "fact-extract-model": "fact-extract written by a model",
}

#: The interval columns ``cells.csv`` gains from the bootstrap.
INTERVAL_COLUMNS: tuple[str, ...] = (
    "two_bin_lo",
    "two_bin_hi",
    "irr_rate_lo",
    "irr_rate_hi",
    "accuracy_lo",
    "accuracy_hi",
)
#: The per-cell figures of docs/PROTOCOL.md section 7: the first columns of ``cells.csv``.
PROTOCOL_COLUMNS: tuple[str, ...] = (
    "policy",
    "budget",
    "regime",
    "reader",
    "N",
    "err",
    "irr",
    "rec",
    "res",
    "two_bin_share",
    "irr_rate",
    "accuracy",
    "gold_evicted_rate",
)
#: Every column of ``cells.csv`` (:meth:`CellStats.as_row`), in order: the figures of
#: docs/PROTOCOL.md section 7, their intervals, then the bin shares and the cell's other counts.
#: ``ranker`` follows the cell's other dimensions: every ranker's cells are rows (``--restore-rankers``).
CELL_COLUMNS: tuple[str, ...] = (
    *PROTOCOL_COLUMNS[:4],
    "ranker",
    *PROTOCOL_COLUMNS[4:],
    *INTERVAL_COLUMNS,
    "irr_share",
    "rec_share",
    "res_share",
    "dis",
    "dis_share",
    "destruction_share",
    "negative_restore_gain",
    "excluded",
    *ANSWER_COLUMNS,
    *RETRIEVAL_COLUMNS,
)

_ROUND = 6  # decimals in JSON/CSV output: hides BLAS/thread noise, keeps 4 significant p digits


def budget_label(budget: int) -> str:
    """``80000 -> "80k"``; budgets that are not whole thousands stay as digits."""
    return f"{budget // 1000}k" if budget % 1000 == 0 and budget > 0 else str(budget)


def policy_order(policy: str) -> tuple[int, str]:
    """The one policy order: the built-ins in the paper's order, user policies after them by name."""
    if policy in POLICY_ORDER:
        return (POLICY_ORDER.index(policy), policy)
    return (len(POLICY_ORDER), policy)


def cell_order(key: CellKey) -> tuple[Any, ...]:
    """The one cell order (tables, ``cells.csv``, the terminal, the figure, ``compare``).

    By policy, loosest budget first, then reader and regime. A new dimension
    of :class:`~pytest_restore.record.CellKey` takes its place here.
    """
    return (policy_order(key.policy), -key.budget, key.reader, key.ranker, key.regime)


def _round(value: float | None) -> float | None:
    if value is None or math.isnan(value):
        return None
    return round(float(value), _ROUND) + 0.0  # + 0.0 turns -0.0 into 0.0


@dataclass(frozen=True)
class StatsSettings:
    """The settings of one statistics pass (all recorded in ``to_json``)."""

    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    alpha: float = DEFAULT_ALPHA
    confidence: float = DEFAULT_CONFIDENCE
    caliper: float = DEFAULT_CALIPER
    equivalence_margin: float = DEFAULT_EQUIVALENCE_MARGIN
    family_policies: tuple[str, ...] = FAMILY_POLICIES
    baselines: tuple[str, ...] = BASELINES
    control: str = CONTROL
    reference: str = REFERENCE
    #: the hypothesis families to run (``stats.families.Family``), in the report's order;
    #: empty for the built-ins. Typed loosely because the families module builds on this
    #: one; read it through ``stats.families.families_of``. Not in ``to_json``: the
    #: tests each family produced are, under its name.
    families: tuple[Any, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """JSON-able copy."""
        return {
            "resamples": self.resamples,
            "seed": self.seed,
            "alpha": self.alpha,
            "confidence": self.confidence,
            "caliper": self.caliper,
            "equivalence_margin": self.equivalence_margin,
            "family_policies": list(self.family_policies),
            "baselines": list(self.baselines),
            "control": self.control,
            "reference": self.reference,
        }


@dataclass(frozen=True)
class CellStats:
    """Per-cell figures (docs/PROTOCOL.md section 7) with bootstrap intervals.

    Shares and rates are ``None`` when their denominator is 0 (``two_bin_share``
    of a cell without irreversible or recoverable errors, say).
    """

    reader: str
    policy: str
    budget: int
    regime: str
    seeds: tuple[int, ...]
    records: int
    excluded: int
    not_answerable: int
    negative_restore_gain: int
    N: int
    err: int
    irr: int
    rec: int
    res: int
    correct: int
    gold_evicted: int
    two_bin_share: float | None
    two_bin_lo: float | None
    two_bin_hi: float | None
    irr_share: float | None
    rec_share: float | None
    res_share: float | None
    irr_rate: float | None
    irr_rate_lo: float | None
    irr_rate_hi: float | None
    accuracy: float | None
    accuracy_lo: float | None
    accuracy_hi: float | None
    gold_evicted_rate: float | None
    two_bin_undefined: int  # resamples dropped from the two-bin interval (0/0)
    #: the ranker of a compared one's cell (``--restore-rankers``); "" for the baseline ranker's
    ranker: str = ""
    #: LoCoMo's answer metrics of the cell's answers, per condition (:mod:`pytest_restore.stats.answers`)
    answers: AnswerFigures | None = None
    #: regime (b): where the ranker put the surviving gold (:mod:`pytest_restore.stats.retrieval`)
    retrieval: RetrievalFigures | None = None
    #: distorted errors (a memory system's derived memories kept every gold unit, without the answer)
    dis: int = 0
    dis_share: float | None = None
    #: ``(irr + dis) / (irr + rec + dis)``: what the store destroyed among the errors restore fixes
    destruction_share: float | None = None

    @property
    def key(self) -> CellKey:
        """The cell's key."""
        return CellKey(self.policy, self.budget, self.regime, self.reader, self.ranker)

    def intervals(self) -> dict[str, float | None]:
        """The :data:`INTERVAL_COLUMNS`, rounded to 6 decimals."""
        return {column: _round(getattr(self, column)) for column in INTERVAL_COLUMNS}

    def as_row(self) -> dict[str, Any]:
        """One ``cells.csv`` row's values keyed by :data:`CELL_COLUMNS` (unformatted)."""
        row: dict[str, Any] = dict.fromkeys(CELL_COLUMNS)
        row.update({column: getattr(self, column) for column in CELL_COLUMNS if hasattr(self, column)})
        if self.answers is not None:
            row.update(self.answers.row())
        if self.retrieval is not None:
            row.update(self.retrieval.row())
        return row


@dataclass(frozen=True)
class PowerShortfall:
    """Why a test's unmet expectation is not testable at this N, as figures.

    ``minimum_detectable`` is the least effect the test could detect (None:
    no defined resample); ``questions_needed`` about how many questions would
    bring it down to ``effect``.
    """

    n_questions: int
    half_width: float | None
    confidence: float
    power: float
    holm_size: int
    statistic: str
    effect: float
    minimum_detectable: float | None
    questions_needed: int | None

    def note(self) -> str:
        """The shortfall in words (``hypotheses.json``'s ``power_note``, the report's cell)."""
        if self.minimum_detectable is None:
            return "no defined resample"
        return (
            f"at {self.n_questions} questions its {self.confidence:.0%} interval is "
            f"±{self.half_width:.2f}, so the least {self.statistic} it could detect ({self.power:.0%} power, "
            f"Holm over {self.holm_size}) is {self.minimum_detectable:.2f}, above the {self.effect:.2f} it is about; "
            f"about {self.questions_needed} questions would make it testable"
        )


@dataclass(frozen=True)
class HypothesisTest:
    """One test of one family.

    ``policy``/``other`` name the cell (``other is None``) or the pair. For a
    pair the statistic is ``policy - other``. ``p_holm`` is None until Holm has
    been applied (per-cell checks) and for R1, which is read from its interval.
    ``expectation_met`` is None for findings that carry no expectation (R1, H2,
    TOST) and for empty tests.
    """

    __test__: ClassVar[bool] = False  # keep pytest from collecting this class

    name: str
    family: str
    reader: str
    budget: int
    policy: str
    other: str | None
    regime: str
    statistic: float | None
    ci_lo: float | None
    ci_hi: float | None
    null: float
    alternative: str
    p_raw: float | None
    p_holm: float | None
    decision: str
    expectation_met: bool | None
    n_questions: int
    undefined_resamples: int
    note: str = ""
    #: False when the expectation was not met and the run had too few questions to
    #: meet it (see :func:`judge_power`); ``shortfall`` says why and what would do.
    testable: bool = True
    shortfall: PowerShortfall | None = None

    @property
    def power_note(self) -> str:
        """The shortfall in words ("" for a testable test)."""
        return self.shortfall.note() if self.shortfall is not None else ""

    @property
    def half_width(self) -> float | None:
        """Half the interval width: the resolution of an H2 contrast."""
        if self.ci_lo is None or self.ci_hi is None:
            return None
        return (self.ci_hi - self.ci_lo) / 2.0

    def to_json(self) -> dict[str, Any]:
        """Deterministic JSON-able dict (floats rounded to 6 decimals)."""
        return {
            "name": self.name,
            "family": self.family,
            "reader": self.reader,
            "budget": self.budget,
            "policy": self.policy,
            "other": self.other,
            "regime": self.regime,
            "statistic": _round(self.statistic),
            "ci_lo": _round(self.ci_lo),
            "ci_hi": _round(self.ci_hi),
            "half_width": _round(self.half_width),
            "null": self.null,
            "alternative": self.alternative,
            "p_raw": _round(self.p_raw),
            "p_holm": _round(self.p_holm),
            "decision": self.decision,
            "expectation_met": self.expectation_met,
            "n_questions": self.n_questions,
            "undefined_resamples": self.undefined_resamples,
            "note": self.note,
            "testable": self.testable,
            "power_note": self.power_note,
        }


#: The name the issue uses.
Test = HypothesisTest


@dataclass(frozen=True)
class Totals:
    """The run's records in totals (``summary.json``'s ``counts``): records, cells, questions, excluded
    records, and records per bin in the bins' order."""

    records: int
    cells: int
    questions: int
    excluded_records: int
    #: bin -> records, every bin (``record.BINS``)
    bins: Mapping[str, int]

    def to_json(self) -> dict[str, Any]:
        """Plain values, one key per field."""
        return {
            "records": self.records,
            "cells": self.cells,
            "questions": self.questions,
            "excluded_records": self.excluded_records,
            "bins": dict(self.bins),
        }


@dataclass(frozen=True)
class FamilySummary:
    """One family under one reader, in counts: its tests, how many were empty, rejected after Holm,
    unmet where testable, and not testable at this N (``report.md``'s hypotheses table, ``summary.json``'s
    ``hypotheses``, ``hypotheses.json``'s ``summary``)."""

    family: str
    reader: str
    tests: int
    empty: int
    rejected: int
    expectation_unmet: int
    not_testable: int

    def to_json(self) -> dict[str, Any]:
        """Plain values, one key per field."""
        return asdict(self)



@dataclass(frozen=True)
class PairMatch:
    """An H2 candidate pair at one budget: matched on accuracy or not, and why."""

    reader: str
    budget: int
    policy: str
    other: str
    accuracy: float | None
    other_accuracy: float | None
    gap: float | None
    matched: bool
    reason: str
    irr_rate_difference: float | None  # policy - other on the shared questions
    shared_questions: int

    def to_json(self) -> dict[str, Any]:
        """Deterministic JSON-able dict."""
        return {
            "reader": self.reader,
            "budget": self.budget,
            "policy": self.policy,
            "other": self.other,
            "accuracy": _round(self.accuracy),
            "other_accuracy": _round(self.other_accuracy),
            "gap": _round(self.gap),
            "matched": self.matched,
            "reason": self.reason,
            "irr_rate_difference": _round(self.irr_rate_difference),
            "shared_questions": self.shared_questions,
        }

