"""Statistics for the restore-counterfactual audit: bootstrap, Holm, hypothesis families.

The input is the list of per-question records described in ``docs/DESIGN.md``.
Everything below is computed from them without any model call.

Reading order:

1. **Aggregation.** Records are grouped into cells ``(policy, budget, regime,
   reader)`` and reduced to per-question count vectors (``N, err, irr, rec,
   res, correct, gold_evicted``) over one fixed, sorted universe of question
   ids. ``random`` pools its seeds into its cell, so a question's vector entry
   counts all of that question's seed records.
2. **The question-cluster bootstrap.** One resample matrix ``W`` (``R x Q``:
   how often question ``q`` is drawn in resample ``r``) is drawn once from a
   seeded ``numpy.random.Generator``. Every resampled sum of every cell is a
   matrix product ``W @ v``. Because all cells share ``W``, all seeds of a
   question move together and every contrast between cells (regime b - a,
   policy vs policy) is resampled jointly, i.e. paired by question.
   Ratio statistics are ratios of resampled sums.
3. **Intervals and p-values.** 95% percentile intervals (linear interpolation,
   as ``numpy.percentile`` and ``scipy.stats.bootstrap`` use). Smoothed
   one-sided p-value ``(1 + #resamples on the far side of the null) / (R' + 1)``;
   two-sided ``min(1, 2 x smaller one-sided)``.
4. **Holm-Bonferroni** within each family (and reader).
5. **Families:** each declared once as a :class:`Family` in :data:`FAMILIES`
   (H1, H3, R1, H2, TOST and the positive control; see :func:`analyse`); a
   single pytest item decides its own tests as the session does
   (:func:`cell_verdicts`). An unmet expectation counts as a failure only
   where the run had the power to meet it (:func:`judge_power`).

Undefined resamples. A ratio whose resampled denominator is 0 (e.g. a resample
that happens to draw no binned error) is undefined. Such resamples are set to
NaN, *dropped* from the interval and from the p-value, and counted: every
estimate reports ``undefined_resamples`` and the p-value uses ``R'`` = the
number of defined resamples. When the point estimate itself is 0/0 the test is
reported as ``"empty"`` with no statistic and no p-value, and it does not count
towards its Holm family.

Other choices, written down here because the paper leaves them open:

- The question universe is every ``question_id`` in the records passed in,
  oracle-answerable or not; a question outside a cell contributes zeros to it.
  Resampling the whole universe keeps ``W`` common to every cell (so paired
  contrasts are joint) and, for ratios, gives the same first-order variance as
  resampling the cell's own questions.
- H1 is one-sided (share > 0). H3, H2 and the positive control are two-sided,
  as the paper's "smoothed two-sided p". The positive control's expectation
  additionally needs the control to be the *more* destructive one.
- ``expectation_met``: H1 and the positive control are expected to reject;
  H3 carries the construct check "regime (a) has no recoverable error" (its
  rejection count is a finding); R1, H2 and TOST are findings (None).
- R1 is read from its interval (lower bound > 0.5) and is not Holm-adjusted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from pytest_restore.record import (
    BINS,
    CORRECT_ROW,
    ERR_ROW,
    GOLD_ROW,
    IRR_ROW,
    N_ROW,
    REC_ROW,
    RES_ROW,
    ROWS,
    CellKey,
    enters_n,
    tally_cells,
)

# --------------------------------------------------------------------------
# Defaults (the paper's settings). Everything here is a parameter of analyse().
# --------------------------------------------------------------------------

DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 20_240_607
DEFAULT_ALPHA = 0.05
DEFAULT_CONFIDENCE = 0.95
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
#: Display order of the built-in policies; user policies follow alphabetically.
POLICY_ORDER: tuple[str, ...] = (
    "no-evict",
    "fifo",
    "random",
    "redundancy",
    "llm-importance",
    "control",
)

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
#: Every column of :meth:`CellStats.as_row`, in order (the figures of docs/PROTOCOL.md section 7 first).
CELL_COLUMNS: tuple[str, ...] = (
    *PROTOCOL_COLUMNS,
    *INTERVAL_COLUMNS,
    "irr_share",
    "rec_share",
    "res_share",
    "seeds",
    "records",
    "excluded",
    "not_answerable",
)

_ROUND = 6  # decimals in JSON/CSV output: hides BLAS/thread noise, keeps 4 significant p digits

FloatArray = NDArray[np.float64]


def budget_label(budget: int) -> str:
    """``80000 -> "80k"``; budgets that are not whole thousands stay as digits."""
    return f"{budget // 1000}k" if budget % 1000 == 0 and budget > 0 else str(budget)


def policy_sort_key(policy: str) -> tuple[int, str]:
    """Built-in policies in the paper's order, user policies after them by name."""
    if policy in POLICY_ORDER:
        return (POLICY_ORDER.index(policy), policy)
    return (len(POLICY_ORDER), policy)


def _cell_sort_key(key: CellKey) -> tuple[str, str, tuple[int, str], int]:
    policy, budget, regime, reader = key
    return (reader, regime, policy_sort_key(policy), -budget)


# --------------------------------------------------------------------------
# 1. Aggregation: records -> per-question count vectors per cell
# --------------------------------------------------------------------------

# Rows of a cell's count matrix (the tally's, see pytest_restore.record).
_N, _ERR, _IRR, _REC, _RES, _CORRECT, _GOLD = (
    N_ROW, ERR_ROW, IRR_ROW, REC_ROW, RES_ROW, CORRECT_ROW, GOLD_ROW
)
_ROWS = len(ROWS)


# --------------------------------------------------------------------------
# 2. The question-cluster bootstrap
# --------------------------------------------------------------------------


#: The last :meth:`Resampler.draw`, by (question ids, resamples, seed).
_DRAWS: dict[tuple[tuple[str, ...], int, int], Resampler] = {}


