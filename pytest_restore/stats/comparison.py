"""Two runs' cells side by side: each figure in both and the paired difference, with its interval.

The statistics of ``python -m pytest_restore compare`` (:mod:`pytest_restore.compare`):
each run's cells are read off the analysis's counting stage
(:func:`pytest_restore.stats.analysis.count`); per cell present in both runs,
the two-bin share, irreversible rate, recoverable rate and accuracy of each
run and the paired difference NEW - OLD on the questions oracle-answerable in
that cell in both, with a question-cluster bootstrap interval over those
questions (one resample matrix, so the two runs move together question by question).
Every ranker's cells take part (a run of ``--restore-rankers`` holds several);
a cell held by one run only is named in ``only_old`` or ``only_new``, never dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pytest_restore.bootstrap import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Resampler,
)
from pytest_restore.record import CellKey, Record, ranker_of
from pytest_restore.stats.analysis import count
from pytest_restore.stats.results import budget_label, cell_order
from pytest_restore.stats.tally import CORRECT_ROW, DIS_ROW, IRR_ROW, N_ROW, REC_ROW

#: The figures compared: name -> (numerator bins, denominator, whether up is worse).
#: Per-question rows: N, irr, rec, correct, dis.
FIGURES: dict[str, tuple[tuple[str, ...], tuple[str, ...], bool]] = {
    "two_bin_share": (("irr",), ("irr", "rec"), True),
    "irr_rate": (("irr",), ("N",), True),
    "rec_rate": (("rec",), ("N",), True),
    "dis_rate": (("dis",), ("N",), True),
    "destruction_share": (("irr", "dis"), ("irr", "rec", "dis"), True),
    "accuracy": (("correct",), ("N",), False),
}
_ROW = {"N": 0, "irr": 1, "rec": 2, "correct": 3, "dis": 4}
#: The tally's rows behind ``_ROW``'s columns.
_TALLY_ROWS = [N_ROW, IRR_ROW, REC_ROW, CORRECT_ROW, DIS_ROW]


@dataclass(frozen=True)
class FigureChange:
    """One figure of one cell in both runs, and the paired difference NEW - OLD."""

    figure: str
    old: float | None
    new: float | None
    difference: float | None
    lo: float | None
    hi: float | None
    worse_by: float | None  # how much worse NEW is (positive = worse), None when undefined

    def to_json(self) -> dict[str, Any]:
        """JSON-able dict (floats rounded to 6 decimals)."""
        return {
            "figure": self.figure,
            "old": _round(self.old),
            "new": _round(self.new),
            "difference": _round(self.difference),
            "ci_lo": _round(self.lo),
            "ci_hi": _round(self.hi),
            "worse_by": _round(self.worse_by),
        }


@dataclass(frozen=True)
class CellChange:
    """A cell present in both runs."""

    policy: str
    budget: int
    regime: str
    reader: str
    shared_questions: int
    figures: tuple[FigureChange, ...]
    #: the ranker, when either run held several (cells are then matched by ranker too); else ""
    ranker: str = ""

    @property
    def key(self) -> CellKey:
        """The cell's key (its reader and ranker "" when cells were matched across them)."""
        return CellKey(self.policy, self.budget, self.regime, self.reader, self.ranker)

    def figure(self, name: str) -> FigureChange:
        """One figure's change."""
        return next(f for f in self.figures if f.figure == name)

    def to_json(self) -> dict[str, Any]:
        """JSON-able dict."""
        return {
            "policy": self.policy,
            "budget": self.budget,
            "regime": self.regime,
            "reader": self.reader,
            "ranker": self.ranker,
            "shared_questions": self.shared_questions,
            "figures": {f.figure: f.to_json() for f in self.figures},
        }


@dataclass(frozen=True)
class Comparison:
    """Every cell both runs hold, and the cells only one of them has."""

    old: str
    new: str
    resamples: int
    seed: int
    cells: tuple[CellChange, ...]
    only_old: tuple[str, ...]
    only_new: tuple[str, ...]

    @property
    def compared_questions(self) -> int:
        """Question x cell pairs compared (each cell's questions oracle-answerable in both runs)."""
        return sum(c.shared_questions for c in self.cells)

    def to_json(self) -> dict[str, Any]:
        """JSON-able dict for ``compare.json``."""
        return {
            "old": self.old,
            "new": self.new,
            "resamples": self.resamples,
            "seed": self.seed,
            "confidence": DEFAULT_CONFIDENCE,
            "cells": [c.to_json() for c in self.cells],
            "only_old": list(self.only_old),
            "only_new": list(self.only_new),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6) + 0.0


