"""Restore-tightness ablations (pytest_restore.audit.ablations) and the cases per bin."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from grid_helpers import TINY, ChildRun, bootstrap_settings, report_file

from pytest_restore.__main__ import main
from pytest_restore.audit import ablations
from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.dataset import Dataset, load_dataset
from pytest_restore.memory.eviction import default_registry
from pytest_restore.memory.retrieval import inject
from pytest_restore.models.base import ChatRequest, ChatResult
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.record import ABLATIONS, Record
from pytest_restore.records_file import dumps
from pytest_restore.report.inputs import RunInfo, read_records
from pytest_restore.report.markdown import render_report_md
from pytest_restore.report.model import build_model
from pytest_restore.report.writer import write_report
from pytest_restore.stats.ablations import summarise
from pytest_restore.stats.findings import bin_cases

BUDGETS = (600, 300, 100)

#: No test here reads a report's figure (report.md, hypotheses.json and the records are read): the reports written
#: in this process build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


def make_audit(dataset: Dataset, config: AuditConfig, reader: Any = None) -> Audit:
    fake = FakeReader()
    audit = Audit(dataset, config, reader=reader or fake, judge=FakeJudge(), scorer=FakeScorer())
    fake.learn(p.history for p in audit.questions)
    return audit


def grid(audit: Audit, policies: Sequence[str] | None = None) -> list[Record]:
    registry = default_registry()
    names = policies or tuple(registry)
    return [
        r
        for n in names
        for b in audit.config.budgets
        for r in audit.run_cell(registry[n], b).records
    ]


@pytest.fixture(scope="module")
def tiny() -> Dataset:
    return load_dataset(TINY)


@pytest.fixture(scope="module")
def tiny_records(tiny: Dataset) -> list[Record]:
    return grid(make_audit(tiny, AuditConfig(budgets=BUDGETS, ablations=True)))


# -- the placebo ------------------------------------------------------------------


def test_placebo_is_never_gold_sized_within_the_ratio_and_nearest(tiny: Dataset) -> None:
    audit = make_audit(tiny, AuditConfig(budgets=BUDGETS))
    for p in audit.questions:
        h = p.history
        placebo = ablations.placebo_units(h)
        assert placebo is not None, h.question.question_id
        assert placebo == sorted(set(placebo)) and not set(placebo) & set(h.gold)
        total, gold = int(h.sizes[placebo].sum()), h.gold_tokens
        assert gold / 1.5 <= total <= gold * 1.5
        assert ablations.placebo_units(h) == placebo  # deterministic

        # nearest first: a unit nearer than the farthest chosen one was skipped only
        # because it would have pushed the total past 1.5x the gold
        def key(u: int, gold_units: tuple[int, ...] = h.gold) -> tuple[int, int]:
            return (min(abs(u - g) for g in gold_units), u)

        last = max(key(u) for u in placebo)
        for u in range(len(h.units)):
            if u not in placebo and u not in h.gold and key(u) < last:
                before = sum(int(h.sizes[v]) for v in placebo if key(v) < key(u))
                assert before + int(h.sizes[u]) > gold * 1.5


def test_placebo_not_constructible_when_every_other_unit_is_too_big(tiny: Dataset) -> None:
    audit = make_audit(tiny, AuditConfig(budgets=BUDGETS))
    h = audit.questions[0].history
    huge = h.sizes.copy()
    huge[[i for i in range(len(huge)) if i not in h.gold]] = 10 * h.gold_tokens
    from dataclasses import replace

    assert ablations.placebo_units(replace(h, sizes=huge)) is None


# -- the three contexts ---------------------------------------------------------------


def test_ablation_contexts(tiny: Dataset) -> None:
    audit = make_audit(tiny, AuditConfig(budgets=BUDGETS))
    fifo = default_registry()["fifo"]
    for p in audit.questions:
        h = p.history
        store = audit.retain(fifo, p, 100, 0, {})
        contexts = audit.ablation_contexts(p, store)
        kept_gold = [g for g in h.gold if store[g]]
        # (i) is regime (a)'s context
        assert contexts["surviving"] == inject(
            kept_gold, audit.rank(p, store), h.sizes, audit.config.cap
        )
        # (ii) is the whole retained store
        assert contexts["store"] == [int(i) for i in np.flatnonzero(store)]
        # (iii) holds every placebo unit and no evicted gold
        placebo = audit.placebo(p)
        assert placebo is not None and contexts["placebo"] is not None
        assert set(placebo) <= set(contexts["placebo"])
        assert not {g for g in h.gold if not store[g]} & set(contexts["placebo"])


# -- records ------------------------------------------------------------------------------


def test_only_regime_b_irreversible_records_carry_ablations(tiny_records: list[Record]) -> None:
    cases = [r for r in tiny_records if ablations.is_case(r)]
    assert len(cases) > 10
    for r in tiny_records:
        if ablations.is_case(r):
            assert r.ablations is not None and r.ablations.excluded == {}
            assert all(isinstance(r.ablations.verdict(key), bool) for key, _title in ABLATIONS)
            assert r.ablations.store_tokens == r.store_tokens
            assert r.ablations.placebo_units and r.ablations.placebo_tokens
        else:
            assert r.ablations is None, r


def test_surviving_gold_flips_nothing_where_no_gold_survived(tiny_records: list[Record]) -> None:
    for r in tiny_records:
        if ablations.is_case(r) and r.gold_evicted == r.gold_units:
            assert r.ablations.surviving_correct is False


def test_surviving_gold_ablation_is_regime_a(tiny_records: list[Record]) -> None:
    regime_a = {
        (r.policy, r.budget, r.seed, r.question_id): r
        for r in tiny_records
        if r.regime == "a"
    }
    for r in tiny_records:
        if ablations.is_case(r):
            a = regime_a[(r.policy, r.budget, r.seed, r.question_id)]
            assert r.ablations.surviving_correct == a.conditions.policy.correct


def test_records_name_the_evicted_gold(tiny_records: list[Record]) -> None:
    for r in tiny_records:
        assert len(r.gold_evicted_units) == r.gold_evicted == len(r.gold_evicted_where)
        assert all(w.startswith("session ") for w in r.gold_evicted_where)
        assert r.ranker == "bm25-lite" and r.question and r.reference


def test_ablations_off_means_no_extra_reader_call(tiny: Dataset) -> None:
    off, on = (make_audit(tiny, AuditConfig(budgets=BUDGETS, ablations=a)) for a in (False, True))
    grid(off, ["fifo"])
    grid(on, ["fifo"])
    assert off.reader.usage.sent < on.reader.usage.sent


class LongContextReader:
    """Answers right whenever its context is long: a reader the store ablation can flip."""

    def __init__(self, fake: FakeReader, answers: dict[str, str], threshold: int) -> None:
        self.fake, self.answers, self.threshold = fake, answers, threshold

    @property
    def name(self) -> str:
        return "long-context"

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        out = []
        for request, result in zip(requests, self.fake.run(requests)):
            user = request.messages[-1][1]
            question = user.rsplit("\n\nQuestion: ", 1)[-1].rsplit("\nAnswer:", 1)[0]
            if len(user) > self.threshold and question in self.answers:
                result = ChatResult(text=self.answers[question])
            out.append(result)
        return out


def test_flips_are_counted_when_the_reader_can_be_flipped(tiny: Dataset) -> None:
    fake = FakeReader()
    answers = {q.question: q.answer for q in tiny.questions}
    reader = LongContextReader(fake, answers, threshold=800)
    audit = Audit(
        tiny,
        AuditConfig(budgets=BUDGETS, ablations=True),
        reader=reader,
        judge=FakeJudge(),
        scorer=FakeScorer(),
    )
    fake.learn(p.history for p in audit.questions)
    records = grid(audit, ["fifo", "random"])
    cases = [r for r in records if ablations.is_case(r)]
    flipped = [r for r in cases if r.ablations.store_correct]
    assert cases and flipped and len(flipped) < len(cases)
    rows = {row.ablation: row for row in summarise(records, resamples=300, seed=1)}
    assert rows["gold"].share == 1.0 and rows["gold"].flipped == len(cases)
    assert rows["store"].flipped == len(flipped) and rows["store"].scored == len(cases)
    assert rows["store"].ci_lo is not None and rows["store"].ci_hi is not None
    assert rows["store"].ci_lo <= rows["store"].share <= rows["store"].ci_hi  # type: ignore[operator]


# -- the report ---------------------------------------------------------------------------


def test_report_sections_rebuild_from_records(tiny_records: list[Record], tmp_path: Path) -> None:
    info = RunInfo(settings=bootstrap_settings(500))
    # the records' data, for report.html's texts (the settings name the embedded default, parsed for nothing)
    files = write_report(tiny_records, info, tmp_path / "out", data_file=TINY)
    report = files.report.read_text()
    assert "## Restore-tightness ablations" in report and "## One case per bin (regime b)" in report
    assert "; ranker bm25-lite; " in report  # the run line
    data = json.loads(files.hypotheses.read_text())
    pooled = {row["ablation"]: row for row in data["ablations"]["pooled"]}
    assert pooled["gold"]["share"] == 1.0
    assert pooled["surviving"]["cases"] == pooled["gold"]["cases"] > 0
    # the report is a function of the records alone
    saved = read_records(files.records)
    again = render_report_md(build_model(saved, info))
    assert again == report


def test_one_case_per_policy_and_bin_at_the_loosest_budget(tiny_records: list[Record]) -> None:
    cases = bin_cases(tiny_records)
    keys = [(r.policy, r.bin) for r in cases]
    assert len(keys) == len(set(keys))
    for r in cases:
        same = [
            s
            for s in tiny_records
            if s.regime == "b" and (s.policy, s.bin) == (r.policy, r.bin)
        ]
        loosest = max(s.budget for s in same)
        assert r.budget == loosest
        assert r.question_id == min(s.question_id for s in same if s.budget == loosest)
    assert ("no-evict", "irreversible") not in keys
    assert ("fifo", "irreversible") in keys


def test_records_of_two_rankers_make_one_report_that_compares_them(tiny_records: list[Record], tmp_path: Path) -> None:
    records = tiny_records[:4]
    records += [replace(r, ranker="recency") for r in records]
    path = tmp_path / "records.jsonl"
    path.write_text(dumps(records))
    assert main(["report", str(path), "--out", str(tmp_path / "o"), "--data", str(TINY)]) == 0
    report = (tmp_path / "o" / "report.md").read_text()
    assert "## Rankers compared (regime b)" in report and "the baseline is bm25-lite" in report


# -- end to end ------------------------------------------------------------------------------


def test_plugin_runs_the_ablations_identically_serial_and_parallel(
    tiny_grid_runs: tuple[ChildRun, ChildRun],
) -> None:
    serial, parallel = tiny_grid_runs  # the whole tiny grid with --restore-ablations
    serial.assert_passed(18)
    parallel.assert_passed(18)
    for name in ("records.jsonl", "cells.csv", "report.md", "hypotheses.json", "summary.json"):
        assert report_file(serial.report / name) == report_file(parallel.report / name), name
    data = json.loads((serial.report / "hypotheses.json").read_text())
    assert {row["ablation"] for row in data["ablations"]["pooled"]} == {
        "gold",
        "surviving",
        "store",
        "placebo",
    }
    summary = json.loads((serial.report / "summary.json").read_text())
    assert summary["run"]["settings"]["ablations"] is True


# -- the embedded default (fake reader) ---------------------------------------------------


@pytest.fixture(scope="module")
def embedded_ablations(embedded_records: tuple[Record, ...]) -> list[Record]:
    """The fake-model grid with ablations on the embedded default, for three policies.

    Read from the main job's records (``pytest benches/ --restore-ablations``,
    run once per test run), not computed again.
    """
    return [r for r in embedded_records if r.policy in ("fifo", "random", "control")]


@pytest.mark.slow
def test_embedded_default_ablations_flip_far_fewer_than_the_gold_restore(
    embedded_ablations: list[Record],
) -> None:
    rows = {
        row.ablation: row for row in summarise(embedded_ablations, resamples=500, seed=0)
    }
    gold = rows["gold"]
    assert gold.cases > 100 and gold.flipped == gold.cases
    # (ii) the complete retained store flips fewer irreversible cases than the gold restore
    assert rows["store"].scored == gold.cases and rows["store"].flipped < gold.flipped
    # (iii) the placebo flips far fewer
    assert rows["placebo"].scored > 0.9 * gold.cases
    assert rows["placebo"].share is not None and rows["placebo"].share < 0.2
    # (i) flips none where no gold survived, by construction
    for r in embedded_ablations:
        if ablations.is_case(r) and r.gold_evicted == r.gold_units:
            assert r.ablations.surviving_correct is False