@dataclass(frozen=True)
class Resampler:
    """One question-cluster resample matrix shared by every statistic of an analysis.

    ``weights[r, q]`` is how often question ``question_ids[q]`` is drawn in
    resample ``r``; each row sums to ``Q``. A resampled sum of a per-question
    vector ``v`` is ``weights @ v``.
    """

    question_ids: tuple[str, ...]
    weights: FloatArray

    @classmethod
    def draw(cls, question_ids: Sequence[str], resamples: int, seed: int) -> Resampler:
        """Draw ``resamples`` resamples of the question ids with replacement.

        The indices come from ``np.random.default_rng(seed).integers(0, Q, (R, Q))``,
        the same call ``scipy.stats.bootstrap`` makes, so with the same seed
        both draw identical resamples.
        """
        if resamples < 1:
            raise ValueError("resamples must be at least 1")
        key = (tuple(question_ids), resamples, seed)
        cached = _DRAWS.get(key)
        if cached is not None:  # every cell check of a grid resamples the same questions
            return cached
        q = len(question_ids)
        rng = np.random.default_rng(seed)
        indices = rng.integers(0, q, size=(resamples, q)) if q else np.zeros((resamples, 0), int)
        drawn = cls.from_indices(question_ids, indices)
        drawn.weights.flags.writeable = False  # shared: nobody may change it
        _DRAWS.clear()  # keep one (10,000 x 500 resamples are 40 MB)
        _DRAWS[key] = drawn
        return drawn

    @classmethod
    def from_indices(
        cls, question_ids: Sequence[str], indices: NDArray[np.integer[Any]]
    ) -> Resampler:
        """Turn an ``R x Q`` matrix of drawn positions into per-question counts."""
        r, q = indices.shape
        # Offsetting row r by r*Q lets one bincount count every row at once.
        flat = (indices + np.arange(r, dtype=np.int64)[:, None] * q).ravel()
        counts = np.bincount(flat, minlength=r * q).reshape(r, q)
        # float64 holds these integer sums exactly, so results do not depend on
        # how BLAS orders the additions (serial and parallel runs agree).
        return cls(tuple(question_ids), counts.astype(np.float64))

    @property
    def resamples(self) -> int:
        """``R``, the number of resamples."""
        return int(self.weights.shape[0])

    def totals(self, vectors: FloatArray) -> FloatArray:
        """Resampled sums: ``(R, Q) @ (Q, K) -> (R, K)`` (or ``(Q,) -> (R,)``)."""
        return self.weights @ vectors


def _ratio(num: FloatArray, den: FloatArray) -> FloatArray:
    """Elementwise ``num / den`` with NaN (an undefined resample) where ``den == 0``."""
    out = np.full(np.broadcast(num, den).shape, np.nan)
    np.divide(num, den, out=out, where=den != 0)
    return out


def smoothed_p(far_side: int, resamples: int) -> float:
    """``(1 + #resamples on the far side of the null) / (R + 1)``: never 0."""
    return (1.0 + far_side) / (resamples + 1.0)


def two_sided_p(p_greater: float, p_less: float) -> float:
    """``min(1, 2 x the smaller one-sided p-value)``."""
    return min(1.0, 2.0 * min(p_greater, p_less))


@dataclass(frozen=True)
class _Statistic:
    """A point estimate and its bootstrap distribution (NaN = undefined resample)."""

    point: float | None
    samples: FloatArray

    @classmethod
    def ratio(cls, num: float, den: float, num_r: FloatArray, den_r: FloatArray) -> _Statistic:
        return cls(num / den if den else None, _ratio(num_r, den_r))

    def minus(self, other: _Statistic) -> _Statistic:
        """The paired difference: both come from the same resample matrix."""
        point = None if self.point is None or other.point is None else self.point - other.point
        return _Statistic(point, self.samples - other.samples)

    @property
    def defined(self) -> FloatArray:
        return self.samples[~np.isnan(self.samples)]

    @property
    def undefined(self) -> int:
        return int(np.isnan(self.samples).sum())

    def interval(self, confidence: float) -> tuple[float | None, float | None]:
        """Percentile interval over the defined resamples."""
        defined = self.defined
        if self.point is None or defined.size == 0:
            return None, None
        tail = (1.0 - confidence) / 2.0
        lo, hi = np.quantile(defined, [tail, 1.0 - tail])
        return float(lo), float(hi)

    def p_greater(self, null: float) -> float | None:
        """One-sided p for ``H0: statistic <= null``; the far side is ``<= null``."""
        defined = self.defined
        if self.point is None:
            return None
        return smoothed_p(int(np.count_nonzero(defined <= null)), defined.size)

    def p_less(self, null: float) -> float | None:
        """One-sided p for ``H0: statistic >= null``; the far side is ``>= null``."""
        defined = self.defined
        if self.point is None:
            return None
        return smoothed_p(int(np.count_nonzero(defined >= null)), defined.size)

    def p_two_sided(self, null: float) -> float | None:
        """``min(1, 2 x the smaller one-sided p)``."""
        greater, less = self.p_greater(null), self.p_less(null)
        if greater is None or less is None:
            return None
        return two_sided_p(greater, less)


# --------------------------------------------------------------------------
# 3. Holm-Bonferroni
# --------------------------------------------------------------------------


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order.

    The i-th smallest p (1-based) is multiplied by ``m - i + 1``; a running
    maximum keeps the adjusted values monotone in the raw ones; all are capped
    at 1. Ties keep their input order, which does not change any value.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: (p_values[i], i))
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


# --------------------------------------------------------------------------
# 4. Result types
# --------------------------------------------------------------------------


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

    @property
    def key(self) -> CellKey:
        """``(policy, budget, regime, reader)``."""
        return (self.policy, self.budget, self.regime, self.reader)

    def intervals(self) -> dict[str, float | None]:
        """The :data:`INTERVAL_COLUMNS`, rounded to 6 decimals."""
        return {column: _round(getattr(self, column)) for column in INTERVAL_COLUMNS}

    def as_row(self) -> dict[str, Any]:
        """One ``cells.csv`` row keyed by :data:`CELL_COLUMNS` (floats rounded, seeds ``0;1;2``)."""
        row: dict[str, Any] = {}
        for column in CELL_COLUMNS:
            value = getattr(self, column)
            if column == "seeds":
                value = ";".join(str(s) for s in value)
            elif isinstance(value, float) or value is None:
                value = _round(value)
            row[column] = value
        return row


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
    #: meet it (see :func:`judge_power`); ``power_note`` says why and what would do.
    testable: bool = True
    power_note: str = ""

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


