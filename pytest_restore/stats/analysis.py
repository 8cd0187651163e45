"""The statistics pass: records in, every cell's figures and every family's tests out.

The input is the list of per-question records described in ``docs/DESIGN.md``.
Everything is computed from them without any model call, in this order:

1. **Counting** (:func:`count`, on :mod:`pytest_restore.stats.tally`): every
   record counted once into its cell (:class:`~pytest_restore.record.CellKey`)
   and its (reader, regime, question type), per question over one sorted
   universe of question ids; also the exclusions by reason.
2. **The question-cluster bootstrap** (:mod:`pytest_restore.bootstrap`): one
   resample matrix shared by every cell, so every contrast is paired by
   question; percentile intervals and smoothed p-values.
3. **Families** (:mod:`pytest_restore.stats.families`): each declared once as
   a ``Family``; their tests are built here per reader (:func:`analyse`).
4. **Holm-Bonferroni** within each family (and reader), then the power rule:
   an unmet expectation counts as a failure only where the run had the power
   to meet it (``judge_power``).

The :class:`Analysis` is the only source of a report's figures, orders and
decisions: every renderer, the terminal table, ``summary.json``'s counts, the
snapshot fixture and ``compare`` read it and count nothing themselves. A
single pytest item builds the Analysis of its own records and decides its
tests as the session does (:func:`cell_verdicts`).
"""


from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pytest_restore.bootstrap import (
    DEFAULT_ALPHA,
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    holm,
)
from pytest_restore.record import BINS, REGIMES, CellKey, Record, baseline_ranker, ranker_of
from pytest_restore.stats import ablations
from pytest_restore.stats.answers import AnswerFigures, answer_figures, answers_by_type
from pytest_restore.stats.engine import _CORRECT, _DIS, _ERR, _IRR, _N, _REC, Engine
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
    FamilySummary,
    HypothesisTest,
    PairMatch,
    StatsSettings,
    Totals,
    _round,
    cell_order,
    policy_order,
)
from pytest_restore.stats.retrieval import retrieval_figures
from pytest_restore.stats.tally import N_ROW, CellTally, tally_by
from pytest_restore.stats.ties import ScoreDistribution, ScoreTies, score_distributions, score_ties

#: Decisions that count as a rejection of the family's null.
_REJECTIONS = frozenset({"reject", "equivalent", "majority"})


#: What bins by type are grouped by: reader, regime, question type.
TypeKey = tuple[str, str, str]


@dataclass(frozen=True)
class Counts:
    """The counting stage: every record counted once, into its cell and its question type.

    ``cells`` are in the one cell order (:func:`~pytest_restore.stats.results.cell_order`);
    ``by_type`` pools policies, budgets and seeds per (reader, regime, question type).
    Both share the column universe ``question_ids``.
    """

    question_ids: tuple[str, ...]
    cells: Mapping[CellKey, CellTally]
    by_type: Mapping[TypeKey, CellTally]
    #: when the records compare rankers: the baseline ranker (``cells`` are its), and the other
    #: rankers' cells (keys name their ranker), counted over the same questions
    baseline_ranker: str | None = None
    ranked: Mapping[CellKey, CellTally] = field(default_factory=dict)
    #: the ranker ``cells`` were read with: the baseline of several, else the records' one ranker
    ranker: str = ""
    #: the policies whose stores hold derived memories (records with ``memories``), in the policy order
    derived: tuple[str, ...] = ()

    @property
    def records(self) -> int:
        """Every record counted."""
        return sum(t.records for t in self.cells.values())

    @property
    def excluded(self) -> int:
        """Records excluded (failed model calls), over every cell."""
        return sum(t.excluded for t in self.cells.values())

    def exclusions(self) -> dict[str, int]:
        """Excluded records by reason, over every cell, reasons sorted."""
        out: dict[str, int] = {}
        for t in self.cells.values():
            for reason, n in t.exclusions.items():
                out[reason] = out.get(reason, 0) + n
        return dict(sorted(out.items()))

    def answerable(self) -> int:
        """Questions that enter N in some cell (oracle-answerable, not excluded)."""
        if not self.cells:
            return 0
        return int(np.count_nonzero(sum(t.counts[N_ROW] for t in self.cells.values())))

    def bins(self) -> dict[str, int]:
        """Records per bin, over every cell."""
        totals = {"irreversible": 0, "recoverable": 0, "distorted": 0, "residual": 0}
        for t in self.cells.values():
            totals["irreversible"] += t.irr
            totals["recoverable"] += t.rec
            totals["distorted"] += t.dis
            totals["residual"] += t.res
        return {b: totals[b] for b in BINS}

    def totals(self) -> Totals:
        """The records in totals, over every cell (``summary.json``'s ``counts``)."""
        return Totals(
            records=self.records,
            cells=len(self.cells),
            questions=len(self.question_ids),
            excluded_records=self.excluded,
            bins=self.bins(),
        )


