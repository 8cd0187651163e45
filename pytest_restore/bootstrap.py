"""The question-cluster bootstrap: one resample matrix, ratio statistics, p-values, Holm.

A low-level module (numpy only) shared by the statistics (:mod:`pytest_restore.stats`)
and the audit's ablation summary (:mod:`pytest_restore.audit.ablations`).

One resample matrix ``W`` (``R x Q``: how often question ``q`` is drawn in
resample ``r``) is drawn once from a seeded ``numpy.random.Generator``. Every
resampled sum of a per-question vector ``v`` is the matrix product ``W @ v``.
Because every statistic of an analysis shares ``W``, all seeds of a question
move together and every contrast between cells is resampled jointly, i.e.
paired by question. Ratio statistics are ratios of resampled sums.

Intervals are percentile intervals (linear interpolation, as
``numpy.percentile`` and ``scipy.stats.bootstrap`` use). The smoothed
one-sided p-value is ``(1 + #resamples on the far side of the null) / (R' + 1)``;
two-sided is ``min(1, 2 x smaller one-sided)``. Holm-Bonferroni adjusts a
family's p-values.

Undefined resamples. A ratio whose resampled denominator is 0 is undefined:
such resamples are NaN, dropped from the interval and from the p-value, and
counted (``R'`` is the number of defined resamples). A point estimate of 0/0
has no interval and no p-value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

# The paper's settings; every one is a parameter of the functions that use it.
DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 20_240_607
DEFAULT_ALPHA = 0.05
DEFAULT_CONFIDENCE = 0.95

FloatArray = NDArray[np.float64]


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
class Statistic:
    """A point estimate and its bootstrap distribution (NaN = undefined resample)."""

    point: float | None
    samples: FloatArray

    @classmethod
    def ratio(cls, num: float, den: float, num_r: FloatArray, den_r: FloatArray) -> Statistic:
        return cls(num / den if den else None, _ratio(num_r, den_r))

    def minus(self, other: Statistic) -> Statistic:
        """The paired difference: both come from the same resample matrix."""
        point = None if self.point is None or other.point is None else self.point - other.point
        return Statistic(point, self.samples - other.samples)

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