#: Decisions that count as a rejection of the family's null.
_REJECTIONS = frozenset({"reject", "equivalent", "majority"})


@dataclass(frozen=True)
class Analysis:
    """The whole statistics pass: per-cell figures, every test, the H2 matching table."""

    settings: StatsSettings
    questions: int
    cells: tuple[CellStats, ...]
    tests: tuple[HypothesisTest, ...]
    matching: tuple[PairMatch, ...]

    def cell(self, policy: str, budget: int, regime: str, reader: str) -> CellStats | None:
        """One cell's figures, or None when the records hold no such cell."""
        for cell in self.cells:
            if cell.key == (policy, budget, regime, reader):
                return cell
        return None

    def family(self, name: str, reader: str | None = None) -> list[HypothesisTest]:
        """The tests of one family (optionally of one reader), in report order."""
        return [
            t for t in self.tests if t.family == name and (reader is None or t.reader == reader)
        ]

    def summary(self) -> list[dict[str, Any]]:
        """Per family and reader: tests, rejections after Holm, unmet expectations, untestable ones."""
        rows = []
        for reader in sorted({t.reader for t in self.tests}):
            for family in FAMILIES:
                tests = self.family(family.name, reader)
                if not tests:
                    continue
                rows.append(
                    {
                        "family": family.name,
                        "reader": reader,
                        "tests": len(tests),
                        "empty": sum(t.decision == "empty" for t in tests),
                        "rejected": sum(t.decision in _REJECTIONS for t in tests),
                        "expectation_unmet": sum(t.expectation_met is False and t.testable for t in tests),
                        "not_testable": sum(not t.testable for t in tests),
                    }
                )
        return rows

    def failures(self) -> list[HypothesisTest]:
        """The tests whose expectation the run could test and did not meet: each fails the session."""
        return [t for t in self.tests if t.expectation_met is False and t.testable]

    def untestable(self) -> list[HypothesisTest]:
        """The tests whose expectation was not met but which this run had no power to meet."""
        return [t for t in self.tests if not t.testable]

    def to_json(self) -> dict[str, Any]:
        """Deterministic JSON-able dict for ``hypotheses.json``."""
        return {
            "settings": self.settings.to_json(),
            # the power rule: an unmet expectation fails only where the run could have met it
            "power": {"power": POWER, "effects": {f.name: f.effect for f in FAMILIES if f.effect is not None}},
            "questions": self.questions,
            "summary": self.summary(),
            "families": {
                family.name: [t.to_json() for t in self.family(family.name)]
                for family in FAMILIES
                if self.family(family.name)
            },
            "matching": [m.to_json() for m in self.matching],
        }


# --------------------------------------------------------------------------
# 5. The engine: the resample matrix applied to every cell at once
# --------------------------------------------------------------------------


class _Engine:
    """Cells, the shared resample matrix and every cell's resampled sums."""

    def __init__(self, records: Sequence[Mapping[str, Any]], settings: StatsSettings) -> None:
        self.settings = settings
        self.universe = sorted({str(r["question_id"]) for r in records if "question_id" in r})
        self.cells = tally_cells(records, self.universe)
        self.resampler = Resampler.draw(self.universe, settings.resamples, settings.seed)
        keys = sorted(self.cells, key=_cell_sort_key)
        self.keys = keys
        if keys:
            # One product for all cells: W is streamed from memory once.
            stacked = np.concatenate([self.cells[k].counts.T for k in keys], axis=1)
            totals = self.resampler.totals(stacked.astype(np.float64))
        else:
            totals = np.zeros((settings.resamples, 0))
        self._totals = {k: totals[:, i * _ROWS : (i + 1) * _ROWS] for i, k in enumerate(keys)}
        self._matching: dict[tuple[int, str], list[PairMatch]] = {}

    def has(self, key: CellKey) -> bool:
        return key in self.cells

    def matching(self, budget: int, reader: str) -> list[PairMatch]:
        """The H2 candidate pairs at one budget (built once; H2 and TOST share them)."""
        key = (budget, reader)
        if key not in self._matching:
            self._matching[key] = _matching(self, budget, reader)
        return self._matching[key]

    def count(self, key: CellKey, row: int) -> int:
        return int(self.cells[key].counts[row].sum())

    def ratio(self, key: CellKey, num_rows: Iterable[int], den_rows: Iterable[int]) -> _Statistic:
        """``sum(num rows) / sum(den rows)`` of one cell, with its bootstrap distribution."""
        num_rows, den_rows = list(num_rows), list(den_rows)
        counts, totals = self.cells[key].counts, self._totals[key]
        return _Statistic.ratio(
            float(counts[num_rows].sum()),
            float(counts[den_rows].sum()),
            totals[:, num_rows].sum(axis=1),
            totals[:, den_rows].sum(axis=1),
        )

    def two_bin(self, key: CellKey) -> _Statistic:
        return self.ratio(key, [_IRR], [_IRR, _REC])

    def recoverable_share(self, key: CellKey) -> _Statistic:
        return self.ratio(key, [_REC], [_IRR, _REC])

    def n_questions(self, key: CellKey) -> int:
        return int(np.count_nonzero(self.cells[key].counts[_N]))

    def rate_differences(
        self, pairs: Sequence[tuple[CellKey, CellKey]]
    ) -> list[tuple[_Statistic, int]]:
        """Irreversible-rate differences ``first - second`` paired on shared questions.

        Per question the rate is ``irr / N`` of that question's records (the
        seeds of ``random`` pooled); the statistic is the mean rate difference
        over the questions oracle-answerable in both cells, resampled as
        ``(W @ d) / (W @ shared)``. Rates are scaled by the lcm of the
        per-question record counts so that ``d`` is integer and the sums exact.
        """
        if not pairs:
            return []
        columns, scales, shared_counts = [], [], []
        for first, second in pairs:
            a, b = self.cells[first].counts, self.cells[second].counts
            shared = (a[_N] > 0) & (b[_N] > 0)
            scale = math.lcm(*(int(n) for n in np.unique(np.concatenate([a[_N], b[_N]])) if n))
            scaled = np.zeros(len(self.universe), dtype=np.int64)
            np.floor_divide(a[_IRR] * scale, a[_N], out=scaled, where=shared)
            other = np.zeros_like(scaled)
            np.floor_divide(b[_IRR] * scale, b[_N], out=other, where=shared)
            columns += [(scaled - other).astype(np.float64), shared.astype(np.float64)]
            scales.append(float(scale))
            shared_counts.append(int(shared.sum()))
        totals = self.resampler.totals(np.stack(columns, axis=1))
        out = []
        for i, (factor, n_shared) in enumerate(zip(scales, shared_counts)):
            d, m = columns[2 * i], columns[2 * i + 1]
            stat = _Statistic.ratio(
                float(d.sum()),
                float(m.sum()) * factor,
                totals[:, 2 * i],
                totals[:, 2 * i + 1] * factor,
            )
            out.append((stat, n_shared))
        return out