def count(records: Sequence[Record]) -> Counts:
    """Count the records: per cell and per (reader, regime, question type), one universe of questions."""
    universe = sorted({r.question_id for r in records})
    baseline = baseline_ranker(records)
    if baseline is not None:  # every figure but the rankers' comparison is the baseline ranker's
        others = [r for r in records if ranker_of(r) != baseline]
        records = [r for r in records if ranker_of(r) == baseline]
    cells = tally_by(records, CellKey.of, universe)
    by_type = tally_by(records, lambda r: (r.reader, r.regime, r.question_type), universe)
    ranked = tally_by(others, lambda r: CellKey.of(r, baseline), universe) if baseline is not None else {}
    return Counts(
        question_ids=tuple(universe),
        cells={k: cells[k] for k in sorted(cells, key=cell_order)},
        by_type={k: by_type[k] for k in sorted(by_type)},
        baseline_ranker=baseline,
        ranked={k: ranked[k] for k in sorted(ranked, key=cell_order)},
        ranker=baseline or (ranker_of(records[0]) if records else ""),
        derived=tuple(sorted({r.policy for r in records if r.memories is not None}, key=policy_order)),
    )


def construct_failures(
    records: Sequence[Record], policy: str, budget: int, reader: str, *, reference: str = REFERENCE
) -> list[str]:
    """The count-level construct checks of one grid item (PROTOCOL section 5), one line each, from its
    records' counts alone: what :meth:`Analysis.construct_failures` finds, without resampling.

    The bins add up to the errors, the forced-gold regime has no recoverable
    error and ``reference`` (``no-evict``) no irreversible one. An item that
    decides no family expectation (``--restore-family-checks report``) needs
    nothing more of the statistics.
    """
    return _construct_failures(count(records).cells, policy, budget, reader, reference)


def _construct_failures(
    cells: Mapping[CellKey, CellTally], policy: str, budget: int, reader: str, reference: str
) -> list[str]:
    failures = []
    for regime in REGIMES:
        cell = cells.get(CellKey(policy, budget, regime, reader))
        if cell is None:
            continue
        label = f"{policy} @ {budget} regime ({regime})"
        if cell.irr + cell.rec + cell.dis + cell.res != cell.err:
            failures.append(
                f"{label}: irr {cell.irr} + rec {cell.rec} + dis {cell.dis} + res {cell.res} != err {cell.err}"
            )
        if regime == "a" and cell.rec:
            failures.append(f"{label}: forced-gold regime has {cell.rec} recoverable errors (must be 0)")
        if policy == reference and cell.irr:
            failures.append(f"{label}: {policy} has {cell.irr} irreversible errors (must be 0)")
    return failures


@dataclass(frozen=True)
class TypeBins:
    """The bins of one (reader, regime, question type), every policy, budget and seed pooled."""

    reader: str
    regime: str
    question_type: str
    N: int
    err: int
    irr: int
    rec: int
    res: int
    irr_share: float | None
    rec_share: float | None
    res_share: float | None
    two_bin_share: float | None
    dis: int = 0
    dis_share: float | None = None


def _type_bins(key: TypeKey, tally: CellTally) -> TypeBins:
    reader, regime, question_type = key
    return TypeBins(
        reader,
        regime,
        question_type,
        N=tally.N,
        err=tally.err,
        irr=tally.irr,
        rec=tally.rec,
        res=tally.res,
        irr_share=_round(tally.share("irreversible")),
        rec_share=_round(tally.share("recoverable")),
        res_share=_round(tally.share("residual")),
        two_bin_share=_round(tally.two_bin_share),
        dis=tally.dis,
        dis_share=_round(tally.share("distorted")),
    )


