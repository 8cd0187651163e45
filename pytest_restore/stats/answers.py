"""LoCoMo's answer metrics pooled: mean token F1 and BLEU-1 per cell and per question type, for every condition.

Read off each record's conditions (``conditions.<name>.f1`` and ``.bleu1``,
:mod:`pytest_restore.data.answer_metrics`); excluded records and conditions
without an answer are left out. They describe the answers beside the
judge's verdict and change no bin and no test.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pytest_restore.record import CONDITIONS, CellKey, Record

__all__ = ["ANSWER_COLUMNS", "AnswerFigures", "answer_figures", "answers_by_type"]

#: The columns ``cells.csv`` gains: mean F1 and BLEU-1 of each condition's answers.
ANSWER_COLUMNS: tuple[str, ...] = tuple(f"{metric}_{c}" for metric in ("f1", "bleu1") for c in CONDITIONS)


@dataclass(frozen=True)
class AnswerFigures:
    """Mean F1 and BLEU-1 per condition over some records (``None``: no answer to score)."""

    answers: int  #: records counted (not excluded)
    means: tuple[tuple[str, float | None], ...]  #: column of :data:`ANSWER_COLUMNS` -> mean

    @property
    def scored(self) -> bool:
        """Whether some answer carried a score (records written before the metrics carry none)."""
        return any(mean is not None for _, mean in self.means)

    def row(self) -> dict[str, float | None]:
        """The :data:`ANSWER_COLUMNS`."""
        return dict(self.means)


def _pool(records: Iterable[Record]) -> AnswerFigures:
    sums = {column: [0.0, 0] for column in ANSWER_COLUMNS}
    counted = 0
    for record in records:
        if record.excluded is not None:
            continue
        counted += 1
        for name, condition in record.conditions.by_name():
            for metric, value in (("f1", condition.f1), ("bleu1", condition.bleu1)):
                if value is not None:
                    total = sums[f"{metric}_{name}"]
                    total[0] += value
                    total[1] += 1
    means = tuple((column, total / n if n else None) for column, (total, n) in ((c, sums[c]) for c in ANSWER_COLUMNS))
    return AnswerFigures(counted, means)


def answer_figures(records: Iterable[tuple[CellKey, Record]]) -> dict[CellKey, AnswerFigures]:
    """Each cell's figures from its records."""
    grouped: dict[CellKey, list[Record]] = {}
    for key, record in records:
        grouped.setdefault(key, []).append(record)
    return {key: _pool(rs) for key, rs in grouped.items()}


def answers_by_type(records: Iterable[Record], regime: str = "b") -> dict[tuple[str, str], AnswerFigures]:
    """Per (reader, question type), every policy, budget and seed of ``regime`` pooled."""
    grouped: dict[tuple[str, str], list[Record]] = {}
    for record in records:
        if record.regime == regime:
            grouped.setdefault((record.reader, record.question_type), []).append(record)
    return {key: _pool(rs) for key, rs in sorted(grouped.items())}