# --------------------------------------------------------------------------
# 6. Families
# --------------------------------------------------------------------------


def _decide(test: HypothesisTest, p: float | None, alpha: float) -> HypothesisTest:
    """Set decision and expectation from ``p`` (raw for per-cell checks, Holm at the end)."""
    return family_of(test.family).decide(test, p, alpha)


def _cell_test(
    family: str,
    key: CellKey,
    stat: _Statistic,
    *,
    regime: str,
    null: float,
    alternative: str,
    n_questions: int,
    settings: StatsSettings,
    expectation_met: bool | None = None,
    note: str = "",
) -> HypothesisTest:
    policy, budget, _, reader = key
    lo, hi = stat.interval(settings.confidence)
    if alternative == "greater":
        p = stat.p_greater(null)
    else:
        p = stat.p_two_sided(null)
    return HypothesisTest(
        name=f"{family} {policy} {budget_label(budget)}",
        family=family,
        reader=reader,
        budget=budget,
        policy=policy,
        other=None,
        regime=regime,
        statistic=stat.point,
        ci_lo=lo,
        ci_hi=hi,
        null=null,
        alternative=alternative,
        p_raw=p,
        p_holm=None,
        decision="",
        expectation_met=expectation_met,
        n_questions=n_questions,
        undefined_resamples=stat.undefined,
        note=note,
    )


def _h1(engine: _Engine, policy: str, budget: int, reader: str) -> HypothesisTest | None:
    """H1: regime-(a) two-bin share ``irr/(irr+rec) > 0`` (one-sided)."""
    key = (policy, budget, "a", reader)
    if not engine.has(key):
        return None
    return _cell_test(
        "H1",
        key,
        engine.two_bin(key),
        regime="a",
        null=0.0,
        alternative="greater",
        n_questions=engine.n_questions(key),
        settings=engine.settings,
    )


def _h3(engine: _Engine, policy: str, budget: int, reader: str) -> HypothesisTest | None:
    """H3: recoverable share, regime (b) minus (a), paired by question (two-sided).

    The paper reports H3 rejections after Holm with two-sided smoothed p-values,
    so the test is two-sided. Its rejection is a finding; the expectation it
    carries is the construct: regime (a) holds no recoverable error.
    """
    key_a, key_b = (policy, budget, "a", reader), (policy, budget, "b", reader)
    if not (engine.has(key_a) and engine.has(key_b)):
        return None
    stat = engine.recoverable_share(key_b).minus(engine.recoverable_share(key_a))
    rec_a = engine.count(key_a, _REC)
    note = "" if rec_a == 0 else f"construct violation: regime (a) has {rec_a} recoverable"
    shared = int(
        np.count_nonzero(
            (engine.cells[key_a].counts[_N] > 0) | (engine.cells[key_b].counts[_N] > 0)
        )
    )
    return _cell_test(
        "H3",
        key_b,
        stat,
        regime="b-a",
        null=0.0,
        alternative="two-sided",
        n_questions=shared,
        settings=engine.settings,
        expectation_met=rec_a == 0,
        note=note,
    )


def _r1(engine: _Engine, key: CellKey) -> HypothesisTest:
    """R1: regime-(b) two-bin share; "majority" where the interval's lower bound > 0.5.

    Descriptive (the paper reads it off the interval): the one-sided p for
    ``share > 0.5`` is reported, but no Holm adjustment is made.
    """
    test = _cell_test(
        "R1",
        key,
        engine.two_bin(key),
        regime="b",
        null=0.5,
        alternative="greater",
        n_questions=engine.n_questions(key),
        settings=engine.settings,
    )
    if test.statistic is None or test.ci_lo is None:
        return replace(test, decision="empty")
    return replace(test, decision="majority" if test.ci_lo > 0.5 else "not majority")


def _pair_test(
    family: str,
    first: CellKey,
    second: CellKey,
    stat: _Statistic,
    n_shared: int,
    settings: StatsSettings,
) -> HypothesisTest:
    """A paired irreversible-rate contrast ``first - second`` (H2, TOST, positive control)."""
    policy, budget, regime, reader = first
    if family == "TOST":
        # Two one-sided tests against -margin and +margin; equivalence needs both.
        margin = settings.equivalence_margin
        lower, upper = stat.p_greater(-margin), stat.p_less(margin)
        p = None if lower is None or upper is None else max(lower, upper)
        # The interval matching a level-alpha TOST is the (1 - 2 alpha) one.
        lo, hi = stat.interval(1.0 - 2.0 * settings.alpha)
        null, alternative = margin, "equivalence"
    else:
        p = stat.p_two_sided(0.0)
        lo, hi = stat.interval(settings.confidence)
        null, alternative = 0.0, "two-sided"
    return HypothesisTest(
        name=f"{family} {policy} vs {second[0]} {budget_label(budget)}",
        family=family,
        reader=reader,
        budget=budget,
        policy=policy,
        other=second[0],
        regime=regime,
        statistic=stat.point,
        ci_lo=lo,
        ci_hi=hi,
        null=null,
        alternative=alternative,
        p_raw=p,
        p_holm=None,
        decision="",
        expectation_met=None,
        n_questions=n_shared,
        undefined_resamples=stat.undefined,
    )