@dataclass(frozen=True)
class Analysis:
    """The whole statistics pass: the counts, per-cell figures, every test, the H2 matching table.

    ``cells`` are in the one cell order; ``by_type`` holds the bins by question
    type (types with a record entering N). ``raw_tests`` are the tests as their
    families built them, before Holm and the power rule (what a grid item decides from).
    """

    settings: StatsSettings
    questions: int
    cells: tuple[CellStats, ...]
    tests: tuple[HypothesisTest, ...]
    matching: tuple[PairMatch, ...]
    counts: Counts
    by_type: tuple[TypeBins, ...]
    raw_tests: tuple[HypothesisTest, ...]
    #: the restore-tightness ablations, pooled per reader (empty when none ran) and per cell
    ablations: tuple[ablations.AblationRow, ...] = ()
    ablation_cells: tuple[dict[str, Any], ...] = ()
    #: when the records compare rankers (``--restore-rankers``): the other rankers' cells (``cells``
    #: are the baseline ranker's), the baseline's name, and each regime-(b) cell's recoverable share
    ranker_cells: tuple[CellStats, ...] = ()
    baseline_ranker: str | None = None
    recoverable: tuple[RecoverableShare, ...] = ()
    #: each regime-(b) cell's distortion share ``dis / (irr + rec + dis)`` with its interval (the baseline ranker's
    #: cells; the memory libraries' side-by-side table reads it)
    distortion: tuple[ShareInterval, ...] = ()
    #: each importance policy's score distribution over its questions' units, and whether its decisions are mostly ties
    importance: tuple[ScoreDistribution, ...] = ()
    #: each other policy deciding by its own per-unit score: how many units share their history's two top scores
    ties: tuple[ScoreTies, ...] = ()
    #: LoCoMo's answer metrics per (reader, question type), regime b pooled (the baseline ranker's records)
    answers_by_type: tuple[tuple[tuple[str, str], AnswerFigures], ...] = ()

    @property
    def readers(self) -> list[str]:
        """The readers of the records, sorted."""
        return sorted({c.reader for c in self.cells})

    def construct_failures(self, policy: str, budget: int, reader: str) -> list[str]:
        """The count-level construct checks of one grid item (PROTOCOL section 5), one line each
        (:func:`construct_failures`, on this pass's counts and with its reference policy)."""
        return _construct_failures(self.counts.cells, policy, budget, reader, self.settings.reference)

    def cell(self, policy: str, budget: int, regime: str, reader: str) -> CellStats | None:
        """One cell's figures, or None when the records hold no such cell."""
        for cell in self.cells:
            if cell.key == CellKey(policy, budget, regime, reader):
                return cell
        return None

    def family(self, name: str, reader: str | None = None) -> list[HypothesisTest]:
        """The tests of one family (optionally of one reader), in report order."""
        return [
            t for t in self.tests if t.family == name and (reader is None or t.reader == reader)
        ]

    def summary(self, families: Sequence[Family] | None = None) -> list[FamilySummary]:
        """Per family and reader: tests, rejections after Holm, unmet expectations, untestable ones
        (``families``: the pass's, :func:`families_of` of its settings, when the caller has them)."""
        declared = families_of(self.settings) if families is None else families
        rows = []
        for reader in sorted({t.reader for t in self.tests}):
            for family in declared:
                tests = self.family(family.name, reader)
                if not tests:
                    continue
                rows.append(
                    FamilySummary(
                        family=family.name,
                        reader=reader,
                        tests=len(tests),
                        empty=sum(t.decision == "empty" for t in tests),
                        rejected=sum(t.decision in _REJECTIONS for t in tests),
                        expectation_unmet=sum(t.expectation_met is False and t.testable for t in tests),
                        not_testable=sum(not t.testable for t in tests),
                    )
                )
        return rows

    def failures(self) -> list[HypothesisTest]:
        """The tests whose expectation the run could test and did not meet: each fails the session."""
        return [t for t in self.tests if t.expectation_met is False and t.testable]

    def untestable(self) -> list[HypothesisTest]:
        """The tests whose expectation was not met but which this run had no power to meet."""
        return [t for t in self.tests if not t.testable]

    def to_json(self, families: Sequence[Family] | None = None) -> dict[str, Any]:
        """Deterministic JSON-able dict for ``hypotheses.json`` (the ablations apart: :meth:`ablations_json`;
        ``families``: as :meth:`summary`)."""
        families = families_of(self.settings) if families is None else families
        return {
            "settings": self.settings.to_json(),
            # the power rule: an unmet expectation fails only where the run could have met it
            "power": {"power": POWER, "effects": {f.name: f.effect for f in families if f.effect is not None}},
            "questions": self.questions,
            "summary": [row.to_json() for row in self.summary(families)],
            "families": {
                family.name: [t.to_json() for t in self.family(family.name)]
                for family in families
                if self.family(family.name)
            },
            "matching": [m.to_json() for m in self.matching],
        }

    def ablations_json(self) -> dict[str, Any]:
        """The ablations section of ``hypotheses.json`` (empty lists when none ran)."""
        return ablations.to_json(self.ablations, self.ablation_cells)



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


