"""The hypothesis families, each declared once as a :class:`Family`; the built-ins are :data:`FAMILIES`.

A user adds a family by registering a :class:`Family` in a
:class:`FamilyRegistry` (the ``pytest_restore_register_families`` hook or the
``pytest_restore.families`` entry-point group); the active families travel
with the statistics settings (``StatsSettings.families``, see :func:`families_of`).

H1, H3, R1, H2, TOST and the positive control. A family builds its tests from
the engine, says what it expects and how the report shows it; an unmet
expectation counts as a failure only where the run had the power to meet it
(:func:`judge_power`).

Choices the paper leaves open:

- H1 is one-sided (share > 0). H3, H2 and the positive control are two-sided,
  as the paper's "smoothed two-sided p". The positive control's expectation
  additionally needs the control to be the *more* destructive one.
- ``expectation_met``: H1 and the positive control are expected to reject;
  H3 carries the construct check "regime (a) has no recoverable error" (its
  rejection count is a finding); R1, H2 and TOST are findings (None).
- R1 is read from its interval (lower bound > 0.5) and is not Holm-adjusted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist

import numpy as np

from pytest_restore.bootstrap import Statistic
from pytest_restore.record import CellKey
from pytest_restore.registry import Registry
from pytest_restore.stats.engine import _ERR, _N, _REC, Engine
from pytest_restore.stats.results import HypothesisTest, PowerShortfall, StatsSettings, budget_label


def _decide(
    test: HypothesisTest, p: float | None, alpha: float, families: Sequence[Family] | None = None
) -> HypothesisTest:
    """Set decision and expectation from ``p`` (raw for per-cell checks, Holm at the end)."""
    return family_of(test.family, families).decide(test, p, alpha)


def _cell_test(
    family: str,
    key: CellKey,
    stat: Statistic,
    *,
    regime: str,
    null: float,
    alternative: str,
    n_questions: int,
    settings: StatsSettings,
    expectation_met: bool | None = None,
    note: str = "",
) -> HypothesisTest:
    policy, budget, reader = key.policy, key.budget, key.reader
    lo, hi = stat.interval(settings.confidence)
    if alternative == "greater":
        p = stat.p_greater(null)
    else:
        p = stat.p_two_sided(null)
    return HypothesisTest(
        name=f"{family} {policy} {budget_label(budget)}",
        family=family,
        reader=reader,
        budget=budget,
        policy=policy,
        other=None,
        regime=regime,
        statistic=stat.point,
        ci_lo=lo,
        ci_hi=hi,
        null=null,
        alternative=alternative,
        p_raw=p,
        p_holm=None,
        decision="",
        expectation_met=expectation_met,
        n_questions=n_questions,
        undefined_resamples=stat.undefined,
        note=note,
    )


def _h1(engine: Engine, policy: str, budget: int, reader: str) -> HypothesisTest | None:
    """H1: regime-(a) two-bin share ``irr/(irr+rec) > 0`` (one-sided)."""
    key = CellKey(policy, budget, "a", reader)
    if not engine.has(key):
        return None
    return _cell_test(
        "H1",
        key,
        engine.two_bin(key),
        regime="a",
        null=0.0,
        alternative="greater",
        n_questions=engine.n_questions(key),
        settings=engine.settings,
    )


def _h3(engine: Engine, policy: str, budget: int, reader: str) -> HypothesisTest | None:
    """H3: recoverable share, regime (b) minus (a), paired by question (two-sided).

    The paper reports H3 rejections after Holm with two-sided smoothed p-values,
    so the test is two-sided. Its rejection is a finding; the expectation it
    carries is the construct: regime (a) holds no recoverable error.
    """
    key_a, key_b = CellKey(policy, budget, "a", reader), CellKey(policy, budget, "b", reader)
    if not (engine.has(key_a) and engine.has(key_b)):
        return None
    stat = engine.recoverable_share(key_b).minus(engine.recoverable_share(key_a))
    rec_a = engine.count(key_a, _REC)
    note = "" if rec_a == 0 else f"construct violation: regime (a) has {rec_a} recoverable"
    shared = int(
        np.count_nonzero(
            (engine.cells[key_a].counts[_N] > 0) | (engine.cells[key_b].counts[_N] > 0)
        )
    )
    return _cell_test(
        "H3",
        key_b,
        stat,
        regime="b-a",
        null=0.0,
        alternative="two-sided",
        n_questions=shared,
        settings=engine.settings,
        expectation_met=rec_a == 0,
        note=note,
    )


def _r1(engine: Engine, key: CellKey) -> HypothesisTest:
    """R1: regime-(b) two-bin share; "majority" where the interval's lower bound > 0.5.

    Descriptive (the paper reads it off the interval): the one-sided p for
    ``share > 0.5`` is reported, but no Holm adjustment is made.
    """
    test = _cell_test(
        "R1",
        key,
        engine.two_bin(key),
        regime="b",
        null=0.5,
        alternative="greater",
        n_questions=engine.n_questions(key),
        settings=engine.settings,
    )
    if test.statistic is None or test.ci_lo is None:
        return replace(test, decision="empty")
    return replace(test, decision="majority" if test.ci_lo > 0.5 else "not majority")


def _pair_test(
    family: str,
    first: CellKey,
    second: CellKey,
    stat: Statistic,
    n_shared: int,
    settings: StatsSettings,
) -> HypothesisTest:
    """A paired irreversible-rate contrast ``first - second`` (H2, TOST, positive control)."""
    policy, budget, regime, reader = first.policy, first.budget, first.regime, first.reader
    if family == "TOST":
        # Two one-sided tests against -margin and +margin; equivalence needs both.
        margin = settings.equivalence_margin
        lower, upper = stat.p_greater(-margin), stat.p_less(margin)
        p = None if lower is None or upper is None else max(lower, upper)
        # The interval matching a level-alpha TOST is the (1 - 2 alpha) one.
        lo, hi = stat.interval(1.0 - 2.0 * settings.alpha)
        null, alternative = margin, "equivalence"
    else:
        p = stat.p_two_sided(0.0)
        lo, hi = stat.interval(settings.confidence)
        null, alternative = 0.0, "two-sided"
    return HypothesisTest(
        name=f"{family} {policy} vs {second[0]} {budget_label(budget)}",
        family=family,
        reader=reader,
        budget=budget,
        policy=policy,
        other=second[0],
        regime=regime,
        statistic=stat.point,
        ci_lo=lo,
        ci_hi=hi,
        null=null,
        alternative=alternative,
        p_raw=p,
        p_holm=None,
        decision="",
        expectation_met=None,
        n_questions=n_shared,
        undefined_resamples=stat.undefined,
    )


def _control_keys(engine: Engine, budget: int, reader: str) -> list[tuple[CellKey, CellKey]]:
    s = engine.settings
    first = CellKey(s.control, budget, "b", reader)
    if not engine.has(first):
        return []
    return [
        (first, CellKey(base, budget, "b", reader))
        for base in s.baselines
        if engine.has(CellKey(base, budget, "b", reader))
    ]



# 6b. The families, each declared once
# --------------------------------------------------------------------------

#: The power a test must have had before its unmet expectation fails the run.
POWER = 0.8
POSITIVE_CONTROL = "positive-control"


def _same_cell(test: HypothesisTest, policy: str, budget: int) -> bool:
    return test.policy == policy and test.budget == budget


@dataclass(frozen=True)
class Family:
    """One hypothesis family: what it tests, what it expects, how the report shows it.

    To add a family, declare one and register it (the
    ``pytest_restore_register_families`` hook or the ``pytest_restore.families``
    entry-point group; a built-in one joins :data:`FAMILIES`): the analysis
    builds its tests with ``build``, Holm-adjusts them when ``holm``,
    decides each with ``expect``, judges the run's power against ``effect``,
    and the report gives it a section (``title``, ``tests``, ``statistic``)
    and its failures their words (``describe``); ``cells`` tells a grid item
    which cells' records decide it.
    """

    name: str
    title: str
    #: what is tested, in a sentence for the report
    tests: str
    #: the statistic's name in tables and failure lines
    statistic: str
    #: every test of one reader: ``build(engine, reader, budgets)``
    build: Callable[[Engine, str, Sequence[int]], list[HypothesisTest]]
    #: what must hold, in words ("" for a finding, which never fails the run)
    expectation: str = ""
    #: whether a significant test meets it (None: keep what ``build`` set, or no expectation)
    expect: Callable[[HypothesisTest, bool], bool | None] | None = None
    #: decision words for a significant and a non-significant test
    decisions: tuple[str, str] = ("reject", "retain")
    holm: bool = True
    #: the smallest effect the expectation is about; an unmet expectation fails the
    #: run only where the run could have detected it (None: always testable)
    effect: float | None = None
    #: the cells (policy, budget) whose records decide the family, given the run's budgets
    cells: Callable[[StatsSettings, Sequence[int]], list[tuple[str, int]]] = lambda _s, _b: []
    #: whether a test concerns the grid item of (policy, budget)
    involves: Callable[[HypothesisTest, str, int], bool] = _same_cell
    #: how many tests the family has in a grid of these policies and budgets (for Holm's bound)
    size: Callable[[StatsSettings, Sequence[str], Sequence[int]], int] = lambda _s, _p, _b: 0
    #: whether the report shows the family's section when the run has none of its tests
    shown_empty: bool = True

    def decide(self, test: HypothesisTest, p: float | None, alpha: float) -> HypothesisTest:
        """The decision and the expectation at ``p`` (raw in an item's check, Holm at the end)."""
        if test.statistic is None or p is None:
            return replace(test, decision="empty", expectation_met=None)
        significant = p < alpha
        met = test.expectation_met if self.expect is None else self.expect(test, significant)
        return replace(test, decision=self.decisions[0 if significant else 1], expectation_met=met)

    def describe(self, test: HypothesisTest) -> str:
        """One short line, in words, for a test whose expectation was not met."""
        where = f"{budget_label(test.budget)}"
        if test.note:  # a construct violation says what it is
            return f"{test.name}: {test.note}"
        sign = "+" if test.other is not None or test.regime == "b-a" else ""  # differences carry a sign
        value = "-" if test.statistic is None else f"{test.statistic:{sign}.2f}"
        ci = "" if test.ci_lo is None or test.ci_hi is None else f", CI {test.ci_lo:{sign}.2f} to {test.ci_hi:{sign}.2f}"
        if test.other is not None:
            what = f"{test.policy} not shown more destructive than {test.other} at {where}"
        else:
            what = f"{test.policy} at {where}: {self.expectation}"
        return f"{self.name}: {what} ({self.statistic} {value}{ci})"


def _build_h1(engine: Engine, reader: str, budgets: Sequence[int]) -> list[HypothesisTest]:
    tests = (_h1(engine, p, b, reader) for p in engine.settings.family_policies for b in budgets)
    return [t for t in tests if t is not None]


def _build_h3(engine: Engine, reader: str, budgets: Sequence[int]) -> list[HypothesisTest]:
    tests = (_h3(engine, p, b, reader) for p in engine.settings.family_policies for b in budgets)
    return [t for t in tests if t is not None]


def _build_r1(engine: Engine, reader: str, budgets: Sequence[int]) -> list[HypothesisTest]:
    return [_r1(engine, k) for k in engine.keys if k.reader == reader and k.regime == "b" and k.budget in budgets and not k.ranker]


def _pair_tests(
    engine: Engine, family: str, pairs: Sequence[tuple[CellKey, CellKey]]
) -> list[HypothesisTest]:
    stats = engine.rate_differences(pairs)
    return [_pair_test(family, a, b, stat, n, engine.settings) for (a, b), (stat, n) in zip(pairs, stats)]


def _matched_pairs(engine: Engine, reader: str, budgets: Sequence[int]) -> list[tuple[CellKey, CellKey]]:
    return [
        (CellKey(m.policy, m.budget, "b", reader), CellKey(m.other, m.budget, "b", reader))
        for budget in budgets
        for m in engine.matching(budget, reader)
        if m.matched
    ]


def _build_h2(engine: Engine, reader: str, budgets: Sequence[int]) -> list[HypothesisTest]:
    return _pair_tests(engine, "H2", _matched_pairs(engine, reader, budgets))


def _build_tost(engine: Engine, reader: str, budgets: Sequence[int]) -> list[HypothesisTest]:
    return _pair_tests(engine, "TOST", _matched_pairs(engine, reader, budgets))


def _build_control(engine: Engine, reader: str, budgets: Sequence[int]) -> list[HypothesisTest]:
    pairs = [pair for budget in budgets for pair in _control_keys(engine, budget, reader)]
    return _pair_tests(engine, POSITIVE_CONTROL, pairs)


#: The rankers family's two figures: the recoverable share of the errors, and the two-bin share.
RANKER_FIGURES: tuple[str, ...] = ("recoverable share", "two-bin share")


def _build_rankers(engine: Engine, reader: str, budgets: Sequence[int]) -> list[HypothesisTest]:
    """Per regime-(b) cell of a compared ranker: each figure minus the baseline ranker's, paired by question.

    Only a run of ``--restore-rankers`` has such cells (their keys name the
    ranker; the baseline ranker's keys do not). Both cells are resampled with
    the one matrix, so the difference is paired on the questions (two-sided).
    ``other`` names the compared ranker and ``note`` the figure.
    """
    tests: list[HypothesisTest] = []
    for key in engine.keys:
        base = CellKey(key.policy, key.budget, key.regime, key.reader)
        if not key.ranker or key.reader != reader or key.regime != "b" or key.budget not in budgets or not engine.has(base):
            continue
        stats = {
            "recoverable share": (engine.ratio(key, [_REC], [_ERR]), engine.ratio(base, [_REC], [_ERR])),
            "two-bin share": (engine.two_bin(key), engine.two_bin(base)),
        }
        shared = int(np.count_nonzero((engine.cells[key].counts[_N] > 0) & (engine.cells[base].counts[_N] > 0)))
        for figure in RANKER_FIGURES:
            mine, baseline = stats[figure]
            test = _cell_test(
                "rankers", key, mine.minus(baseline), regime="b", null=0.0, alternative="two-sided",
                n_questions=shared, settings=engine.settings, note=figure,
            )
            tests.append(replace(test, name=f"rankers {key.policy} {budget_label(key.budget)} {key.ranker} {figure}", other=key.ranker))
    return tests


#: Every family, in the order the report gives them (the paper's order of findings).
FAMILIES: tuple[Family, ...] = (
    Family(
        name="H1",
        title="H1: construct check, regime (a)",
        tests=(
            "Per evicting and control cell, the regime-(a) two-bin share irr / (irr + rec) > 0 "
            "(one-sided). Expected to reject in every cell."
        ),
        statistic="two-bin share",
        build=_build_h1,
        expectation="regime-(a) two-bin share not shown above 0",
        expect=lambda _t, significant: significant,
        cells=lambda s, budgets: [(p, b) for p in s.family_policies for b in budgets],
        size=lambda s, policies, budgets: len(set(s.family_policies) & set(policies)) * len(budgets),
    ),
    Family(
        name="H3",
        title="H3: recoverable share, regime (b) minus (a)",
        tests=(
            "Per the same cells, rec / (irr + rec) in regime (b) minus regime (a), paired by question "
            "(two-sided). The rejections are a finding; regime (a) must hold no recoverable error."
        ),
        statistic="recoverable share (b) - (a)",
        build=_build_h3,
        expectation="regime (a) holds a recoverable error",
        cells=lambda s, budgets: [(p, b) for p in s.family_policies for b in budgets],
        size=lambda s, policies, budgets: len(set(s.family_policies) & set(policies)) * len(budgets),
    ),
    Family(
        name="R1",
        title="R1: is destruction the majority? (regime b)",
        tests=(
            'Per regime-(b) cell, the two-bin share; "majority" where the interval\'s lower bound '
            "exceeds 0.5. Read from the interval, so not Holm-adjusted; p is one-sided against 0.5."
        ),
        statistic="two-bin share",
        build=_build_r1,
        holm=False,
    ),
    Family(
        name="H2",
        title="H2: irreversible rate at matched accuracy (regime b)",
        tests=(
            "Per accuracy-matched pair (see the pairs table below), the difference in irr / N, "
            "paired on the questions oracle-answerable for both (two-sided)."
        ),
        statistic="irr-rate difference",
        build=_build_h2,
    ),
    Family(
        name="TOST",
        title="Equivalence (TOST) on the matched pairs (regime b)",
        tests=(
            "Two one-sided tests that the irr / N difference of a matched pair lies within the "
            'equivalence margin; "equivalent" when Holm\'s p < alpha.'
        ),
        statistic="irr-rate difference",
        build=_build_tost,
        decisions=("equivalent", "not shown equivalent"),
    ),
    Family(
        name=POSITIVE_CONTROL,
        title="Positive control: control against each baseline (regime b)",
        tests=(
            "Per budget, irr / N of control minus each baseline (two-sided). Expected to reject with "
            "the control the more destructive: the check that the contrasts can detect a dissociation."
        ),
        statistic="irr-rate difference",
        build=_build_control,
        expectation="the control significantly more destructive",
        expect=lambda t, significant: significant and (t.statistic or 0.0) > 0,
        # the control is built to evict gold far more often than any baseline: a gap of
        # 15 points of irr / N is the least it is meant to show
        effect=0.15,
        cells=lambda s, budgets: [(p, b) for p in (s.control, *s.baselines) for b in budgets],
        size=lambda s, policies, budgets: (
            (s.control in policies) * len(set(s.baselines) & set(policies)) * len(budgets)
        ),
    ),
    Family(
        name="rankers",
        title="Rankers compared: recoverable and two-bin shares against the baseline ranker (regime b)",
        tests=(
            "Only with --restore-rankers. Per policy x budget and compared ranker, the recoverable share "
            "rec / err and the two-bin share irr / (irr + rec) minus the baseline ranker's (bm25-lite when "
            "compared), paired by question: the same questions and stores, only the retriever differs "
            "(two-sided). A finding: what a different retriever wins back."
        ),
        statistic="difference from the baseline ranker",
        build=_build_rankers,
        shown_empty=False,  # a run of one ranker has nothing to compare
    ),
)


class FamilyRegistry(Registry[Family]):
    """The hypothesis families of a run, by name, in the report's order (built-ins first)."""

    kind = "hypothesis family"
    item_type = Family
    entry_point_group = "pytest_restore.families"


def default_families() -> FamilyRegistry:
    """The built-in families, then every one the ``pytest_restore.families`` entry points declare."""
    registry = FamilyRegistry()
    for family in FAMILIES:  # declarations, not classes: registered as they are
        registry.register(family)
    registry.load_entry_points()
    return registry


def families_of(settings: StatsSettings | None) -> tuple[Family, ...]:
    """The families a statistics pass runs: the settings' own, else the built-ins."""
    families: tuple[Family, ...] = () if settings is None else settings.families
    return families or FAMILIES


def family_of(name: str, families: Sequence[Family] | None = None) -> Family:
    """The declaration of a family by name, among ``families`` (the built-ins by default)."""
    for family in families or FAMILIES:
        if family.name == name:
            return family
    raise KeyError(f"unknown hypothesis family {name!r}")


def minimum_detectable(
    test: HypothesisTest, tests_in_family: int, settings: StatsSettings, effect: float
) -> float | None:
    """The smallest effect ``test`` could detect with :data:`POWER` at Holm's strictest level.

    ``(z_alpha + z_power) * se`` with ``alpha / m``. The standard error is the
    bootstrap interval's (normal approximation), but never below what a true
    difference of ``effect`` would give on the test's questions:
    ``sqrt(effect * (1 - effect) / n)``, the least spread of per-question
    differences in {-1, 0, 1} with that mean. Without that floor a handful of
    questions that happen to agree would look infinitely precise. None when
    the test has no interval.
    """
    half = test.half_width
    if half is None or test.n_questions < 1:
        return None
    normal = NormalDist()
    se = half / normal.inv_cdf(1.0 - (1.0 - settings.confidence) / 2.0)
    se = max(se, math.sqrt(effect * (1.0 - effect) / test.n_questions))
    level = settings.alpha / max(1, tests_in_family)
    z_alpha = normal.inv_cdf(1.0 - level if test.alternative == "greater" else 1.0 - level / 2.0)
    return (z_alpha + normal.inv_cdf(POWER)) * se


def judge_power(
    tests: Sequence[HypothesisTest], sizes: Mapping[tuple[str, str], int], settings: StatsSettings
) -> list[HypothesisTest]:
    """Mark unmet expectations the run could not have met as not testable, with why and what would do.

    ``sizes`` is the number of tests per (family, reader): Holm's strictest level
    is ``alpha`` over it. Only families that declare an ``effect`` are judged.
    """
    out = []
    for t in tests:
        family = family_of(t.family, families_of(settings))
        if t.expectation_met is not False or family.effect is None:
            out.append(t)
            continue
        m = sizes.get((t.family, t.reader), 1)
        mde = minimum_detectable(t, m, settings, family.effect)
        if mde is not None and mde <= family.effect:
            out.append(t)
            continue
        shortfall = PowerShortfall(
            n_questions=t.n_questions,
            half_width=t.half_width,
            confidence=settings.confidence,
            power=POWER,
            holm_size=m,
            statistic=family.statistic,
            effect=family.effect,
            minimum_detectable=mde,
            questions_needed=None if mde is None else math.ceil(t.n_questions * (mde / family.effect) ** 2),
        )
        out.append(replace(t, testable=False, shortfall=shortfall))
    return out