def _control_keys(engine: _Engine, budget: int, reader: str) -> list[tuple[CellKey, CellKey]]:
    s = engine.settings
    first = (s.control, budget, "b", reader)
    if not engine.has(first):
        return []
    return [
        (first, (base, budget, "b", reader))
        for base in s.baselines
        if engine.has((base, budget, "b", reader))
    ]


def _accuracy(engine: _Engine, key: CellKey) -> float | None:
    n = engine.count(key, _N)
    return engine.count(key, _CORRECT) / n if n else None


def _matching(engine: _Engine, budget: int, reader: str) -> list[PairMatch]:
    """Every H2 candidate pair at one budget, matched when ``|delta acc| <= caliper``."""
    s = engine.settings
    policies = sorted(
        {
            k[0]
            for k in engine.cells
            if k[1:] == (budget, "b", reader) and k[0] not in (s.control, s.reference)
        },
        key=policy_sort_key,
    )
    out = []
    for i, policy in enumerate(policies):
        for other in policies[i + 1 :]:
            first, second = (policy, budget, "b", reader), (other, budget, "b", reader)
            acc, other_acc = _accuracy(engine, first), _accuracy(engine, second)
            a, b = engine.cells[first].counts, engine.cells[second].counts
            shared = (a[_N] > 0) & (b[_N] > 0)
            n_shared = int(shared.sum())
            diff = None
            if n_shared:
                rates = np.divide(a[_IRR], a[_N], where=shared, out=np.zeros(shared.size))
                other_rates = np.divide(b[_IRR], b[_N], where=shared, out=np.zeros(shared.size))
                diff = float((rates - other_rates)[shared].mean())
            if acc is None or other_acc is None or n_shared == 0:
                gap, matched = None, False
                reason = "no shared oracle-answerable questions"
            else:
                gap = abs(acc - other_acc)
                # A small tolerance so that a gap of exactly the caliper matches
                # despite binary floating point (0.70 - 0.65 > 0.05 in floats).
                matched = gap <= s.caliper + 1e-9
                relation = "<=" if matched else ">"
                reason = f"accuracy gap {gap:.3f} {relation} caliper {s.caliper:g}"
            out.append(
                PairMatch(
                    reader,
                    budget,
                    policy,
                    other,
                    acc,
                    other_acc,
                    gap,
                    matched,
                    reason,
                    diff,
                    n_shared,
                )
            )
    return out


# --------------------------------------------------------------------------
# 6b. The families, each declared once
# --------------------------------------------------------------------------

#: The power a test must have had before its unmet expectation fails the run.
POWER = 0.8
POSITIVE_CONTROL = "positive-control"


def _same_cell(test: HypothesisTest, policy: str, budget: int) -> bool:
    return test.policy == policy and test.budget == budget


@dataclass(frozen=True)
class Family:
    """One hypothesis family: what it tests, what it expects, how the report shows it.

    To add a family, declare one and append it to :data:`FAMILIES`: the
    analysis builds its tests with ``build``, Holm-adjusts them when ``holm``,
    decides each with ``expect``, judges the run's power against ``effect``,
    and the report gives it a section (``title``, ``tests``, ``statistic``)
    and its failures their words (``describe``); ``cells`` tells a grid item
    which cells' records decide it.
    """

    name: str
    title: str
    #: what is tested, in a sentence for the report
    tests: str
    #: the statistic's name in tables and failure lines
    statistic: str
    #: every test of one reader: ``build(engine, reader, budgets)``
    build: Callable[[_Engine, str, Sequence[int]], list[HypothesisTest]]
    #: what must hold, in words ("" for a finding, which never fails the run)
    expectation: str = ""
    #: whether a significant test meets it (None: keep what ``build`` set, or no expectation)
    expect: Callable[[HypothesisTest, bool], bool | None] | None = None
    #: decision words for a significant and a non-significant test
    decisions: tuple[str, str] = ("reject", "retain")
    holm: bool = True
    #: the smallest effect the expectation is about; an unmet expectation fails the
    #: run only where the run could have detected it (None: always testable)
    effect: float | None = None
    #: the cells (policy, budget) whose records decide the family, given the run's budgets
    cells: Callable[[StatsSettings, Sequence[int]], list[tuple[str, int]]] = lambda _s, _b: []
    #: whether a test concerns the grid item of (policy, budget)
    involves: Callable[[HypothesisTest, str, int], bool] = _same_cell
    #: how many tests the family has in a grid of these policies and budgets (for Holm's bound)
    size: Callable[[StatsSettings, Sequence[str], Sequence[int]], int] = lambda _s, _p, _b: 0

    def decide(self, test: HypothesisTest, p: float | None, alpha: float) -> HypothesisTest:
        """The decision and the expectation at ``p`` (raw in an item's check, Holm at the end)."""
        if test.statistic is None or p is None:
            return replace(test, decision="empty", expectation_met=None)
        significant = p < alpha
        met = test.expectation_met if self.expect is None else self.expect(test, significant)
        return replace(test, decision=self.decisions[0 if significant else 1], expectation_met=met)

    def describe(self, test: HypothesisTest) -> str:
        """One short line, in words, for a test whose expectation was not met."""
        where = f"{budget_label(test.budget)}"
        if test.note:  # a construct violation says what it is
            return f"{test.name}: {test.note}"
        sign = "+" if test.other is not None or test.regime == "b-a" else ""  # differences carry a sign
        value = "-" if test.statistic is None else f"{test.statistic:{sign}.2f}"
        ci = "" if test.ci_lo is None or test.ci_hi is None else f", CI {test.ci_lo:{sign}.2f} to {test.ci_hi:{sign}.2f}"
        if test.other is not None:
            what = f"{test.policy} not shown more destructive than {test.other} at {where}"
        else:
            what = f"{test.policy} at {where}: {self.expectation}"
        return f"{self.name}: {what} ({self.statistic} {value}{ci})"


def _build_h1(engine: _Engine, reader: str, budgets: Sequence[int]) -> list[HypothesisTest]:
    tests = (_h1(engine, p, b, reader) for p in engine.settings.family_policies for b in budgets)
    return [t for t in tests if t is not None]


