"""The statistics pass: records in, every cell's figures and every family's tests out.

The input is the list of per-question records described in ``docs/DESIGN.md``.
Everything is computed from them without any model call, in this order:

1. **Aggregation** (:mod:`pytest_restore.stats.engine`): records become cells
   ``(policy, budget, regime, reader)`` of per-question count vectors over one
   sorted universe of question ids.
2. **The question-cluster bootstrap** (:mod:`pytest_restore.bootstrap`): one
   resample matrix shared by every cell, so every contrast is paired by
   question; percentile intervals and smoothed p-values.
3. **Families** (:mod:`pytest_restore.stats.families`): each declared once as
   a ``Family``; their tests are built here per reader (:func:`analyse`).
4. **Holm-Bonferroni** within each family (and reader), then the power rule:
   an unmet expectation counts as a failure only where the run had the power
   to meet it (``judge_power``).

A single pytest item decides its own tests as the session does
(:func:`cell_verdicts`); :func:`bins_by_type` breaks the bins down by question
type.
"""


from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_restore.bootstrap import (
    DEFAULT_ALPHA,
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    holm,
)
from pytest_restore.record import BINS, CellKey, enters_n
from pytest_restore.stats.engine import _CORRECT, _ERR, _GOLD, _IRR, _N, _REC, _RES, Engine
from pytest_restore.stats.families import (
    POWER,
    Family,
    _decide,
    families_of,
    family_of,
    judge_power,
)
from pytest_restore.stats.results import (
    BASELINES,
    CONTROL,
    DEFAULT_CALIPER,
    DEFAULT_EQUIVALENCE_MARGIN,
    FAMILY_POLICIES,
    REFERENCE,
    CellStats,
    HypothesisTest,
    PairMatch,
    StatsSettings,
    _round,
)

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
            for family in families_of(self.settings):
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
        families = families_of(self.settings)
        return {
            "settings": self.settings.to_json(),
            # the power rule: an unmet expectation fails only where the run could have met it
            "power": {"power": POWER, "effects": {f.name: f.effect for f in families if f.effect is not None}},
            "questions": self.questions,
            "summary": self.summary(),
            "families": {
                family.name: [t.to_json() for t in self.family(family.name)]
                for family in families
                if self.family(family.name)
            },
            "matching": [m.to_json() for m in self.matching],
        }



def _apply_holm(tests: list[HypothesisTest], alpha: float, families: Sequence[Family]) -> list[HypothesisTest]:
    """Holm within each (family, reader) of a family that declares it; empty tests do not count."""
    out = list(tests)
    groups: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for i, t in enumerate(out):
        if family_of(t.family, families).holm and t.p_raw is not None and t.statistic is not None:
            groups.setdefault((t.family, t.reader), []).append((i, t.p_raw))
    for members in groups.values():
        indices = [i for i, _ in members]
        adjusted = holm([p for _, p in members])
        for i, p in zip(indices, adjusted):
            out[i] = _decide(replace(out[i], p_holm=p), p, alpha, families)
    for i, t in enumerate(out):
        if family_of(t.family, families).holm and (t.p_raw is None or t.statistic is None):
            out[i] = _decide(t, None, alpha, families)
    return out


def _family_sizes(tests: Sequence[HypothesisTest]) -> dict[tuple[str, str], int]:
    sizes: dict[tuple[str, str], int] = {}
    for t in tests:
        sizes[(t.family, t.reader)] = sizes.get((t.family, t.reader), 0) + 1
    return sizes


def _cell_figures(engine: Engine, key: CellKey) -> CellStats:
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
    families: Sequence[Family] = (),
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

    Holm is applied within each family and reader. ``families`` are the
    hypothesis families to run, in the report's order (empty: the built-ins
    above); a registered family's tests join its own.
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
        families=tuple(families),
    )
    engine = Engine(records, settings)
    cells = tuple(_cell_figures(engine, key) for key in engine.keys)

    tests: list[HypothesisTest] = []
    matching: list[PairMatch] = []
    for reader in sorted({k[3] for k in engine.keys}):
        budgets = sorted({k[1] for k in engine.keys if k[3] == reader}, reverse=True)
        for family in families_of(settings):
            tests += family.build(engine, reader, budgets)
        matching += [m for budget in budgets for m in engine.matching(budget, reader)]
    tests = _apply_holm(tests, alpha, families_of(settings))
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
    families: Sequence[Family] = (),
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
    ``families`` must be the session's too (empty: the built-ins).
    """
    options = {
        "resamples": resamples,
        "seed": seed,
        "alpha": alpha,
        "confidence": confidence,
        "family_policies": tuple(family_policies),
        "baselines": tuple(baselines),
        "control": control,
        "families": tuple(families),
    }
    settings = _settings(**options)
    engine = Engine(records, settings)
    readers = sorted({k[3] for k in engine.keys})
    if reader is None:
        if len(readers) > 1:
            raise ValueError(f"records hold several readers {readers}; pass reader=")
        if not readers:
            return []
        reader = readers[0]
    out: list[HypothesisTest] = []
    for family in families_of(settings):
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
