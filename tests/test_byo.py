"""Bring your own, from outside the package: a memory store, a policy, a ranker, a model provider, a hypothesis family."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from grid_helpers import GRID, TINY, small_args

from pytest_restore import registry
from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.dataset import Dataset, load_dataset
from pytest_restore.data.units import History, Unit
from pytest_restore.memory import retrieval as injection
from pytest_restore.memory.eviction import EvictionContext, MemoryStore, default_registry
from pytest_restore.memory.retrieval import (
    Bm25Lite,
    Ranker,
    Recency,
    ScoringRanker,
    Store,
    checked_rank,
    default_rankers,
)
from pytest_restore.models.base import ChatModel
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.models.providers import (
    ModelOptions,
    ModelProvider,
    ModelSpecError,
    OpenAIProvider,
    default_providers,
    make_model,
)
from pytest_restore.record import Record
from pytest_restore.records_file import read_records
from pytest_restore.stats.families import FAMILIES, Family, default_families

SMALL = small_args()

# What a user writes in their conftest.py: a memory system, a victim policy, a retriever
# and a hypothesis family.
CONFTEST = """
from pytest_restore.memory.eviction import MemoryStore, VictimPolicy
from pytest_restore.memory.retrieval import ScoringRanker
from pytest_restore.data.words import words
from pytest_restore.stats.tally import CORRECT_ROW, N_ROW
from pytest_restore.stats.families import Family
from pytest_restore.stats.results import HypothesisTest


class UserFirstStore(MemoryStore):
    \"\"\"A memory system that keeps what the user said: drops assistant turns first, oldest first.\"\"\"

    name = "user-first"

    def reset(self, budget, ctx):
        self.budget, self.held, self.total = budget, {}, 0

    def add(self, unit):
        self.held[unit.position] = unit
        self.total += unit.tokens
        while self.total > self.budget:
            victim = min(self.held, key=lambda p: (self.held[p].role == "user", p))
            self.total -= self.held.pop(victim).tokens

    def retained(self):
        return self.held.keys()


class EvictNewest(VictimPolicy):
    name = "evict-newest"

    def choose_victim(self, stored, units):
        return stored[-1]


class Overlap(ScoringRanker):
    \"\"\"Counts the question's distinct words in each unit.\"\"\"

    name = "overlap"

    def prepare(self, history):
        return set(words(history.question.question))

    def scores(self, history, store, state):
        return [len(state & set(words(u.content))) for u in history.units]


def pytest_restore_register_policies(registry, config):
    registry.register(UserFirstStore())
    registry.register(EvictNewest())


def pytest_restore_register_rankers(registry, config):
    registry.register(Overlap())


def accuracy_tests(engine, reader, budgets):
    \"\"\"Per regime-(b) cell of the reader: accuracy correct / N, one-sided against a coin's 0.5.\"\"\"
    tests = []
    for key in engine.keys:
        policy, budget, regime = key.policy, key.budget, key.regime
        if regime != "b" or key.reader != reader or budget not in budgets or key.ranker:
            continue
        stat = engine.ratio(key, [CORRECT_ROW], [N_ROW])
        lo, hi = stat.interval(engine.settings.confidence)
        tests.append(
            HypothesisTest(
                name=f"accuracy {policy} {budget}", family="accuracy", reader=reader, budget=budget,
                policy=policy, other=None, regime=regime, statistic=stat.point, ci_lo=lo, ci_hi=hi,
                null=0.5, alternative="greater", p_raw=stat.p_greater(0.5), p_holm=None, decision="",
                expectation_met=None, n_questions=engine.n_questions(key),
                undefined_resamples=stat.undefined,
            )
        )
    return tests


def pytest_restore_register_families(registry, config):
    registry.register(
        Family(
            name="accuracy",
            title="Accuracy above a coin (regime b)",
            tests="Per regime-(b) cell, correct / N against 0.5, one-sided; a finding.",
            statistic="accuracy",
            build=accuracy_tests,
        )
    )
"""


# A model provider, as a user adds one: every model named ``local:NAME`` is served by it.
PROVIDER = """
from pytest_restore.models.base import ChatResult
from pytest_restore.models.providers import ModelProvider


class Shrug:
    \"\"\"A reader that never knows: every answer is a refusal.\"\"\"

    def __init__(self, name):
        self.name = name

    def run(self, requests):
        return [ChatResult("I don't know.") for _ in requests]


class Local(ModelProvider):
    name = "local"
    real = False

    def make(self, model, role, options, *, use_cache=True):
        return Shrug(f"local:{model}")