def _build_h3(engine: _Engine, reader: str, budgets: Sequence[int]) -> list[HypothesisTest]:
    tests = (_h3(engine, p, b, reader) for p in engine.settings.family_policies for b in budgets)
    return [t for t in tests if t is not None]


def _build_r1(engine: _Engine, reader: str, budgets: Sequence[int]) -> list[HypothesisTest]:
    return [_r1(engine, k) for k in engine.keys if k[3] == reader and k[2] == "b" and k[1] in budgets]


def _pair_tests(
    engine: _Engine, family: str, pairs: Sequence[tuple[CellKey, CellKey]]
) -> list[HypothesisTest]:
    stats = engine.rate_differences(pairs)
    return [_pair_test(family, a, b, stat, n, engine.settings) for (a, b), (stat, n) in zip(pairs, stats)]


def _matched_pairs(engine: _Engine, reader: str, budgets: Sequence[int]) -> list[tuple[CellKey, CellKey]]:
    return [
        ((m.policy, m.budget, "b", reader), (m.other, m.budget, "b", reader))
        for budget in budgets
        for m in engine.matching(budget, reader)
        if m.matched
    ]


def _build_h2(engine: _Engine, reader: str, budgets: Sequence[int]) -> list[HypothesisTest]:
    return _pair_tests(engine, "H2", _matched_pairs(engine, reader, budgets))


def _build_tost(engine: _Engine, reader: str, budgets: Sequence[int]) -> list[HypothesisTest]:
    return _pair_tests(engine, "TOST", _matched_pairs(engine, reader, budgets))


def _build_control(engine: _Engine, reader: str, budgets: Sequence[int]) -> list[HypothesisTest]:
    pairs = [pair for budget in budgets for pair in _control_keys(engine, budget, reader)]
    return _pair_tests(engine, POSITIVE_CONTROL, pairs)


#: Every family, in the order the report gives them (the paper's order of findings).
FAMILIES: tuple[Family, ...] = (
    Family(
        name="H1",
        title="H1: construct check, regime (a)",
        tests=(
            "Per evicting and control cell, the regime-(a) two-bin share irr / (irr + rec) > 0 "
            "(one-sided). Expected to reject in every cell."
        ),
        statistic="two-bin share",
        build=_build_h1,
        expectation="regime-(a) two-bin share not shown above 0",
        expect=lambda _t, significant: significant,
        cells=lambda s, budgets: [(p, b) for p in s.family_policies for b in budgets],
        size=lambda s, policies, budgets: len(set(s.family_policies) & set(policies)) * len(budgets),
    ),
    Family(
        name="H3",
        title="H3: recoverable share, regime (b) minus (a)",
        tests=(
            "Per the same cells, rec / (irr + rec) in regime (b) minus regime (a), paired by question "
            "(two-sided). The rejections are a finding; regime (a) must hold no recoverable error."
        ),
        statistic="recoverable share (b) - (a)",
        build=_build_h3,
        expectation="regime (a) holds a recoverable error",
        cells=lambda s, budgets: [(p, b) for p in s.family_policies for b in budgets],
        size=lambda s, policies, budgets: len(set(s.family_policies) & set(policies)) * len(budgets),
    ),
    Family(
        name="R1",
        title="R1: is destruction the majority? (regime b)",
        tests=(
            'Per regime-(b) cell, the two-bin share; "majority" where the interval\'s lower bound '
            "exceeds 0.5. Read from the interval, so not Holm-adjusted; p is one-sided against 0.5."
        ),
        statistic="two-bin share",
        build=_build_r1,
        holm=False,
    ),
    Family(
        name="H2",
        title="H2: irreversible rate at matched accuracy (regime b)",
        tests=(
            "Per accuracy-matched pair (see the pairs table below), the difference in irr / N, "
            "paired on the questions oracle-answerable for both (two-sided)."
        ),
        statistic="irr-rate difference",
        build=_build_h2,
    ),
    Family(
        name="TOST",
        title="Equivalence (TOST) on the matched pairs (regime b)",
        tests=(
            "Two one-sided tests that the irr / N difference of a matched pair lies within the "
            'equivalence margin; "equivalent" when Holm\'s p < alpha.'
        ),
        statistic="irr-rate difference",
        build=_build_tost,
        decisions=("equivalent", "not shown equivalent"),
    ),
    Family(
        name=POSITIVE_CONTROL,
        title="Positive control: control against each baseline (regime b)",
        tests=(
            "Per budget, irr / N of control minus each baseline (two-sided). Expected to reject with "
            "the control the more destructive: the check that the contrasts can detect a dissociation."
        ),
        statistic="irr-rate difference",
        build=_build_control,
        expectation="the control significantly more destructive",
        expect=lambda t, significant: significant and (t.statistic or 0.0) > 0,
        # the control is built to evict gold far more often than any baseline: a gap of
        # 15 points of irr / N is the least it is meant to show
        effect=0.15,
        cells=lambda s, budgets: [(p, b) for p in (s.control, *s.baselines) for b in budgets],
        size=lambda s, policies, budgets: (
            (s.control in policies) * len(set(s.baselines) & set(policies)) * len(budgets)
        ),
    ),
)


def family_of(name: str) -> Family:
    """The declaration of a family by name."""
    for family in FAMILIES:
        if family.name == name:
            return family
    raise KeyError(f"unknown hypothesis family {name!r}")


def minimum_detectable(
    test: HypothesisTest, tests_in_family: int, settings: StatsSettings, effect: float
) -> float | None:
    """The smallest effect ``test`` could detect with :data:`POWER` at Holm's strictest level.

    ``(z_alpha + z_power) * se`` with ``alpha / m``. The standard error is the
    bootstrap interval's (normal approximation), but never below what a true
    difference of ``effect`` would give on the test's questions:
    ``sqrt(effect * (1 - effect) / n)``, the least spread of per-question
    differences in {-1, 0, 1} with that mean. Without that floor a handful of
    questions that happen to agree would look infinitely precise. None when
    the test has no interval.
    """
    half = test.half_width
    if half is None or test.n_questions < 1:
        return None
    normal = NormalDist()
    se = half / normal.inv_cdf(1.0 - (1.0 - settings.confidence) / 2.0)
    se = max(se, math.sqrt(effect * (1.0 - effect) / test.n_questions))
    level = settings.alpha / max(1, tests_in_family)
    z_alpha = normal.inv_cdf(1.0 - level if test.alternative == "greater" else 1.0 - level / 2.0)
    return (z_alpha + normal.inv_cdf(POWER)) * se


