"""The one place records are counted: per-question tallies of a cell or any group of records.

A :class:`CellTally` holds, per question, how many of a group's records enter
``N`` (:func:`pytest_restore.record.enters_n`), are errors, fall in each bin
(:data:`pytest_restore.record.BINS`) or have gold evicted; the bootstrap
resamples these vectors and their sums are the figures of ``cells.csv``.
:func:`tally_by` counts records into any grouping (the grid's cells, question
types); the analysis (:mod:`pytest_restore.stats.analysis`) is its one caller
on a report's path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from pytest_restore.record import CellKey, Record

_G = TypeVar("_G")

#: Rows of a tally's per-question count matrix.
ROWS: tuple[str, ...] = ("N", "err", "irr", "rec", "res", "correct", "gold_evicted", "dis")
N_ROW, ERR_ROW, IRR_ROW, REC_ROW, RES_ROW, CORRECT_ROW, GOLD_ROW, DIS_ROW = range(len(ROWS))
_BIN_ROW = {"irreversible": IRR_ROW, "recoverable": REC_ROW, "distorted": DIS_ROW, "residual": RES_ROW}


@dataclass
class CellTally:
    """The counts of one cell: per question (for the bootstrap) and in total (for ``cells.csv``).

    ``counts[row, q]`` counts the records of question ``question_ids[q]`` for
    each of :data:`ROWS`; only records that enter ``N`` are counted there.
    ``random`` pools its seeds: a question's entry counts every seed's record.
    """

    question_ids: tuple[str, ...]
    counts: NDArray[np.int64]
    seeds: set[int] = field(default_factory=set)
    records: int = 0
    excluded: int = 0
    not_answerable: int = 0
    negative_restore_gain: int = 0
    #: excluded records by reason (the ``excluded`` field)
    exclusions: dict[str, int] = field(default_factory=dict)

    @classmethod
    def empty(cls, question_ids: Sequence[str]) -> CellTally:
        """A tally with no record counted."""
        return cls(tuple(question_ids), np.zeros((len(ROWS), len(question_ids)), dtype=np.int64))

    def add(self, record: Record, column: int) -> None:
        """Count one record of this cell into question column ``column``."""
        self.records += 1
        self.seeds.add(record.seed)
        if record.excluded is not None:
            self.excluded += 1
            reason = record.excluded
            self.exclusions[reason] = self.exclusions.get(reason, 0) + 1
            return
        if record.conditions.oracle.correct is not True:
            self.not_answerable += 1
            return
        counts = self.counts[:, column]
        counts[N_ROW] += 1
        if record.conditions.policy.correct:
            counts[CORRECT_ROW] += 1
        else:
            counts[ERR_ROW] += 1
            if record.bin is not None:
                counts[_BIN_ROW[record.bin]] += 1
        if (record.gold_evicted or 0) > 0:
            counts[GOLD_ROW] += 1
        self.negative_restore_gain += record.negative_restore_gain

    def total(self, row: int) -> int:
        """The sum of one row over every question."""
        return int(self.counts[row].sum())

    @property
    def N(self) -> int:
        """Oracle-answerable, not excluded records."""
        return self.total(N_ROW)

    @property
    def err(self) -> int:
        """Policy errors among the ``N``."""
        return self.total(ERR_ROW)

    @property
    def irr(self) -> int:
        """Irreversible errors."""
        return self.total(IRR_ROW)

    @property
    def rec(self) -> int:
        """Recoverable errors."""
        return self.total(REC_ROW)

    @property
    def dis(self) -> int:
        """Distorted errors: every gold unit kept by a derived memory, but forcing those memories does not fix it."""
        return self.total(DIS_ROW)

    @property
    def res(self) -> int:
        """Residual errors."""
        return self.total(RES_ROW)

    @property
    def correct(self) -> int:
        """Policy answers judged correct among the ``N``."""
        return self.total(CORRECT_ROW)

    @property
    def gold_evicted(self) -> int:
        """Records among the ``N`` with at least one gold unit evicted."""
        return self.total(GOLD_ROW)

    @property
    def two_bin_share(self) -> float | None:
        """``irr / (irr + rec)``, ``None`` when both are zero."""
        return _share(self.irr, self.irr + self.rec)

    @property
    def destruction_share(self) -> float | None:
        """``(irr + dis) / (irr + rec + dis)``: the share of the errors restore fixes that the store destroyed
        (evicted, or kept in a form that lost the answer); ``None`` when all three are zero."""
        return _share(self.irr + self.dis, self.irr + self.rec + self.dis)

    @property
    def irr_rate(self) -> float | None:
        """``irr / N``."""
        return _share(self.irr, self.N)

    @property
    def accuracy(self) -> float | None:
        """Policy accuracy over the oracle-answerable questions."""
        return _share(self.correct, self.N)

    @property
    def gold_evicted_rate(self) -> float | None:
        """Share of the ``N`` with at least one gold unit evicted."""
        return _share(self.gold_evicted, self.N)

    def share(self, bin_: str) -> float | None:
        """Three-bin share of one bin among the errors."""
        return _share(self.total(_BIN_ROW[bin_]), self.err)


def _share(num: int, den: int) -> float | None:
    return num / den if den else None


def tally_by(
    records: Iterable[Record],
    group_of: Callable[[Record], _G],
    question_ids: Sequence[str] | None = None,
) -> dict[_G, CellTally]:
    """Count every record into the tally of its group ``group_of(record)`` (a cell, a question type...).

    ``question_ids`` is the column universe (default: every question id in the
    records, sorted); every group shares it.
    """
    checked = list(records)
    universe = sorted({r.question_id for r in checked}) if question_ids is None else question_ids
    column = {qid: i for i, qid in enumerate(universe)}
    cells: dict[_G, CellTally] = {}
    for r in checked:
        key = group_of(r)
        cell = cells.get(key)
        if cell is None:
            cell = cells[key] = CellTally.empty(universe)
        cell.add(r, column[r.question_id])
    return cells


def tally_cells(
    records: Iterable[Record], question_ids: Sequence[str] | None = None
) -> dict[CellKey, CellTally]:
    """Count every record into its cell ``(policy, budget, regime, reader)``.

    ``question_ids`` is the column universe (default: every question id in the
    records, sorted); every cell shares it, so the bootstrap resamples all
    cells jointly.
    """
    return tally_by(records, CellKey.of, question_ids)


def tally(records: Iterable[Record]) -> CellTally:
    """The records of one cell (or any group) pooled into one tally."""
    pooled = tally_by(records, lambda r: None)
    return pooled.get(None) or CellTally.empty(())