def pytest_restore_register_providers(registry, config):
    registry.register(Local())
"""


#: No test here reads a report's figure: the runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


def _cells(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _records(path: Path) -> list[Record]:
    return read_records(path)


# -- end to end: no change to the package -----------------------------------------------


def test_users_store_and_policy_are_their_own_rows(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest(
        "-p", "no:xdist", *SMALL, "--restore-policies", "no-evict,user-first,evict-newest"
    )
    result.assert_outcomes(passed=9)
    out = pytester.path / "restore-report"
    rows = _cells(out / "cells.csv")
    for name in ("user-first", "evict-newest"):
        mine = [r for r in rows if r["policy"] == name]
        assert {(r["budget"], r["regime"]) for r in mine} == {
            (b, g) for b in ("600", "300", "100") for g in "ab"
        }
    records = _records(out / "records.jsonl")
    store = [r for r in records if r.policy == "user-first"]
    assert all(r.store_tokens <= r.budget for r in store)
    assert any(r.gold_evicted for r in store if r.budget == 100)
    assert {r.ranker for r in records} == {"bm25-lite"}
    # the user's family ran on every regime-(b) cell, Holm-adjusted and decided like a built-in
    accuracy = json.loads((out / "hypotheses.json").read_text())["families"]["accuracy"]
    assert sorted(t["name"] for t in accuracy) == sorted(
        f"accuracy {p} {b}" for p in ("no-evict", "user-first", "evict-newest") for b in (600, 300, 100)
    )
    regime_b = {(r["policy"], int(r["budget"])): r for r in rows if r["regime"] == "b"}
    for t in accuracy:
        assert t["statistic"] == pytest.approx(float(regime_b[(t["policy"], t["budget"])]["accuracy"]), abs=1e-4)
        assert t["decision"] in {"reject", "retain"} and t["p_holm"] is not None
    summary = json.loads((out / "summary.json").read_text())["hypotheses"]
    assert [row["tests"] for row in summary if row["family"] == "accuracy"] == [9]
    report = (out / "report.md").read_text()
    assert "### Accuracy above a coin (regime b)" in report
    assert report.index("### Positive control") < report.index("### Accuracy above a coin")  # after the built-ins


def test_users_ranker_serves_the_run(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest(
        "-p",
        "no:xdist",
        *SMALL,
        "--restore-policies",
        "fifo,user-first",
        "--restore-ranker",
        "overlap",
    )
    result.assert_outcomes(passed=6)
    out = pytester.path / "restore-report"
    rows = _cells(out / "cells.csv")
    assert {r["policy"] for r in rows} == {"fifo", "user-first"} and len(rows) == 12
    records = _records(out / "records.jsonl")
    assert {r.ranker for r in records} == {"overlap"}
    assert "; ranker overlap; " in (out / "report.md").read_text()  # the run line
    assert json.loads((out / "summary.json").read_text())["run"]["settings"]["ranker"] == "overlap"


def test_users_provider_policy_ranker_and_family_from_one_conftest(pytester: pytest.Pytester) -> None:
    """A model provider, a policy, a ranker and a hypothesis family, all from a conftest.py: no edit to the package."""
    pytester.makeconftest(CONFTEST + PROVIDER)
    pytester.makepyfile(test_grid=GRID)
    args = ["-p", "no:xdist", *SMALL, "--restore-policies", "evict-newest", "--restore-ranker", "overlap"]
    result = pytester.runpytest(*args, "--restore-reader", "local:shrug")
    result.assert_outcomes(passed=3)
    records = _records(pytester.path / "restore-report" / "records.jsonl")
    assert {(r.reader, r.policy, r.ranker) for r in records} == {("local:shrug", "evict-newest", "overlap")}
    # the provider's reader answered every condition: it never knows, so the oracle is never right
    assert records and not any(r.conditions.oracle.correct for r in records)
    assert {r.conditions.oracle.answer for r in records} == {"I don't know."}
    # the family's tests are there, under its name; with no answerable question each is empty
    accuracy = json.loads((pytester.path / "restore-report" / "hypotheses.json").read_text())["families"]["accuracy"]
    assert {(t["name"], t["reader"], t["decision"]) for t in accuracy} == {
        (f"accuracy evict-newest {b}", "local:shrug", "empty") for b in (600, 300, 100)
    }
    assert "### Accuracy above a coin (regime b)" in (pytester.path / "restore-report" / "report.md").read_text()
    unknown = pytester.runpytest(*args, "--restore-reader", "remote:shrug")
    assert unknown.ret == pytest.ExitCode.USAGE_ERROR
    unknown.stderr.fnmatch_lines(["*--restore-reader: unknown model 'remote:shrug'; use 'fake', 'fake-strong' or 'openai:MODEL', 'anthropic:MODEL', 'local:MODEL'"])


def test_recency_ranker_is_built_in_and_moves_the_recoverable_share(
    pytester: pytest.Pytester,
) -> None:
    """recency beside bm25-lite in one run (``--restore-rankers``: the same stores read by each; one
    ranker alone, ``--restore-ranker``, is the user's ranker's test above)."""
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest(
        "-p", "no:xdist", *SMALL, "--restore-policies", "no-evict", "--restore-rankers", "bm25-lite,recency"
    )
    result.assert_outcomes(passed=6)
    records = _records(pytester.path / "restore-report" / "records.jsonl")
    runs = {ranker: [r for r in records if r.ranker == ranker] for ranker in ("bm25-lite", "recency")}
    assert {r.ranker for r in records} == set(runs) and all(runs.values())
    # the store (no-evict keeps everything) is the same; only what is retrieved differs
    injected = {
        k: [r.conditions.policy.injected_units for r in v if r.regime == "b"] for k, v in runs.items()
    }
    assert injected["bm25-lite"] != injected["recency"]


def test_unknown_ranker_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest("-p", "no:xdist", *SMALL, "--restore-ranker", "dense")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown ranker 'dense'*bm25-lite, recency*"])


# -- the store adapter's checks ----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny() -> Dataset:
    return load_dataset(TINY)


def _history(tiny: Dataset) -> History:
    audit = Audit(tiny, AuditConfig(), reader=FakeReader(), judge=FakeJudge(), scorer=FakeScorer())
    return audit.questions[0].history


class KeepAll(MemoryStore):
    name = "keep-all"

    def reset(self, budget: int, ctx: EvictionContext) -> None:
        self.held: list[int] = []

    def add(self, unit: Unit) -> None:
        self.held.append(unit.position)

    def retained(self) -> Iterable[int]:
        return self.held


class Prophet(KeepAll):
    name = "prophet"

    def retained(self) -> Iterable[int]:
        return [*self.held, len(self.held)]  # the next unit, before it arrives


class Lazarus(KeepAll):
    name = "lazarus"

    def add(self, unit: Unit) -> None:
        super().add(unit)
        if unit.position == 1:
            self.held.remove(0)

    def retained(self) -> Iterable[int]:
        return [0, *self.held] if len(self.held) > 2 else self.held


def test_store_over_budget_is_caught_at_the_arrival(tiny: Dataset) -> None:
    h = _history(tiny)
    with pytest.raises(
        ValueError,
        match=r"memory store 'keep-all' on .* after unit \d+ arrived: holds \d+ tokens, over its budget of 100",
    ):
        KeepAll().retain(h.units, h.sizes, 100, EvictionContext(h.question.question_id))
    mask = KeepAll().retain(h.units, h.sizes, 10**9, EvictionContext(h.question.question_id))
    assert mask.dtype == np.bool_ and mask.all()


def test_store_cannot_hold_what_has_not_arrived_or_was_dropped(tiny: Dataset) -> None:
    h = _history(tiny)
    ctx = EvictionContext(h.question.question_id)
    with pytest.raises(ValueError, match="which it has not received"):
        Prophet().retain(h.units, h.sizes, 10**9, ctx)
    with pytest.raises(ValueError, match="holds unit 0 again after dropping it"):
        Lazarus().retain(h.units, h.sizes, 10**9, ctx)


def test_store_matches_the_equivalent_victim_policy(tiny: Dataset) -> None:
    """A store that drops its oldest unit is FIFO."""

    class OldestOut(KeepAll):
        name = "oldest-out"

        def reset(self, budget: int, ctx: EvictionContext) -> None:
            super().reset(budget, ctx)
            self.budget = budget
            self.sizes: dict[int, int] = {}

        def add(self, unit: Unit) -> None:
            super().add(unit)
            self.sizes[unit.position] = unit.tokens
            while sum(self.sizes[p] for p in self.held) > self.budget:
                self.held.pop(0)

    fifo = default_registry()["fifo"]
    audit = Audit(tiny, AuditConfig(), reader=FakeReader(), judge=FakeJudge(), scorer=FakeScorer())
    for p in audit.questions:
        for budget in (600, 300, 100):
            assert np.array_equal(
                audit.retain(OldestOut(), p, budget, 0, {}), audit.retain(fifo, p, budget, 0, {})
            )


# -- rankers ---------------------------------------------------------------------------------


def test_builtin_rankers(tiny: Dataset) -> None:
    assert list(default_rankers()) == ["bm25-lite", "recency"]
    h = _history(tiny)
    store = np.ones(len(h.units), dtype=bool)
    store[0] = False
    assert Recency().rank(h, store, 3, None) == [
        len(h.units) - 1,
        len(h.units) - 2,
        len(h.units) - 3,
    ]
    bm25 = Bm25Lite()
    assert bm25.rank(h, store, 60, bm25.prepare(h)) == injection.rank(
        injection.LexicalIndex.build(h), store
    )


def test_ranker_contract_is_checked(tiny: Dataset) -> None:
    h = _history(tiny)
    store = np.zeros(len(h.units), dtype=bool)
    store[[1, 2]] = True

    class Outside(Ranker):
        name = "outside"

        def rank(self, history: History, store: Store, k: int, state: Any) -> list[int]:
            return [0]

    class Twice(Ranker):
        name = "twice"

        def rank(self, history: History, store: Store, k: int, state: Any) -> list[int]:
            return [1, 1]

    with pytest.raises(ValueError, match="returned unit 0 .* not in the store"):
        checked_rank(Outside(), h, store, 60, None)
    with pytest.raises(ValueError, match="at most 60 distinct"):
        checked_rank(Twice(), h, store, 60, None)


def test_ranker_policy_and_provider_from_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each registry loads its own entry-point group: a class is instantiated, an instance taken."""

    class Shortest(ScoringRanker):
        name = "shortest"

        def scores(self, history: History, store: Store, state: Any) -> Sequence[float]:
            return [1.0 / u.tokens for u in history.units]

    class Local(ModelProvider):
        name = "local"

        def make(self, model: str, role: str, options: ModelOptions, *, use_cache: bool = True) -> ChatModel:
            return FakeReader(name=f"local:{model}")

    class EntryPoint:
        def __init__(self, obj: object) -> None:
            self.obj = obj

        def load(self) -> object:
            return self.obj

    finding = Family(name="finding", title="A finding", tests="none", statistic="-", build=lambda e, r, b: [])
    declared = {
        "pytest_restore.families": [EntryPoint(finding)],
        "pytest_restore.rankers": [EntryPoint(Shortest)],
        "pytest_restore.policies": [EntryPoint(KeepAll())],
        "pytest_restore.providers": [EntryPoint(Local)],
    }
    monkeypatch.setattr(registry, "entry_points", lambda group: declared.get(group, []))
    assert list(default_rankers()) == ["bm25-lite", "recency", "shortest"]
    assert list(default_registry())[-1] == "keep-all"
    providers = default_providers()
    assert list(providers) == ["openai", "anthropic", "f1", "local"]
    model = make_model("local:x", "reader", ModelOptions(cache_dir=Path(".")), providers=providers)
    assert model.name == "local:x"
    families = default_families()
    assert list(families) == [f.name for f in FAMILIES] + ["finding"] and families["finding"] is finding


