"""Tests of the statistics: bootstrap, Holm, hypothesis families, figure."""

from __future__ import annotations

import gc
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from grid_helpers import RECORD_DEFAULTS, flat_record

from pytest_restore.bootstrap import Resampler, holm, smoothed_p, two_sided_p
from pytest_restore.record import Record, RecordError
from pytest_restore.records_file import from_v1
from pytest_restore.report.figure import write_figure
from pytest_restore.stats.analysis import (
    Analysis,
    analyse,
    cell_verdicts,
    construct_failures,
)
from pytest_restore.stats.engine import Engine
from pytest_restore.stats.families import (
    FAMILIES,
    POSITIVE_CONTROL,
    Family,
    family_of,
    minimum_detectable,
)
from pytest_restore.stats.findings import findings
from pytest_restore.stats.results import CELL_COLUMNS, INTERVAL_COLUMNS, CellStats, HypothesisTest
from pytest_restore.stats.tally import IRR_ROW, N_ROW


def record(
    qid: str,
    policy: str = "fifo",
    budget: int = 80_000,
    regime: str = "b",
    *,
    bin: str | None = None,
    correct: bool | None = None,
    oracle: bool = True,
    seed: int = 0,
    reader: str = "reader",
    qtype: str = "single-session-user",
    excluded: str | None = None,
) -> Record:
    """One per-question record; ``bin`` implies a policy error, else correct."""
    if correct is None:
        correct = bin is None
    return flat_record(
        question_id=qid,
        question_type=qtype,
        policy=policy,
        budget=budget,
        seed=seed,
        regime=regime,
        reader=reader,
        oracle_correct=oracle,
        policy_correct=correct,
        restored_correct=bin in ("irreversible", "recoverable"),
        gold_evicted=int(bin == "irreversible"),
        bin=bin,
        excluded=excluded,
    )


def cell(
    policy: str,
    n: int,
    irr: int,
    rec: int,
    res: int,
    *,
    budget: int = 80_000,
    regime: str = "b",
    total: int | None = None,
    shuffle: int = 7,
) -> list[Record]:
    """A cell with these counts: one record per question, at most one error each.

    Questions ``q000 ...`` up to ``total`` exist; the first ``n`` are
    oracle-answerable. Outcomes are spread over them by a seeded permutation.
    """
    total = n if total is None else total
    binned = ["irreversible"] * irr + ["recoverable"] * rec + ["residual"] * res
    kinds: list[str | None] = [*binned, *[None] * (n - len(binned))]
    order = np.random.default_rng(shuffle).permutation(n)
    out = []
    for i in range(total):
        if i < n:
            out.append(record(f"q{i:03d}", policy, budget, regime, bin=kinds[int(order[i])]))
        else:
            out.append(record(f"q{i:03d}", policy, budget, regime, oracle=False, correct=False))
    return out


def get_cell(analysis: Analysis, policy: str, regime: str = "b", budget: int = 80_000) -> CellStats:
    (found,) = [
        c for c in analysis.cells if (c.policy, c.regime, c.budget) == (policy, regime, budget)
    ]
    return found


# -- Holm --------------------------------------------------------------------


