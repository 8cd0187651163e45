"""Robustness reader: what changes when a second reader runs the same grid.

The paper's comparison (its appendix C): the H1 and H3 rejection counts after
Holm, the per-policy ordering of the regime-(b) two-bin shares at each budget,
and the residual bin. Structural results should hold across readers; the
residual bin is expected to move with the reader's skill.
"""

from __future__ import annotations

from typing import Any

from pytest_restore.stats.analysis import Analysis
from pytest_restore.stats.results import policy_order

_REJECTED = frozenset({"reject"})


def compare_readers(analysis: Analysis) -> dict[str, Any] | None:
    """The comparison across readers, or ``None`` when the run had one reader."""
    readers = sorted({c.reader for c in analysis.cells})
    if len(readers) < 2:
        return None
    per_reader: dict[str, Any] = {}
    for reader in readers:
        counts = {
            family: {
                "rejected": sum(t.decision in _REJECTED for t in analysis.family(family, reader)),
                "tests": len(analysis.family(family, reader)),
            }
            for family in ("H1", "H3")
        }
        ordering: dict[str, list[str]] = {}
        residual: dict[str, int] = {}
        for cell in analysis.cells:
            if cell.reader != reader or cell.regime != "b":
                continue
            residual[f"{cell.policy}@{cell.budget}"] = cell.res
        budgets = sorted({c.budget for c in analysis.cells if c.reader == reader}, reverse=True)
        for budget in budgets:
            shares = [
                (c.two_bin_share, c.policy)
                for c in analysis.cells
                if c.reader == reader and c.regime == "b" and c.budget == budget and c.two_bin_share is not None
            ]
            # highest share first; ties in the built-in policy order
            shares.sort(key=lambda item: (-(item[0] or 0.0), policy_order(item[1])))
            ordering[str(budget)] = [policy for _, policy in shares]
        per_reader[reader] = {"families": counts, "two_bin_ordering": ordering, "residual": dict(sorted(residual.items()))}
    first, *others = readers
    same_ordering = {
        other: {b: per_reader[first]["two_bin_ordering"].get(b) == o for b, o in per_reader[other]["two_bin_ordering"].items()}
        for other in others
    }
    same_counts = {
        other: {f: per_reader[first]["families"][f]["rejected"] == per_reader[other]["families"][f]["rejected"] for f in ("H1", "H3")}
        for other in others
    }
    return {
        "readers": readers,
        "per_reader": per_reader,
        "same_ordering_as": {first: same_ordering},
        "same_reject_counts_as": {first: same_counts},
    }
