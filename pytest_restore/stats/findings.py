"""What the findings say, worked out once from the analysis: every figure, count and verdict line a renderer shows.

:func:`findings` reads one :class:`~pytest_restore.stats.analysis.Analysis` (and the budgets that bind for
no history) and returns :class:`Findings`: per reader, the destruction share of each evicting policy at the
loosest budget, the distortion of each memory system, the H3, H2 and positive-control counts; the
expectations not met and those this run could not test, in words; the families' summary and tests; the
rankers' rows and orders; the readers' comparison when a robustness reader ran (:func:`compare_readers`);
``hypotheses.json``'s data. With one real case per bin and policy (:func:`bin_cases`, from the records),
``report.md``, the figure, ``report.html`` and ``summary.json`` format these fields and count nothing again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_restore.record import BINS, Record
from pytest_restore.stats.analysis import Analysis
from pytest_restore.stats.families import POSITIVE_CONTROL, Family, families_of
from pytest_restore.stats.rankers import Ordering, RankerRow, orderings, ranker_rows
from pytest_restore.stats.results import FamilySummary, HypothesisTest, budget_label, policy_order


@dataclass(frozen=True)
class Destruction:
    """One evicting policy's regime-(b) two-bin share at the loosest budget (``share`` ``None``: no restorable error)."""

    policy: str
    share: float | None
    lo: float | None
    hi: float | None
    #: the interval's lower bound clears 0.5
    majority: bool


@dataclass(frozen=True)
class Distortion:
    """One memory system's cell: its distorted errors over those a restore fixes, dis / (irr + rec + dis)."""

    budget: int
    dis: int
    #: irr + rec + dis (0: no restorable error, and ``share`` is ``None``)
    fixed: int
    share: float | None
    destruction_share: float | None


@dataclass(frozen=True)
class ReaderFindings:
    """One reader's findings (regime b unless said)."""

    reader: str
    #: the loosest budget of the reader's cells
    loose: int
    destruction: tuple[Destruction, ...]
    #: each memory system holding derived memories, its cells loosest first
    distortion: tuple[tuple[str, tuple[Distortion, ...]], ...]
    #: the H3 tests that are not empty, those rejected, and how many violate the construct
    h3: tuple[HypothesisTest, ...]
    h3_moved: tuple[HypothesisTest, ...]
    h3_violations: int
    #: H2's candidate pairs, those accuracy-matched, the tests that are not empty and those that dissociate
    pairs: int
    matched: int
    h2: tuple[HypothesisTest, ...]
    h2_split: tuple[HypothesisTest, ...]
    #: H2's resolution at the budgets that evict: its half-widths' range (``None``: no interval wider than 0),
    #: the pairs that score every question alike, and the pairs at budgets that evict nothing
    h2_halves: tuple[float, float] | None
    h2_alike: int
    h2_idle: int
    #: the positive control's contrasts that are not empty, detected, at idle budgets, not testable, and the
    #: range of its irr-rate differences (``None``: none defined)
    control: int
    detected: int
    control_idle: int
    control_untested: int
    control_diffs: tuple[float, float] | None


@dataclass(frozen=True)
class Findings:
    """Everything the report says of one analysis, worked out before anything renders (module docstring)."""

    analysis: Analysis
    #: the budgets that bind for no history (``RunInfo.idle_budgets``)
    idle: frozenset[int]
    #: every policy but the reference and the control, in the policy order
    evicting: tuple[str, ...]
    readers: tuple[ReaderFindings, ...]
    #: one line per expectation the run could test and did not meet (each fails the session)
    failures: tuple[str, ...]
    #: one line per family whose unmet expectations this run had no power to meet
    untestable: tuple[str, ...]
    #: per family and reader: tests, rejections, unmet and untestable expectations
    summary: tuple[FamilySummary, ...]
    #: the declared families the report shows, each with its tests
    families: tuple[tuple[Family, tuple[HypothesisTest, ...]], ...]
    #: H2's tests of every reader, for the pairs table's resolution
    h2: tuple[HypothesisTest, ...]
    #: a run comparing rankers: each cell's row beside the baseline's, and the policies' orders
    ranker_rows: tuple[RankerRow, ...]
    orderings: tuple[Ordering, ...]
    #: the comparison across readers (``None``: one reader)
    comparison: dict[str, Any] | None
    #: ``hypotheses.json``'s data
    hypotheses: dict[str, Any] = field(default_factory=dict)


def evicting_policies(analysis: Analysis) -> list[str]:
    """The policies a finding is about (and the figure's headline shows): every policy but the reference and the control."""
    st = analysis.settings
    names = {c.policy for c in analysis.cells if c.policy not in (st.reference, st.control)}
    return sorted(names, key=policy_order)