@dataclass(frozen=True)
class ShareInterval:
    """A share of a cell's errors with its question-cluster bootstrap interval (the run's resamples)."""

    key: CellKey
    share: float | None
    lo: float | None
    hi: float | None


#: The recoverable share of a cell's errors (``rec / err``) with its interval.
RecoverableShare = ShareInterval


def _share_interval(engine: Engine, key: CellKey, num: Sequence[int], den: Sequence[int]) -> ShareInterval:
    stat = engine.ratio(key, num, den)
    lo, hi = stat.interval(engine.settings.confidence)
    return ShareInterval(key, _round(stat.point), _round(lo), _round(hi))


def _recoverable(engine: Engine, key: CellKey) -> RecoverableShare:
    return _share_interval(engine, key, [_REC], [_ERR])


def _distortion(engine: Engine, key: CellKey) -> ShareInterval:
    """``dis / (irr + rec + dis)``: the distorted errors among those a restore fixes or a memory kept a trace of."""
    return _share_interval(engine, key, [_DIS], [_IRR, _REC, _DIS])


def _cell_figures(engine: Engine, key: CellKey, cell: CellTally) -> CellStats:
    confidence = engine.settings.confidence
    two_bin = engine.two_bin(key)
    irr_rate = engine.ratio(key, [_IRR], [_N])
    accuracy = engine.ratio(key, [_CORRECT], [_N])
    return CellStats(
        reader=key.reader,
        policy=key.policy,
        budget=key.budget,
        regime=key.regime,
        seeds=tuple(sorted(cell.seeds)),
        records=cell.records,
        excluded=cell.excluded,
        not_answerable=cell.not_answerable,
        negative_restore_gain=cell.negative_restore_gain,
        N=cell.N,
        err=cell.err,
        irr=cell.irr,
        rec=cell.rec,
        res=cell.res,
        correct=cell.correct,
        gold_evicted=cell.gold_evicted,
        two_bin_share=two_bin.point,
        two_bin_lo=two_bin.interval(confidence)[0],
        two_bin_hi=two_bin.interval(confidence)[1],
        irr_share=cell.share("irreversible"),
        rec_share=cell.share("recoverable"),
        res_share=cell.share("residual"),
        irr_rate=irr_rate.point,
        irr_rate_lo=irr_rate.interval(confidence)[0],
        irr_rate_hi=irr_rate.interval(confidence)[1],
        accuracy=accuracy.point,
        accuracy_lo=accuracy.interval(confidence)[0],
        accuracy_hi=accuracy.interval(confidence)[1],
        gold_evicted_rate=cell.gold_evicted_rate,
        two_bin_undefined=two_bin.undefined,
        ranker=key.ranker,
        dis=cell.dis,
        dis_share=cell.share("distorted"),
        destruction_share=cell.destruction_share,
    )


def _settings(**kwargs: Any) -> StatsSettings:
    settings = StatsSettings(**kwargs)
    if not 0.0 < settings.alpha < 0.5 or not 0.0 < settings.confidence < 1.0:
        raise ValueError("alpha must be in (0, 0.5) and confidence in (0, 1)")
    if settings.caliper < 0 or settings.equivalence_margin <= 0:
        raise ValueError("caliper must be >= 0 and equivalence_margin > 0")
    return settings