@pytest.mark.parametrize("m", [1, 2, 5, 12, 40])
def test_holm_matches_statsmodels(m: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # scipy and statsmodels are imported by the tests that compare with them, not at collection, where every
    # xdist worker paid for them (with test_judge_audit's, ~1 CPU s a worker)
    from statsmodels.stats.multitest import multipletests  # type: ignore[import-untyped]

    # multipletests runs a full garbage collection on every call: ~0.2 s in a test process's heap
    monkeypatch.setattr(gc, "collect", lambda generation=2: 0)
    rng = np.random.default_rng(m)
    for _ in range(8):
        p = rng.uniform(0, 0.2, size=m) ** rng.uniform(0.5, 3)
        if m > 2:
            p[1] = p[0]  # ties
            p[-1] = 1.0
        expected = multipletests(p, method="holm")[1]
        np.testing.assert_allclose(holm(list(p)), expected, rtol=0, atol=1e-12)


def test_holm_monotone_and_capped() -> None:
    rng = np.random.default_rng(3)
    p = list(rng.uniform(0, 1, size=30))
    adjusted = holm(p)
    order = np.argsort(p, kind="stable")
    sorted_adjusted = [adjusted[i] for i in order]
    assert sorted_adjusted == sorted(sorted_adjusted)  # monotone in the raw p
    assert all(a >= r for a, r in zip(adjusted, p))
    assert max(adjusted) <= 1.0
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([]) == []


# -- the bootstrap against scipy --------------------------------------------


def accuracy_records(n: int, seed: int) -> tuple[list[Record], np.ndarray]:
    """One cell of ``n`` oracle-answerable questions and its accuracy vector (sorted ids)."""
    correct = np.random.default_rng(seed).random(n) < 0.6
    records = [
        record(f"q{i:03d}", correct=bool(c), bin=None if c else "residual")
        for i, c in enumerate(correct)
    ]
    return records, correct.astype(float)


def test_percentile_interval_equals_scipy_with_same_indices() -> None:
    from scipy import stats as scipy_stats  # type: ignore[import-untyped]  # here: see the Holm test

    # Resampler.draw makes the very call scipy.stats.bootstrap makes, so with
    # the same seed both see the same resamples and the intervals agree exactly.
    records, x = accuracy_records(120, seed=1)
    analysis = analyse(records, resamples=3000, seed=11)
    ours = get_cell(analysis, "fifo")
    theirs = scipy_stats.bootstrap(
        (x,),
        np.mean,
        n_resamples=3000,
        method="percentile",
        vectorized=True,
        rng=np.random.default_rng(11),
    ).confidence_interval
    assert ours.accuracy_lo == pytest.approx(theirs.low, abs=1e-12)
    assert ours.accuracy_hi == pytest.approx(theirs.high, abs=1e-12)


def test_resample_matrix_from_indices() -> None:
    indices = np.array([[0, 0, 2], [1, 2, 2]])
    w = Resampler.from_indices(["a", "b", "c"], indices)
    np.testing.assert_array_equal(w.weights, [[2, 0, 1], [0, 1, 2]])
    np.testing.assert_array_equal(w.totals(np.array([1.0, 10.0, 100.0])), [102.0, 210.0])
    # Every row of a drawn matrix is a resample of Q questions.
    drawn = Resampler.draw(["a", "b", "c", "d"], 50, seed=0)
    np.testing.assert_array_equal(drawn.weights.sum(axis=1), np.full(50, 4.0))


def test_percentile_interval_close_to_scipy_with_other_resamples() -> None:
    from scipy import stats as scipy_stats  # type: ignore[import-untyped]  # here: see the Holm test

    records, x = accuracy_records(300, seed=2)
    ours = get_cell(analyse(records, resamples=10_000, seed=5), "fifo")
    theirs = scipy_stats.bootstrap(
        (x,), np.mean, n_resamples=10_000, method="percentile", rng=np.random.default_rng(99)
    ).confidence_interval
    # Monte Carlo error of a 2.5% quantile with 10,000 resamples is ~0.002 here.
    assert abs(ours.accuracy_lo - theirs.low) < 0.01
    assert abs(ours.accuracy_hi - theirs.high) < 0.01


# -- the paper's Table 1 -------------------------------------------------------


def table1_records() -> list[Record]:
    return cell("fifo", 336, 55, 22, 47, total=470) + cell(
        "llm-importance", 332, 34, 23, 45, total=470
    )


def test_table1_intervals_reproduced() -> None:
    analysis = analyse(table1_records())
    fifo, llm = get_cell(analysis, "fifo"), get_cell(analysis, "llm-importance")
    assert (fifo.N, fifo.err, fifo.irr, fifo.rec, fifo.res) == (336, 124, 55, 22, 47)
    assert (llm.N, llm.err, llm.irr, llm.rec, llm.res) == (332, 102, 34, 23, 45)
    assert round(fifo.two_bin_share or 0, 2) == 0.71
    assert round(llm.two_bin_share or 0, 2) == 0.60
    for figures, (lo, hi) in ((fifo, (0.61, 0.81)), (llm, (0.47, 0.72))):
        assert figures.two_bin_lo is not None and figures.two_bin_hi is not None
        assert abs(figures.two_bin_lo - lo) <= 0.01
        assert abs(figures.two_bin_hi - hi) <= 0.01


# -- p-values --------------------------------------------------------------------


def test_smoothed_and_two_sided_formulas() -> None:
    assert smoothed_p(0, 10_000) == 1 / 10_001
    assert smoothed_p(10_000, 10_000) == 1.0
    assert two_sided_p(0.01, 0.995) == 0.02
    assert two_sided_p(0.7, 0.6) == 1.0


def test_h1_p_value_is_smoothed_over_defined_resamples() -> None:
    # Regime (a): irreversible errors only, so every defined resample has share 1
    # and the p-value is 1/(R'+1); with few errors some resamples draw none (0/0).
    records = cell("fifo", 20, 1, 0, 0, regime="a")
    (h1,) = [t for t in analyse(records, resamples=2000).tests if t.family == "H1"]
    assert h1.statistic == 1.0
    assert h1.undefined_resamples > 0
    assert h1.p_raw == pytest.approx(1 / (2000 - h1.undefined_resamples + 1))


def test_h3_is_a_joint_paired_resample() -> None:
    records = cell("fifo", 200, 30, 0, 10, regime="a") + cell("fifo", 200, 25, 12, 8, regime="b")
    analysis = analyse(records, resamples=4000, seed=3)
    (h3,) = analysis.family("H3")
    # Recompute by hand with the same resample matrix: rec/(irr+rec), b minus a.
    ids = sorted({r.question_id for r in records})
    w = Resampler.draw(ids, 4000, seed=3)

    def share(regime: str, binned: str) -> np.ndarray:
        col = {q: i for i, q in enumerate(ids)}
        v = {k: np.zeros(len(ids)) for k in ("irreversible", "recoverable")}
        for r in records:
            if r.regime == regime and r.bin in v:
                v[r.bin][col[r.question_id]] += 1
        num, den = w.totals(v[binned]), w.totals(v["irreversible"] + v["recoverable"])
        return num / den

    delta = share("b", "recoverable") - share("a", "recoverable")
    assert h3.statistic == pytest.approx(12 / 37)
    assert (h3.ci_lo, h3.ci_hi) == pytest.approx(tuple(np.quantile(delta, [0.025, 0.975])))
    p_greater = (1 + np.sum(delta <= 0)) / 4001
    p_less = (1 + np.sum(delta >= 0)) / 4001
    assert h3.p_raw == pytest.approx(min(1.0, 2 * min(p_greater, p_less)))
    assert h3.expectation_met is True
    assert h3.decision == "reject"


def test_h3_flags_recoverable_error_in_regime_a() -> None:
    records = cell("fifo", 50, 10, 2, 3, regime="a") + cell("fifo", 50, 10, 5, 3, regime="b")
    (h3,) = analyse(records, resamples=500).family("H3")
    assert h3.expectation_met is False
    assert "construct" in h3.note


def test_empty_test_does_not_enter_holm() -> None:
    # A family cell without binned errors is 0/0: "empty", no p, not counted.
    records = cell("fifo", 40, 0, 0, 5, regime="a") + cell("random", 40, 10, 0, 0, regime="a")
    h1 = {t.policy: t for t in analyse(records, resamples=1000).family("H1")}
    assert h1["fifo"].decision == "empty" and h1["fifo"].p_raw is None
    assert h1["random"].p_holm == h1["random"].p_raw  # a family of one


# -- H2 matching, TOST, positive control -------------------------------------------


def accuracy_cell(
    policy: str, n: int, wrong: int, irr: int, *, budget: int = 80_000, seed: int = 0
) -> list[Record]:
    """``n`` questions, ``wrong`` errors of which ``irr`` irreversible, rest residual."""
    return cell(policy, n, irr, 0, wrong - irr, budget=budget, shuffle=seed)


def test_h2_pairs_matched_by_caliper() -> None:
    records = (
        accuracy_cell("fifo", 100, 40, 20)  # accuracy 0.60
        + accuracy_cell("redundancy", 100, 36, 18)  # 0.64: 0.04 from fifo
        + accuracy_cell("llm-importance", 100, 30, 10)  # 0.70: 0.10 / 0.06 away
        + accuracy_cell("my-policy", 100, 35, 15)  # 0.65: exactly the caliper from fifo
        + accuracy_cell("control", 100, 80, 70)
        + accuracy_cell("no-evict", 100, 20, 0)
    )
    analysis = analyse(records, resamples=500)
    matched = {(m.policy, m.other): m.matched for m in analysis.matching}
    assert matched == {
        ("fifo", "redundancy"): True,
        ("fifo", "llm-importance"): False,
        ("fifo", "my-policy"): True,
        ("redundancy", "llm-importance"): False,
        ("redundancy", "my-policy"): True,
        ("llm-importance", "my-policy"): True,
    }
    unmatched = [m for m in analysis.matching if not m.matched]
    assert all("accuracy gap" in m.reason and "> caliper" in m.reason for m in unmatched)
    h2 = {(t.policy, t.other) for t in analysis.family("H2")}
    assert h2 == {pair for pair, ok in matched.items() if ok}
    assert {(t.policy, t.other) for t in analysis.family("TOST")} == h2
    (fifo_red,) = [t for t in analysis.family("H2") if t.other == "redundancy"]
    assert fifo_red.statistic == pytest.approx(0.20 - 0.18)
    assert fifo_red.ci_lo is not None and fifo_red.ci_hi is not None
    assert fifo_red.half_width == pytest.approx((fifo_red.ci_hi - fifo_red.ci_lo) / 2)
    assert all(t.expectation_met is None for t in analysis.family("H2"))


def test_h2_pools_random_seeds_per_question() -> None:
    # Question q000: random is irreversible in 1 of its 3 seeds -> rate 1/3;
    # q001: in 3 of 3 -> 1; q002: 0 of 2 (seed 2 excluded). fifo: 1, 0, 0.
    rows = [
        ("q000", (True, False, False)),
        ("q001", (True, True, True)),
        ("q002", (False, False, None)),
    ]
    records = []
    for qid, outcomes in rows:
        for seed, irr in enumerate(outcomes):
            excluded = "api_error: reader" if irr is None else None
            records.append(
                record(
                    qid, "random", seed=seed, bin="irreversible" if irr else None, excluded=excluded
                )
            )
    records += [
        record("q000", "fifo", bin="irreversible"),
        record("q001", "fifo"),
        record("q002", "fifo"),
    ]
    analysis = analyse(records, resamples=200, caliper=1.0)
    (h2,) = analysis.family("H2")
    assert (h2.policy, h2.other) == ("fifo", "random")
    assert h2.statistic == pytest.approx(((1 - 1 / 3) + (0 - 1) + 0) / 3)
    assert h2.n_questions == 3
    assert get_cell(analysis, "random").N == 8


def test_tost_equivalence() -> None:
    same = accuracy_cell("fifo", 300, 100, 50) + accuracy_cell("random", 300, 100, 50)
    analysis = analyse(same, resamples=2000)
    (tost,) = analysis.family("TOST")
    # Identical outcomes on every question: the difference is 0 in every resample.
    assert tost.statistic == 0.0 and tost.ci_lo == 0.0 and tost.ci_hi == 0.0
    assert tost.p_raw == pytest.approx(1 / 2001)
    assert tost.decision == "equivalent"

    different = accuracy_cell("fifo", 300, 100, 80) + accuracy_cell("random", 300, 100, 20, seed=1)
    (tost,) = analyse(different, resamples=2000).family("TOST")
    assert tost.statistic == pytest.approx(0.2)
    assert tost.decision == "not shown equivalent"
    assert tost.p_raw == 1.0

    # A margin wider than the difference's interval makes it equivalent.
    (tost,) = analyse(different, resamples=2000, equivalence_margin=0.35).family("TOST")
    assert tost.decision == "equivalent"


def control_grid() -> list[Record]:
    records = []
    for budget, shift in ((80_000, 0), (30_000, 10), (8_000, 20)):
        records += accuracy_cell("control", 300, 200, 170, budget=budget, seed=1)
        for i, base in enumerate(("fifo", "random", "redundancy")):
            records += accuracy_cell(base, 300, 110 + shift, 50 + shift, budget=budget, seed=2 + i)
    return records


def test_positive_control_significant_after_holm() -> None:
    analysis = analyse(control_grid(), resamples=2000)
    control = analysis.family(POSITIVE_CONTROL)
    assert len(control) == 9
    assert all(t.decision == "reject" and t.expectation_met for t in control)
    assert all(t.statistic is not None and t.statistic > 0 for t in control)
    assert all(t.p_holm is not None and t.p_holm < 0.05 for t in control)


def test_baselines_are_parameters() -> None:
    analysis = analyse(control_grid(), resamples=500, baselines=("fifo",))
    assert {t.other for t in analysis.family(POSITIVE_CONTROL)} == {"fifo"}


# -- per-cell checks ------------------------------------------------------------


SIZES = {"H1": 2 * 3, "H3": 2 * 3, POSITIVE_CONTROL: 3 * 3}


def _with_regime_a(records: list[Record]) -> list[Record]:
    for policy in ("fifo", "control"):
        records += [replace(r, regime="a") for r in records if r.policy == policy and r.regime == "b"]
    return records


@pytest.fixture(scope="module")
def control_analysis() -> tuple[list[Record], Analysis]:
    """The control grid with regime (a), analysed once (1,000 resamples) for the items' verdicts."""
    records = _with_regime_a(control_grid())
    return records, analyse(records, resamples=1000)


def test_an_items_verdicts_are_the_sessions(control_analysis: tuple[list[Record], Analysis]) -> None:
    """Items decide each of their tests as the session does (Holm and power included)."""
    records, analysis = control_analysis
    session = {t.name: t for t in analysis.tests}
    budgets = (80_000, 30_000, 8_000)
    for policy in ("control", "fifo"):
        for budget in budgets:
            verdicts = cell_verdicts(analysis, policy, budget, budgets=budgets, family_sizes=SIZES)
            families = [t.family for t in verdicts]
            assert families == (["H1", "H3"] + [POSITIVE_CONTROL] * 3 * (policy == "control"))
            for t in verdicts:
                expected = session[t.name]
                assert t.p_raw == expected.p_raw and t.ci_lo == expected.ci_lo
                assert (t.decision, t.expectation_met, t.testable) == (
                    expected.decision, expected.expectation_met, expected.testable
                )
    assert cell_verdicts(analyse(records, resamples=100), "llm-importance", 80_000, budgets=budgets, family_sizes=SIZES) == []


def test_an_item_asks_for_the_whole_family_only_where_holm_could_go_either_way(
    control_analysis: tuple[list[Record], Analysis],
) -> None:
    records, analysis = control_analysis
    asked: list[list[tuple[str, int]]] = []

    def fetch(cells: Any) -> list[Record]:
        asked.append(list(cells))
        return records

    budgets = (80_000, 30_000, 8_000)
    clear = cell_verdicts(analysis, "control", 80_000, budgets=budgets, family_sizes=SIZES, fetch=fetch)
    assert asked == []  # every p is far from alpha: Holm cannot change a decision
    # a family so large that Holm's bound straddles alpha: the item decides with the whole family
    big = {name: 10_000 for name in SIZES}
    again = cell_verdicts(analysis, "control", 80_000, budgets=budgets, family_sizes=big, fetch=fetch)
    assert asked and ("control", 8_000) in asked[0]
    assert [t.decision for t in again] == [t.decision for t in clear]


def test_cell_verdicts_need_one_reader() -> None:
    records = cell("fifo", 10, 3, 0, 0, regime="a")
    records += [replace(r, reader="other") for r in records]
    with pytest.raises(ValueError, match="reader"):
        cell_verdicts(analyse(records, resamples=100), "fifo", 80_000, budgets=(80_000,), family_sizes=SIZES)
    verdicts = cell_verdicts(
        analyse(records, resamples=100), "fifo", 80_000, budgets=(80_000,), family_sizes=SIZES, reader="other"
    )
    assert len(verdicts) == 1


def tame_control(questions: int) -> list[Record]:
    """A control that evicts no more than fifo: its expectation is not met."""
    return accuracy_cell("control", questions, questions // 2, questions // 3, seed=1) + accuracy_cell(
        "fifo", questions, questions // 2, questions // 3, seed=2
    )


def test_an_unmet_expectation_fails_only_where_the_run_had_power() -> None:
    small = analyse(tame_control(20), resamples=2000, baselines=("fifo",))
    (test,) = small.family(POSITIVE_CONTROL)
    assert test.expectation_met is False and not test.testable
    assert small.failures() == [] and small.untestable() == [test]
    assert "about" in test.power_note and "questions would make it testable" in test.power_note
    mde = minimum_detectable(test, 1, small.settings, 0.15)
    assert mde is not None and mde > 0.15
    shortfall = test.shortfall  # the figures travel as fields; the note is made from them
    assert shortfall is not None and shortfall.minimum_detectable == mde and shortfall.holm_size == 1
    assert shortfall.questions_needed is not None and shortfall.questions_needed > 20
    assert f"about {shortfall.questions_needed} questions" in test.power_note
    large = analyse(tame_control(2000), resamples=2000, baselines=("fifo",))
    (test,) = large.family(POSITIVE_CONTROL)
    assert test.expectation_met is False and test.testable
    assert large.failures() == [test]
    line = family_of(POSITIVE_CONTROL).describe(test)
    assert line.startswith("positive-control: control not shown more destructive than fifo at 80k (")
    assert len(line) < 120


def _no_irreversible(engine: Engine, reader: str, budgets: Any) -> list[HypothesisTest]:
    """Per regime-(b) cell: irr / N, one-sided against 0 (a user's family, built from the engine)."""
    out = []
    for key in engine.keys:
        policy, budget, regime, cell_reader = key.policy, key.budget, key.regime, key.reader
        if (regime, cell_reader, key.ranker) != ("b", reader, "") or budget not in budgets:
            continue
        stat = engine.ratio(key, [IRR_ROW], [N_ROW])
        lo, hi = stat.interval(engine.settings.confidence)
        out.append(
            HypothesisTest(
                f"no-irr {policy} {budget}", "no-irr", reader, budget, policy, None, regime, stat.point, lo, hi,
                0.0, "greater", stat.p_greater(0.0), None, "", None, engine.n_questions(key), stat.undefined,
            )
        )
    return out


NO_IRR = Family(
    name="no-irr",
    title="No irreversible error (regime b)",
    tests="Per regime-(b) cell, irr / N against 0 (one-sided); expected not to reject.",
    statistic="irr rate",
    build=_no_irreversible,
    expectation="an irreversible error",
    expect=lambda _t, significant: not significant,
    cells=lambda _s, budgets: [("fifo", b) for b in budgets],
)


def test_a_registered_family_is_analysed_decided_and_checked_like_a_built_in() -> None:
    """A family passed with the settings runs after the built-ins: Holm, its expectation, the items' checks."""
    records = cell("fifo", 40, 12, 0, 0) + cell("no-evict", 40, 0, 0, 0)
    families = (*FAMILIES, NO_IRR)
    analysis = analyse(records, resamples=1000, families=families)
    assert analysis.settings.families == families
    tests = {t.name: t for t in analysis.family("no-irr")}
    assert set(tests) == {"no-irr fifo 80000", "no-irr no-evict 80000"}
    assert tests["no-irr fifo 80000"].expectation_met is False and tests["no-irr fifo 80000"].p_holm is not None
    no_evict = tests["no-irr no-evict 80000"]
    assert (no_evict.statistic, no_evict.decision, no_evict.expectation_met) == (0.0, "retain", True)
    assert analysis.failures() == [tests["no-irr fifo 80000"]]
    assert [row.family for row in analysis.summary()][-1] == "no-irr"
    assert list(analysis.to_json()["families"])[-1] == "no-irr"
    assert family_of("no-irr", families).describe(tests["no-irr fifo 80000"]).startswith(
        "no-irr: fifo at 80k: an irreversible error (irr rate 0.30"
    )
    # the grid item of fifo fails on it as the session does; without the family, nothing to check
    (verdict,) = cell_verdicts(analysis, "fifo", 80_000, budgets=(80_000,), family_sizes={"no-irr": 2})
    assert (verdict.name, verdict.expectation_met) == ("no-irr fifo 80000", False)
    builtin = analyse(records, resamples=1000)
    assert cell_verdicts(builtin, "fifo", 80_000, budgets=(80_000,), family_sizes={}) == []
    assert "no-irr" not in analyse(records, resamples=1000).to_json()["families"]
    with pytest.raises(KeyError, match="no-irr"):
        family_of("no-irr")


# -- per-cell figures, determinism, breakdown --------------------------------------


def test_cell_figures() -> None:
    records = cell("fifo", 10, 3, 2, 1, total=12)
    records.append(record("q099", excluded="api_error: judge"))
    figures = get_cell(analyse(records, resamples=500), "fifo")
    assert (figures.N, figures.err, figures.irr, figures.rec, figures.res) == (10, 6, 3, 2, 1)
    assert (figures.excluded, figures.not_answerable, figures.records) == (1, 2, 13)
    assert figures.two_bin_share == pytest.approx(0.6)
    assert figures.irr_rate == pytest.approx(0.3)
    assert figures.accuracy == pytest.approx(0.4)
    assert figures.gold_evicted_rate == pytest.approx(0.3)
    assert figures.irr_share == pytest.approx(0.5)
    row = figures.as_row()
    assert tuple(row) == CELL_COLUMNS
    assert row["two_bin_lo"] is not None and row["irr_share"] == pytest.approx(0.5) and row["excluded"] == 1
    assert tuple(figures.intervals()) == INTERVAL_COLUMNS
    assert figures.two_bin_lo is not None and figures.two_bin_hi is not None
    assert figures.two_bin_lo <= 0.6 <= figures.two_bin_hi


def test_regime_a_and_no_evict_are_empty_where_expected() -> None:
    records = cell("no-evict", 30, 0, 0, 4, regime="a")
    figures = get_cell(analyse(records, resamples=200), "no-evict", regime="a")
    assert figures.two_bin_share is None and figures.two_bin_lo is None


def test_json_is_deterministic() -> None:
    records = control_grid()
    first = json.dumps(analyse(records, resamples=1000, seed=4).to_json(), sort_keys=True)
    second = json.dumps(
        analyse(list(reversed(records)), resamples=1000, seed=4).to_json(), sort_keys=True
    )
    assert first == second
    other = json.dumps(analyse(records, resamples=1000, seed=5).to_json(), sort_keys=True)
    assert other != first
    data = json.loads(first)
    assert set(data["families"]) == {"R1", "H2", "TOST", POSITIVE_CONTROL}
    assert data["settings"]["resamples"] == 1000


def test_malformed_records_are_refused_before_the_statistics() -> None:
    """The statistics read typed records only: a malformed one is refused when it is built."""
    bad = {**RECORD_DEFAULTS, "question_id": "q000"}
    del bad["bin"]
    with pytest.raises(RecordError, match="q000.*field 'bin': missing"):
        from_v1(bad)
    with pytest.raises(RecordError, match="regime"):
        record("q000", regime="c")
    with pytest.raises(RecordError, match="'policy_correct'.*null on an oracle-answerable"):
        flat_record(question_id="q000", policy_correct=None)


def test_bins_by_type() -> None:
    records = [
        record("q1", bin="irreversible", qtype="single-session-user"),
        record("q2", bin="residual", qtype="multi-session"),
        record("q3", bin="recoverable", qtype="multi-session"),
        record("q4", qtype="multi-session"),
        record("q5", qtype="multi-session", excluded="api_error: reader"),
    ]
    rows = analyse(records, resamples=10).by_type
    assert [r.question_type for r in rows] == ["multi-session", "single-session-user"]
    multi = rows[0]
    assert (multi.N, multi.err, multi.irr, multi.rec, multi.res) == (3, 2, 0, 1, 1)
    assert multi.res_share == 0.5 and multi.two_bin_share == 0.0
    assert analyse(records[4:], resamples=10).by_type == ()  # a type without a record in N has no row


# -- figure ----------------------------------------------------------------------


def test_figure_written_and_deterministic(tmp_path: Path) -> None:
    records = table1_records() + accuracy_cell("fifo", 50, 10, 5, budget=8_000)
    records += cell("no-evict", 40, 0, 0, 0)
    analysis = analyse(records, resamples=200)
    png, svg = write_figure(findings(analysis), tmp_path / "one")
    again = write_figure(findings(analysis), tmp_path / "two")
    assert png.name == "figure.png" and svg.name == "figure.svg"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert svg.read_bytes() == again[1].read_bytes()
    assert png.read_bytes() == again[0].read_bytes()
    assert "#bb5566" in svg.read_text().lower()


def test_one_policy_order_for_the_builtins_and_the_cells() -> None:
    from pytest_restore.memory.derived import BUILTIN_SYSTEMS
    from pytest_restore.memory.eviction import BUILTIN_POLICIES
    from pytest_restore.models.writers import MODEL_SYSTEMS
    from pytest_restore.record import CellKey
    from pytest_restore.stats.results import POLICY_GLOSS, POLICY_ORDER, cell_order, policy_order

    assert tuple(cls.name for cls in (*BUILTIN_POLICIES, *BUILTIN_SYSTEMS, *MODEL_SYSTEMS)) == POLICY_ORDER
    assert tuple(POLICY_GLOSS) == POLICY_ORDER  # the first screen's legend says what every built-in does
    keys = [CellKey("mine", 8_000, "b", "r"), CellKey("fifo", 8_000, "a", "r"), CellKey("fifo", 80_000, "b", "r")]
    assert sorted(keys, key=cell_order) == [keys[2], keys[1], keys[0]]
    assert policy_order("control") < policy_order("aaa-user-policy")


def test_construct_failures_from_counts_are_the_analysis_s() -> None:
    # an item under --restore-family-checks report checks its counts without an analysis: the same lines
    unbinned = record("q-unbinned", regime="a", correct=False)  # an error in no bin: the bins miss one
    records = cell("fifo", 50, 10, 2, 3, regime="a") + [unbinned] + cell("no-evict", 30, 2, 0, 1)
    analysis = analyse(records, resamples=200)
    for policy in ("fifo", "no-evict", "random"):
        assert construct_failures(records, policy, 80_000, "reader") == analysis.construct_failures(policy, 80_000, "reader")
    assert construct_failures(records, "fifo", 80_000, "reader") == [
        "fifo @ 80000 regime (a): irr 10 + rec 2 + dis 0 + res 3 != err 16",
        "fifo @ 80000 regime (a): forced-gold regime has 2 recoverable errors (must be 0)",
    ]
    assert construct_failures(records, "no-evict", 80_000, "reader") == [
        "no-evict @ 80000 regime (b): no-evict has 2 irreversible errors (must be 0)"
    ]
    assert construct_failures(records, "no-evict", 80_000, "reader", reference="fifo") == []