def findings(analysis: Analysis, idle: frozenset[int] = frozenset()) -> Findings:
    """The findings of ``analysis`` (``idle``: the budgets that bind for no history, :attr:`RunInfo.idle_budgets`)."""
    declared = families_of(analysis.settings)
    hypotheses = analysis.to_json(declared)
    hypotheses["ablations"] = analysis.ablations_json()
    summary = tuple(analysis.summary(declared))
    rows = tuple(ranker_rows(analysis))
    orders = tuple(orderings(analysis, rows))
    comparison = compare_readers(analysis)
    evicting = tuple(evicting_policies(analysis))
    return Findings(
        analysis=analysis,
        idle=idle,
        evicting=evicting,
        readers=tuple(_reader(analysis, reader, evicting, idle) for reader in analysis.readers),
        failures=tuple(_failures(analysis, declared)),
        untestable=tuple(_untestable(analysis, declared, idle)),
        summary=summary,
        families=tuple(
            (family, tuple(_family(analysis.tests, family.name)))
            for family in declared
            if family.shown_empty or _family(analysis.tests, family.name)
        ),
        h2=tuple(_family(analysis.tests, "H2")),
        ranker_rows=rows,
        orderings=orders,
        comparison=comparison,
        hypotheses=hypotheses,
    )


def _family(tests: Sequence[HypothesisTest], name: str, reader: str | None = None) -> list[HypothesisTest]:
    """The tests of one family (of one reader), in report order (as :meth:`Analysis.family`)."""
    return [t for t in tests if t.family == name and (reader is None or t.reader == reader)]


_REJECTED = frozenset({"reject"})