def judge_power(
    tests: Sequence[HypothesisTest], sizes: Mapping[tuple[str, str], int], settings: StatsSettings
) -> list[HypothesisTest]:
    """Mark unmet expectations the run could not have met as not testable, with why and what would do.

    ``sizes`` is the number of tests per (family, reader): Holm's strictest level
    is ``alpha`` over it. Only families that declare an ``effect`` are judged.
    """
    out = []
    for t in tests:
        family = family_of(t.family)
        if t.expectation_met is not False or family.effect is None:
            out.append(t)
            continue
        m = sizes.get((t.family, t.reader), 1)
        mde = minimum_detectable(t, m, settings, family.effect)
        if mde is not None and mde <= family.effect:
            out.append(t)
            continue
        if mde is None:
            why = "no defined resample"
        else:
            needed = math.ceil(t.n_questions * (mde / family.effect) ** 2)
            why = (
                f"at {t.n_questions} questions its {settings.confidence:.0%} interval is "
                f"±{t.half_width:.2f}, so the least {family.statistic} it could detect ({POWER:.0%} power, "
                f"Holm over {m}) is {mde:.2f}, above the {family.effect:.2f} it is about; "
                f"about {needed} questions would make it testable"
            )
        out.append(replace(t, testable=False, power_note=why))
    return out


def _apply_holm(tests: list[HypothesisTest], alpha: float) -> list[HypothesisTest]:
    """Holm within each (family, reader) of a family that declares it; empty tests do not count."""
    out = list(tests)
    groups: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for i, t in enumerate(out):
        if family_of(t.family).holm and t.p_raw is not None and t.statistic is not None:
            groups.setdefault((t.family, t.reader), []).append((i, t.p_raw))
    for members in groups.values():
        indices = [i for i, _ in members]
        adjusted = holm([p for _, p in members])
        for i, p in zip(indices, adjusted):
            out[i] = _decide(replace(out[i], p_holm=p), p, alpha)
    for i, t in enumerate(out):
        if family_of(t.family).holm and (t.p_raw is None or t.statistic is None):
            out[i] = _decide(t, None, alpha)
    return out


def _family_sizes(tests: Sequence[HypothesisTest]) -> dict[tuple[str, str], int]:
    sizes: dict[tuple[str, str], int] = {}
    for t in tests:
        sizes[(t.family, t.reader)] = sizes.get((t.family, t.reader), 0) + 1
    return sizes


def _cell_figures(engine: _Engine, key: CellKey) -> CellStats:
    policy, budget, regime, reader = key
    cell = engine.cells[key]
    c = [int(x) for x in cell.counts.sum(axis=1)]
    confidence = engine.settings.confidence
    two_bin = engine.two_bin(key)
    irr_rate = engine.ratio(key, [_IRR], [_N])
    accuracy = engine.ratio(key, [_CORRECT], [_N])

    def share(num: int, den: int) -> float | None:
        return num / den if den else None

    return CellStats(
        reader=reader,
        policy=policy,
        budget=budget,
        regime=regime,
        seeds=tuple(sorted(cell.seeds)),
        records=cell.records,
        excluded=cell.excluded,
        not_answerable=cell.not_answerable,
        negative_restore_gain=cell.negative_restore_gain,
        N=c[_N],
        err=c[_ERR],
        irr=c[_IRR],
        rec=c[_REC],
        res=c[_RES],
        correct=c[_CORRECT],
        gold_evicted=c[_GOLD],
        two_bin_share=two_bin.point,
        two_bin_lo=two_bin.interval(confidence)[0],
        two_bin_hi=two_bin.interval(confidence)[1],
        irr_share=share(c[_IRR], c[_ERR]),
        rec_share=share(c[_REC], c[_ERR]),
        res_share=share(c[_RES], c[_ERR]),
        irr_rate=irr_rate.point,
        irr_rate_lo=irr_rate.interval(confidence)[0],
        irr_rate_hi=irr_rate.interval(confidence)[1],
        accuracy=accuracy.point,
        accuracy_lo=accuracy.interval(confidence)[0],
        accuracy_hi=accuracy.interval(confidence)[1],
        gold_evicted_rate=share(c[_GOLD], c[_N]),
        two_bin_undefined=two_bin.undefined,
    )


def _settings(**kwargs: Any) -> StatsSettings:
    settings = StatsSettings(**kwargs)
    if not 0.0 < settings.alpha < 0.5 or not 0.0 < settings.confidence < 1.0:
        raise ValueError("alpha must be in (0, 0.5) and confidence in (0, 1)")
    if settings.caliper < 0 or settings.equivalence_margin <= 0:
        raise ValueError("caliper must be >= 0 and equivalence_margin > 0")
    return settings


