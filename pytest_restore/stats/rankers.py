"""Rankers compared in one run (``--restore-rankers``): what the report says about them, from the analysis.

The analysis counts the baseline ranker's records into the usual cells and
each compared ranker's into cells whose key names it
(:class:`~pytest_restore.record.CellKey`), all over one question universe
and one resample matrix; the ``rankers`` family
(:mod:`pytest_restore.stats.families`) tests each compared ranker's
recoverable and two-bin shares against the baseline's, paired by question,
Holm within the family. This module reads those figures into rows per
policy x budget and says whether the policies' order by recoverable share
changes with the ranker. It computes nothing the analysis has not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_restore.record import CellKey
from pytest_restore.stats.analysis import Analysis, RecoverableShare
from pytest_restore.stats.results import CellStats, HypothesisTest, policy_order


@dataclass(frozen=True)
class RankerRow:
    """One ranker's regime-(b) figures in one policy x budget cell, and its tests against the baseline."""

    reader: str
    policy: str
    budget: int
    ranker: str
    cell: CellStats
    recoverable: RecoverableShare | None
    #: the rankers family's tests of this ranker against the baseline, by figure (none for the baseline)
    tests: dict[str, HypothesisTest]


@dataclass(frozen=True)
class Ordering:
    """The policies in order of recoverable share (highest first) at one budget, under each ranker."""

    reader: str
    budget: int
    by_ranker: dict[str, tuple[str, ...]]

    @property
    def changes(self) -> bool:
        """Whether some ranker orders the policies differently from the baseline."""
        orders = list(self.by_ranker.values())
        return any(order != orders[0] for order in orders[1:])


def ranker_name(analysis: Analysis, key: CellKey) -> str:
    """The ranker a cell was read with (the baseline's keys leave it empty)."""
    return key.ranker or analysis.baseline_ranker or ""


def ranker_rows(analysis: Analysis) -> list[RankerRow]:
    """Every regime-(b) cell of every ranker, baseline first within a policy x budget (empty for one ranker)."""
    if analysis.baseline_ranker is None:
        return []
    shares = {r.key: r for r in analysis.recoverable}
    tests: dict[tuple[str, str, int, str], dict[str, HypothesisTest]] = {}
    for t in (t for t in analysis.tests if t.family == "rankers"):  # the family's tests, in report order
        tests.setdefault((t.reader, t.policy, t.budget, t.other or ""), {})[t.note] = t
    rows = [
        RankerRow(
            c.reader, c.policy, c.budget, ranker_name(analysis, c.key), c, shares.get(c.key),
            tests.get((c.reader, c.policy, c.budget, c.ranker), {}),
        )
        for c in (*analysis.cells, *analysis.ranker_cells)
        if c.regime == "b"
    ]
    return sorted(rows, key=lambda r: (r.reader, policy_order(r.policy), -r.budget, r.cell.ranker != "", r.ranker))


def orderings(analysis: Analysis, rows: Sequence[RankerRow] | None = None) -> list[Ordering]:
    """Per reader and budget, the evicting policies by recoverable share under each ranker (empty for one ranker).

    ``rows``: :func:`ranker_rows` of ``analysis`` when the caller has them.
    """
    rows = ranker_rows(analysis) if rows is None else rows
    st = analysis.settings
    out = []
    for reader, budget in sorted({(r.reader, r.budget) for r in rows}, key=lambda rb: (rb[0], -rb[1])):
        by_ranker: dict[str, tuple[str, ...]] = {}
        for row in rows:
            if (row.reader, row.budget) != (reader, budget) or row.policy in (st.reference, st.control):
                continue
            by_ranker.setdefault(row.ranker, ())
        for ranker in by_ranker:
            mine = [
                r for r in rows
                if (r.reader, r.budget, r.ranker) == (reader, budget, ranker) and r.policy not in (st.reference, st.control)
            ]
            ranked = sorted(
                mine,
                key=lambda r: (-(r.recoverable.share if r.recoverable and r.recoverable.share is not None else -1.0),
                               policy_order(r.policy)),
            )
            by_ranker[ranker] = tuple(r.policy for r in ranked)
        if by_ranker:
            out.append(Ordering(reader, budget, by_ranker))
    return out