def compare_readers(analysis: Analysis) -> dict[str, Any] | None:
    """The robustness reader's comparison (the paper's appendix C), or ``None`` when the run had one reader.

    Per reader: the H1 and H3 rejection counts after Holm, the per-policy ordering of the regime-(b)
    two-bin shares at each budget, and the residual bin; then whether each other reader has the first
    one's counts and orderings. Structural results should hold across readers; the residual bin is
    expected to move with the reader's skill.
    """
    readers = sorted({c.reader for c in analysis.cells})
    if len(readers) < 2:
        return None
    per_reader: dict[str, Any] = {}
    for reader in readers:
        counts = {
            family: {
                "rejected": sum(t.decision in _REJECTED for t in _family(analysis.tests, family, reader)),
                "tests": len(_family(analysis.tests, family, reader)),
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


def _span(values: Sequence[float]) -> tuple[float, float] | None:
    return (min(values), max(values)) if values else None


def _reader(analysis: Analysis, reader: str, evicting: Sequence[str], idle: frozenset[int]) -> ReaderFindings:
    mine = [c for c in analysis.cells if c.reader == reader]
    loose = max(c.budget for c in mine)
    at_loose = {c.policy: c for c in mine if c.budget == loose and c.regime == "b" and not c.ranker}
    destruction = []
    for policy in evicting:
        cell = at_loose.get(policy)
        if cell is not None:
            lo = cell.two_bin_lo
            destruction.append(
                Destruction(policy, cell.two_bin_share, lo, cell.two_bin_hi, lo is not None and lo > 0.5)
            )
    distortion = []
    for policy in analysis.counts.derived:
        cells = sorted((c for c in mine if c.policy == policy and c.regime == "b"), key=lambda c: -c.budget)
        shown = []
        for cell in cells:
            fixed = cell.irr + cell.rec + cell.dis
            shown.append(Distortion(cell.budget, cell.dis, fixed, cell.dis / fixed if fixed else None, cell.destruction_share))
        if shown:
            distortion.append((policy, tuple(shown)))
    h3 = [t for t in _family(analysis.tests, "H3", reader) if t.decision != "empty"]
    pairs = [m for m in analysis.matching if m.reader == reader]
    h2 = [t for t in _family(analysis.tests, "H2", reader) if t.decision != "empty"]
    live = [t for t in h2 if t.budget not in idle]
    control = [t for t in _family(analysis.tests, POSITIVE_CONTROL, reader) if t.decision != "empty"]
    return ReaderFindings(
        reader=reader,
        loose=loose,
        destruction=tuple(destruction),
        distortion=tuple(distortion),
        h3=tuple(h3),
        h3_moved=tuple(t for t in h3 if t.decision == "reject"),
        h3_violations=sum(1 for t in h3 if t.expectation_met is False),
        pairs=len(pairs),
        matched=sum(1 for m in pairs if m.matched),
        h2=tuple(h2),
        h2_split=tuple(t for t in h2 if t.decision == "reject"),
        # None (no interval) and 0 (no spread) are no resolution
        h2_halves=_span([t.half_width for t in live if t.half_width]),
        h2_alike=sum(1 for t in live if t.half_width == 0),
        h2_idle=len(h2) - len(live),
        control=len(control),
        detected=sum(1 for t in control if t.expectation_met),
        control_idle=sum(1 for t in control if t.budget in idle),
        control_untested=sum(1 for t in control if not t.testable and t.budget not in idle),
        control_diffs=_span([t.statistic for t in control if t.statistic is not None]),
    )


def session_failures(analysis: Analysis) -> list[str]:
    """One short line, in words, per expectation the run could test and did not meet.

    An H1 cell not rejected, a positive-control contrast that is not
    significant with the control the more destructive (where the run had the
    power to show it), and an H3 construct violation (a recoverable error in
    regime (a)). Empty tests carry no expectation and are not failures. The
    grid items fail on the same lines (:func:`pytest_restore.stats.analysis.cell_verdicts`).
    """
    return _failures(analysis, families_of(analysis.settings))


def _failures(analysis: Analysis, declared: Sequence[Family]) -> list[str]:
    several = len({t.reader for t in analysis.tests}) > 1
    by_name = {family.name: family for family in declared}
    return [
        by_name[t.family].describe(t) + (f" (reader {t.reader})" if several else "")
        for t in analysis.tests
        if t.expectation_met is False and t.testable  # as Analysis.failures
    ]


def bin_cases(records: Sequence[Record]) -> list[Record]:
    """One regime-(b) record per reader, policy and bin, chosen deterministically.

    The loosest budget at which the policy has a case of that bin, then the
    smallest question id, then the smallest seed.
    """
    chosen: dict[tuple[str, str, str], Record] = {}
    for r in records:
        if r.regime != "b" or r.bin is None:
            continue
        key = (r.reader, r.policy, r.bin)
        best = chosen.get(key)
        rank = (-r.budget, r.question_id, r.seed)
        if best is None or rank < (-best.budget, best.question_id, best.seed):
            chosen[key] = r
    return [
        chosen[k]
        for k in sorted(chosen, key=lambda k: (k[0], policy_order(k[1]), BINS.index(k[2])))
    ]


def budget_list(budgets: frozenset[int]) -> str:
    """Budgets, loosest first, as the report writes them (``"2,000, 1,000"``)."""
    return ", ".join(budget_label(b) for b in sorted(budgets, reverse=True))


def untestable_lines(analysis: Analysis, idle: frozenset[int] = frozenset()) -> list[str]:
    """One line per family: the expectations this run could not test, why, and what would make them testable.

    Why, in the power rule's own figures: the least effect each test could
    detect (:class:`~pytest_restore.stats.results.PowerShortfall`) against the
    one the family is about. Tests at a budget in ``idle`` (one that binds for
    no history, :attr:`RunInfo.idle_budgets`) get a line of their own: no
    number of questions tests them, a smaller budget does.
    """
    return _untestable(analysis, families_of(analysis.settings), idle)


def _untestable(analysis: Analysis, declared: Sequence[Family], idle: frozenset[int]) -> list[str]:
    lines = []
    for family in declared:
        tests = [t for t in analysis.tests if not t.testable and t.family == family.name]  # as Analysis.untestable
        if not tests:
            continue
        total = len(_family(analysis.tests, family.name))
        stuck = [t for t in tests if t.budget in idle]
        tests = [t for t in tests if t.budget not in idle]
        if stuck:
            budgets = frozenset(t.budget for t in stuck)
            lines.append(
                f"{family.name}: {len(stuck)} of {total} tests, nor at any N: "
                f"{'budget' if len(budgets) == 1 else 'budgets'} {budget_list(budgets)} "
                f"{'binds' if len(budgets) == 1 else 'bind'} for no history, so no policy evicts and both sides "
                "of each contrast are the same store (a budget below the histories' length would test them, "
                "--restore-budgets)"
            )
        if not tests:
            continue
        needed = [
            t.shortfall.questions_needed
            for t in tests
            if t.shortfall is not None and t.shortfall.questions_needed is not None
        ]
        least = [
            t.shortfall.minimum_detectable
            for t in tests
            if t.shortfall is not None and t.shortfall.minimum_detectable is not None
        ]
        n = max(t.n_questions for t in tests)
        text = f"{family.name}: {len(tests)} of {total} tests not testable at {n} questions"
        if least:
            text += (
                f": the least {family.statistic} they could detect is {min(least):.2f} to {max(least):.2f}, "
                f"above the {family.effect:.2f} the family is about"
            )
        alike = sum(1 for t in tests if t.half_width == 0)
        if alike:
            text += f" ({alike} score every question alike on both sides: too few questions to tell)"
        if needed:
            text += (
                f"; about {max(needed)} questions would test them (raise --restore-questions, or "
                "--restore-embedded-questions for the embedded data)"
            )
        lines.append(text)
    return lines