def _per_question(
    records: Sequence[Record], match_readers: bool, match_rankers: bool
) -> dict[CellKey, dict[str, NDArray[np.int64]]]:
    """Per cell, per question in N: N, irr, rec, correct, read off the analysis's counts (seeds pooled).

    Every cell the records hold is kept, one whose N is 0 too (it is then compared over no question).
    Every ranker's cells are read; with ``match_rankers`` a cell's ranker is its ranker's name (the
    baseline's too), else "" (cells match across the two runs' rankers). Without ``match_readers``
    a cell's reader is "" (cells match across the two runs' readers).
    """
    counts = count(records)
    cells: dict[CellKey, dict[str, NDArray[np.int64]]] = {}
    for key, tally in [*counts.cells.items(), *counts.ranked.items()]:
        rows = tally.counts[_TALLY_ROWS]
        questions = {q: rows[:, i] for i, q in enumerate(tally.question_ids) if rows[0, i]}
        ranker = (key.ranker or counts.ranker) if match_rankers else ""
        cells[key._replace(reader=key.reader if match_readers else "", ranker=ranker)] = questions
    return cells


def cell_name(key: CellKey) -> str:
    """A cell in words: ``fifo 80k (b)``, with its reader and ranker when cells are matched by them."""
    return (
        f"{key.policy} {budget_label(key.budget)} ({key.regime})"
        + (f" reader {key.reader}" if key.reader else "")
        + (f" ranker {key.ranker}" if key.ranker else "")
    )


def _ratio_point(counts: NDArray[np.float64], num: Sequence[str], den: Sequence[str]) -> float | None:
    d = float(sum(counts[:, _ROW[x]].sum() for x in den))
    return float(sum(counts[:, _ROW[x]].sum() for x in num)) / d if d else None


def _ratio_samples(totals: NDArray[np.float64], num: Sequence[str], den: Sequence[str]) -> NDArray[np.float64]:
    n = sum(totals[:, _ROW[x]] for x in num)
    d = sum(totals[:, _ROW[x]] for x in den)
    out = np.full(totals.shape[0], np.nan)
    np.divide(n, d, out=out, where=d != 0)
    return out


def _change(
    key: CellKey,
    old: Mapping[str, NDArray[np.int64]],
    new: Mapping[str, NDArray[np.int64]],
    resamples: int,
    seed: int,
) -> CellChange:
    shared = sorted(set(old) & set(new))
    if not shared:  # nothing to pair: every figure undefined, said as 0 questions
        undefined = tuple(FigureChange(name, None, None, None, None, None, None) for name in FIGURES)
        return CellChange(key.policy, key.budget, key.regime, key.reader, 0, undefined, key.ranker)
    old_counts = np.array([old[q] for q in shared], dtype=np.float64).reshape(len(shared), len(_ROW))
    new_counts = np.array([new[q] for q in shared], dtype=np.float64).reshape(len(shared), len(_ROW))
    resampler = Resampler.draw(shared, resamples, seed)
    old_totals = resampler.totals(old_counts)
    new_totals = resampler.totals(new_counts)
    tail = (1.0 - DEFAULT_CONFIDENCE) / 2.0
    figures = []
    for name, (num, den, up_is_worse) in FIGURES.items():
        before, after = _ratio_point(old_counts, num, den), _ratio_point(new_counts, num, den)
        diff = None if before is None or after is None else after - before
        lo = hi = None
        if diff is not None:
            samples = _ratio_samples(new_totals, num, den) - _ratio_samples(old_totals, num, den)
            defined = samples[~np.isnan(samples)]
            if defined.size:
                lo, hi = (float(x) for x in np.quantile(defined, [tail, 1.0 - tail]))
        worse = None if diff is None else (diff if up_is_worse else -diff)
        figures.append(FigureChange(name, before, after, diff, lo, hi, worse))
    return CellChange(key.policy, key.budget, key.regime, key.reader, len(shared), tuple(figures), key.ranker)


def compare_records(
    old: Sequence[Record],
    new: Sequence[Record],
    *,
    old_name: str = "OLD",
    new_name: str = "NEW",
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Comparison:
    """Compare two runs' records cell by cell.

    Cells are matched on policy, budget and regime, and on the reader (the
    ranker) too when either run holds more than one reader (ranker): a run of
    one reader compared with a run of another matches its cells across the
    two readers, and a run of one ranker with a run of another likewise. A
    cell only one run holds is named in ``only_old``/``only_new``.
    """
    readers = {r.reader for r in old}, {r.reader for r in new}
    rankers = {ranker_of(r) for r in old}, {ranker_of(r) for r in new}
    match_readers = len(readers[0]) > 1 or len(readers[1]) > 1
    match_rankers = len(rankers[0]) > 1 or len(rankers[1]) > 1
    before = _per_question(old, match_readers, match_rankers)
    after = _per_question(new, match_readers, match_rankers)
    order = sorted(set(before) | set(after), key=cell_order)
    cells = tuple(_change(k, before[k], after[k], resamples, seed) for k in order if k in before and k in after)
    return Comparison(
        old_name,
        new_name,
        resamples,
        seed,
        cells,
        tuple(cell_name(k) for k in order if k not in after),
        tuple(cell_name(k) for k in order if k not in before),
    )