def analyse(
    records: Sequence[Mapping[str, Any]],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    alpha: float = DEFAULT_ALPHA,
    confidence: float = DEFAULT_CONFIDENCE,
    caliper: float = DEFAULT_CALIPER,
    equivalence_margin: float = DEFAULT_EQUIVALENCE_MARGIN,
    family_policies: Sequence[str] = FAMILY_POLICIES,
    baselines: Sequence[str] = BASELINES,
    control: str = CONTROL,
    reference: str = REFERENCE,
) -> Analysis:
    """Run the whole statistics pass over the per-question records.

    Per reader, with one resample matrix shared by every cell:

    - every cell's figures with intervals for the two-bin share, ``irr/N``
      and accuracy;
    - **H1** per ``family_policies`` x budget: regime-(a) two-bin share > 0,
      one-sided; expected to reject;
    - **H3** per the same cells: recoverable share (b) - (a), paired, two-sided;
    - **R1** per regime-(b) cell: two-bin share, "majority" where its lower
      bound exceeds 0.5 (descriptive, no Holm);
    - **H2** per budget, every pair of policies other than ``control`` and
      ``reference`` with regime-(b) accuracies within ``caliper``: paired
      difference in ``irr/N`` on the questions oracle-answerable for both,
      two-sided; the interval half-width is the resolution. Unmatched pairs are
      in ``Analysis.matching`` with the accuracy gap;
    - **TOST** on the same matched pairs with ``equivalence_margin``: two
      one-sided bootstrap tests (``diff <= -margin`` and ``diff >= +margin``),
      p the larger of the two; "equivalent" when Holm's p < ``alpha``. Its
      interval is the matching ``1 - 2 alpha`` percentile interval;
    - **control** vs each of ``baselines`` per budget on ``irr/N``, two-sided;
      expected to reject with the control more destructive.

    Holm is applied within each family and reader.
    """
    settings = _settings(
        resamples=resamples,
        seed=seed,
        alpha=alpha,
        confidence=confidence,
        caliper=caliper,
        equivalence_margin=equivalence_margin,
        family_policies=tuple(family_policies),
        baselines=tuple(baselines),
        control=control,
        reference=reference,
    )
    engine = _Engine(records, settings)
    cells = tuple(_cell_figures(engine, key) for key in engine.keys)

    tests: list[HypothesisTest] = []
    matching: list[PairMatch] = []
    for reader in sorted({k[3] for k in engine.keys}):
        budgets = sorted({k[1] for k in engine.keys if k[3] == reader}, reverse=True)
        for family in FAMILIES:
            tests += family.build(engine, reader, budgets)
        matching += [m for budget in budgets for m in engine.matching(budget, reader)]
    tests = _apply_holm(tests, alpha)
    return Analysis(
        settings=settings,
        questions=len(engine.universe),
        cells=cells,
        tests=tuple(judge_power(tests, _family_sizes(tests), settings)),
        matching=tuple(matching),
    )


def cell_verdicts(
    records: Sequence[Mapping[str, Any]],
    policy: str,
    budget: int,
    *,
    budgets: Sequence[int],
    family_sizes: Mapping[str, int],
    fetch: Callable[[Sequence[tuple[str, int]]], Sequence[Mapping[str, Any]]] | None = None,
    reader: str | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    alpha: float = DEFAULT_ALPHA,
    confidence: float = DEFAULT_CONFIDENCE,
    family_policies: Sequence[str] = FAMILY_POLICIES,
    baselines: Sequence[str] = BASELINES,
    control: str = CONTROL,
) -> list[HypothesisTest]:
    """The expectations one grid item of (policy, budget) checks, decided as the session decides them.

    ``records`` hold the cell's records (and, for the control, the baselines'
    at ``budget``); ``family_sizes`` is the number of tests each family has in
    the whole grid (``budgets`` are the grid's). A test is decided from its raw
    p where Holm cannot change the outcome (``p >= alpha``: not significant;
    ``m * p < alpha``: significant); otherwise ``fetch`` gives the records of
    the whole family and the session's own analysis decides it. The power
    rule (:func:`judge_power`) is the session's too. With the same records,
    seed and resamples the question universe, hence the resamples and the
    intervals, are the session's, so items and session fail the same tests.
    """
    options = {
        "resamples": resamples,
        "seed": seed,
        "alpha": alpha,
        "confidence": confidence,
        "family_policies": tuple(family_policies),
        "baselines": tuple(baselines),
        "control": control,
    }
    settings = _settings(**options)
    engine = _Engine(records, settings)
    readers = sorted({k[3] for k in engine.keys})
    if reader is None:
        if len(readers) > 1:
            raise ValueError(f"records hold several readers {readers}; pass reader=")
        if not readers:
            return []
        reader = readers[0]
    out: list[HypothesisTest] = []
    for family in FAMILIES:
        if not family.expectation:
            continue
        m = family_sizes.get(family.name, 1)
        for test in family.build(engine, reader, [budget]):
            if not family.involves(test, policy, budget):
                continue
            p = test.p_raw
            if not family.holm or p is None or p >= alpha or m * p < alpha or fetch is None:
                decided = family.decide(test, p, alpha)
            else:  # Holm could go either way: decide it with the whole family, as the session does
                whole = analyse(fetch(family.cells(settings, budgets)), **options)  # type: ignore[arg-type]
                decided = next(t for t in whole.tests if (t.name, t.reader) == (test.name, test.reader))
            out += judge_power([decided], {(family.name, reader): m}, settings)
    return out


# --------------------------------------------------------------------------
# 7. Breakdown of the bins by question type
# --------------------------------------------------------------------------


def bins_by_type(
    records: Sequence[Mapping[str, Any]],
    *,
    by: Sequence[str] = ("reader", "regime", "question_type"),
    policies: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Bin counts and shares grouped by the record keys in ``by``.

    The default pools policies, budgets and seeds per reader, regime and
    question type (the paper's breakdown); pass e.g.
    ``by=("reader", "regime", "policy", "budget", "question_type")`` for the
    full grid, and ``policies`` to keep only some policies. Only records that
    enter N count. Rows are sorted by their keys.
    """
    groups: dict[tuple[Any, ...], list[int]] = {}
    for record in records:
        if policies is not None and record.get("policy") not in policies:
            continue
        if not enters_n(record):
            continue
        counts = groups.setdefault(tuple(record.get(k) for k in by), [0, 0, 0, 0, 0])
        counts[0] += 1
        if record.get("policy_correct") is False:
            counts[1] += 1
            if record.get("bin") in BINS:
                counts[2 + BINS.index(record["bin"])] += 1
    rows = []
    for key in sorted(groups, key=lambda k: tuple(str(x) for x in k)):
        n, err, irr, rec, res = groups[key]
        row: dict[str, Any] = dict(zip(by, key))
        row.update(N=n, err=err, irr=irr, rec=rec, res=res)
        row["irr_share"] = _round(irr / err) if err else None
        row["rec_share"] = _round(rec / err) if err else None
        row["res_share"] = _round(res / err) if err else None
        row["two_bin_share"] = _round(irr / (irr + rec)) if irr + rec else None
        rows.append(row)
    return rows