def test_registries_share_one_shape_and_its_errors() -> None:
    for reg, wrong in ((default_registry(), Recency()), (default_rankers(), KeepAll())):
        with pytest.raises(TypeError, match="is not a pytest_restore"):
            reg.register(wrong)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a ranker named 'recency' is already registered"):
        default_rankers().register(Recency())
    with pytest.raises(ValueError, match="a model provider named 'openai' is already registered"):
        default_providers().register(OpenAIProvider())
    with pytest.raises(ValueError, match="a hypothesis family named 'H1' is already registered"):
        default_families().register(replace(FAMILIES[0], title="my own H1"))
    with pytest.raises(TypeError, match="is not a pytest_restore.stats.families.Family"):
        default_families().register(Recency())  # type: ignore[arg-type]
    with pytest.raises(ModelSpecError, match="unknown model 'local:x'"):
        make_model("local:x", "reader", ModelOptions(cache_dir=Path(".")))


def test_audit_with_a_users_ranker_names_it_in_every_record(tiny: Dataset) -> None:
    reader = FakeReader()
    audit = Audit(
        tiny,
        AuditConfig(budgets=(300,)),
        reader=reader,
        judge=FakeJudge(),
        scorer=FakeScorer(),
        ranker=Recency(),
    )
    reader.learn(p.history for p in audit.questions)
    records = audit.run_cell(default_registry()["fifo"], 300).records
    assert {r.ranker for r in records} == {"recency"}