def analyse(
    records: Sequence[Record],
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
    counts = count(records)
    engine = Engine({**counts.cells, **counts.ranked}, counts.question_ids, settings)
    keyed = [(CellKey.of(r, counts.baseline_ranker), r) for r in records]
    answers = answer_figures(keyed)
    typed_answers = answers_by_type(r for key, r in keyed if not key.ranker)
    found = retrieval_figures(keyed, counts.question_ids, engine.resampler, confidence)
    importance, ties = score_distributions(records), score_ties(records)
    ablation_cells = ablations.by_cell(records)
    ablation_rows = ablations.summarise(records, resamples=resamples, seed=seed, confidence=confidence)
    cells = tuple(
        replace(_cell_figures(engine, key, tally), answers=answers.get(key), retrieval=found.get(key))
        for key, tally in counts.cells.items()
    )
    ranked = tuple(
        replace(_cell_figures(engine, key, tally), answers=answers.get(key), retrieval=found.get(key))
        for key, tally in counts.ranked.items()
    )

    raw: list[HypothesisTest] = []
    matching: list[PairMatch] = []
    for reader in sorted({k.reader for k in counts.cells}):
        budgets = sorted({k.budget for k in counts.cells if k.reader == reader}, reverse=True)
        for family in families_of(settings):
            raw += family.build(engine, reader, budgets)
        matching += [m for budget in budgets for m in engine.matching(budget, reader)]
    tests = _apply_holm(raw, alpha, families_of(settings))
    return Analysis(
        settings=settings,
        questions=len(counts.question_ids),
        cells=cells,
        tests=tuple(judge_power(tests, _family_sizes(tests), settings)),
        matching=tuple(matching),
        counts=counts,
        by_type=tuple(_type_bins(k, t) for k, t in counts.by_type.items() if t.N),
        raw_tests=tuple(raw),
        ablations=tuple(ablation_rows),
        ablation_cells=tuple(ablation_cells),
        ranker_cells=ranked,
        baseline_ranker=counts.baseline_ranker,
        recoverable=tuple(_recoverable(engine, key) for key in [*counts.cells, *counts.ranked] if key.regime == "b"),
        distortion=tuple(_distortion(engine, key) for key in counts.cells if key.regime == "b"),
        answers_by_type=tuple(typed_answers.items()),
        importance=tuple(importance),
        ties=tuple(ties),
    )


def cell_verdicts(
    analysis: Analysis,
    policy: str,
    budget: int,
    *,
    budgets: Sequence[int],
    family_sizes: Mapping[str, int],
    fetch: Callable[[Sequence[tuple[str, int]]], Sequence[Record]] | None = None,
    reader: str | None = None,
) -> list[HypothesisTest]:
    """The expectations one grid item of (policy, budget) checks, decided as the session decides them.

    ``analysis`` is the :func:`analyse` of the item's records (the cell's,
    and for the control the baselines' at ``budget``), with the session's
    settings; ``family_sizes`` is the number of tests each family has in the
    whole grid (``budgets`` are the grid's). A test is decided from its raw
    p where Holm cannot change the outcome (``p >= alpha``: not significant;
    ``m * p < alpha``: significant); otherwise ``fetch`` gives the records of
    the whole family and the session's own analysis decides it. The power
    rule (:func:`judge_power`) is the session's too. With the same records,
    seed and resamples the question universe, hence the resamples and the
    intervals, are the session's, so items and session fail the same tests.
    """
    settings = analysis.settings
    readers = analysis.readers
    if reader is None:
        if len(readers) > 1:
            raise ValueError(f"records hold several readers {readers}; pass reader=")
        if not readers:
            return []
        reader = readers[0]
    alpha = settings.alpha
    out: list[HypothesisTest] = []
    for family in families_of(settings):
        if not family.expectation:
            continue
        m = family_sizes.get(family.name, 1)
        for test in analysis.raw_tests:
            if test.family != family.name or test.reader != reader or test.budget != budget:
                continue
            if not family.involves(test, policy, budget):
                continue
            p = test.p_raw
            if not family.holm or p is None or p >= alpha or m * p < alpha or fetch is None:
                decided = family.decide(test, p, alpha)
            else:  # Holm could go either way: decide it with the whole family, as the session does
                whole = analyse(fetch(family.cells(settings, budgets)), **_options(settings))
                decided = next(t for t in whole.tests if (t.name, t.reader) == (test.name, test.reader))
            out += judge_power([decided], {(family.name, reader): m}, settings)
    return out


def _options(settings: StatsSettings) -> dict[str, Any]:
    """:func:`analyse`'s keyword arguments that reproduce ``settings``."""
    return {
        "resamples": settings.resamples,
        "seed": settings.seed,
        "alpha": settings.alpha,
        "confidence": settings.confidence,
        "caliper": settings.caliper,
        "equivalence_margin": settings.equivalence_margin,
        "family_policies": settings.family_policies,
        "baselines": settings.baselines,
        "control": settings.control,
        "reference": settings.reference,
        "families": settings.families,
    }
