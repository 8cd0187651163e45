"""The engine: every cell's per-question counts and one resample matrix applied to all.

The counted cells (:func:`pytest_restore.stats.analysis.count`) hold
per-question count vectors (``N, err, irr, rec, res, correct,
gold_evicted``) over one fixed, sorted universe of question ids. ``random``
pools its seeds into its cell, so a question's vector entry counts all of that
question's seed records. The question universe is every ``question_id`` in the
records passed in, oracle-answerable or not; a question outside a cell
contributes zeros to it. Resampling the whole universe keeps the resample
matrix common to every cell (so paired contrasts are joint).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from pytest_restore.bootstrap import Resampler, Statistic
from pytest_restore.record import CellKey
from pytest_restore.stats.results import PairMatch, StatsSettings, policy_order
from pytest_restore.stats.tally import (
    CORRECT_ROW,
    DIS_ROW,
    ERR_ROW,
    GOLD_ROW,
    IRR_ROW,
    N_ROW,
    REC_ROW,
    RES_ROW,
    ROWS,
    CellTally,
)

# Rows of a cell's count matrix (the tally's, see pytest_restore.record).
_N, _ERR, _IRR, _REC, _RES, _CORRECT, _GOLD, _DIS = (
    N_ROW, ERR_ROW, IRR_ROW, REC_ROW, RES_ROW, CORRECT_ROW, GOLD_ROW, DIS_ROW
)
_ROWS = len(ROWS)


class Engine:
    """Cells, the shared resample matrix and every cell's resampled sums."""

    def __init__(
        self, cells: Mapping[CellKey, CellTally], universe: Sequence[str], settings: StatsSettings
    ) -> None:
        """``cells`` are the counted cells (in the one cell order), all over the columns ``universe``."""
        self.settings = settings
        self.universe = list(universe)
        self.cells = cells
        self.resampler = Resampler.draw(self.universe, settings.resamples, settings.seed)
        keys = list(cells)
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

    def ratio(self, key: CellKey, num_rows: Iterable[int], den_rows: Iterable[int]) -> Statistic:
        """``sum(num rows) / sum(den rows)`` of one cell, with its bootstrap distribution."""
        num_rows, den_rows = list(num_rows), list(den_rows)
        counts, totals = self.cells[key].counts, self._totals[key]
        return Statistic.ratio(
            float(counts[num_rows].sum()),
            float(counts[den_rows].sum()),
            totals[:, num_rows].sum(axis=1),
            totals[:, den_rows].sum(axis=1),
        )

    def two_bin(self, key: CellKey) -> Statistic:
        return self.ratio(key, [_IRR], [_IRR, _REC])

    def recoverable_share(self, key: CellKey) -> Statistic:
        return self.ratio(key, [_REC], [_IRR, _REC])

    def n_questions(self, key: CellKey) -> int:
        return int(np.count_nonzero(self.cells[key].counts[_N]))

    def rate_differences(
        self, pairs: Sequence[tuple[CellKey, CellKey]]
    ) -> list[tuple[Statistic, int]]:
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
            stat = Statistic.ratio(
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


def _accuracy(engine: Engine, key: CellKey) -> float | None:
    n = engine.count(key, _N)
    return engine.count(key, _CORRECT) / n if n else None


def _matching(engine: Engine, budget: int, reader: str) -> list[PairMatch]:
    """Every H2 candidate pair at one budget, matched when ``|delta acc| <= caliper``."""
    s = engine.settings
    policies = sorted(
        {
            k.policy
            for k in engine.cells
            if (k.budget, k.regime, k.reader, k.ranker) == (budget, "b", reader, "")
            and k.policy not in (s.control, s.reference)
        },
        key=policy_order,
    )
    out = []
    for i, policy in enumerate(policies):
        for other in policies[i + 1 :]:
            first, second = CellKey(policy, budget, "b", reader), CellKey(other, budget, "b", reader)
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


