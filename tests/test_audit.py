"""Tests for the audit: conditions, decomposition, records (pytest_restore.audit.run)."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_restore.audit.checks import construct_checks
from pytest_restore.audit.run import (
    ABSTENTION,
    OUTSIDE_SUBSET,
    Audit,
    AuditConfig,
    CellRun,
    select_questions,
)
from pytest_restore.data.dataset import Dataset, Question, load_dataset
from pytest_restore.data.units import Granularity
from pytest_restore.memory.eviction import default_registry
from pytest_restore.memory.retrieval import inject, rank, render_context
from pytest_restore.models.base import ChatRequest, ChatResult
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.models.prompts import PromptSet
from pytest_restore.record import Record, enters_n
from pytest_restore.stats.tally import tally

TINY = Path(__file__).resolve().parent.parent / "fixtures" / "tiny.json"
BUDGETS = (600, 300, 100)
POLICIES = ("no-evict", "fifo", "random", "redundancy", "llm-importance", "control")

# DESIGN.md, "Per-question records": every key and its type(s) in a record that is not excluded.
SCHEMA: dict[str, tuple[type, ...]] = {
    "question_id": (str,),
    "question_type": (str,),
    "policy": (str,),
    "budget": (int,),
    "seed": (int,),
    "regime": (str,),
    "reader": (str,),
    "judge": (str,),
    "scorer": (str, type(None)),  # None when the policy asks no scorer
    "conditions.oracle.correct": (bool,),
    "conditions.policy.correct": (bool,),
    "conditions.restored.correct": (bool,),
    "negative_restore_gain": (bool,),
    "gold_units": (int,),
    "gold_evicted": (int,),
    "bin": (str, type(None)),
    "excluded": (type(None),),
    "conditions.policy.answer": (str,),
    "conditions.restored.answer": (str,),
    "conditions.oracle.answer": (str,),
    "conditions.policy.injected_tokens": (int,),
    "conditions.restored.injected_tokens": (int,),
    "conditions.policy.injected_units": (int,),
    "conditions.restored.injected_units": (int,),
    "store_tokens": (int,),
    "store_units": (int,),
}


class Recorder:
    """Wraps a model, keeps every request it is sent, optionally rewrites results."""

    def __init__(
        self, model: Any, rewrite: Callable[[ChatRequest, ChatResult], ChatResult] | None = None
    ):
        self.model = model
        self.rewrite = rewrite
        self.requests: list[ChatRequest] = []

    @property
    def name(self) -> str:
        return str(self.model.name)

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        self.requests.extend(requests)
        results = self.model.run(requests)
        if self.rewrite is not None:
            results = [self.rewrite(r, res) for r, res in zip(requests, results)]
        return list(results)


def user_text(request: ChatRequest) -> str:
    return "\n".join(c for role, c in request.messages if role == "user")


def make_audit(
    dataset: Dataset,
    config: AuditConfig,
    *,
    reader_rewrite: Callable[[ChatRequest, ChatResult], ChatResult] | None = None,
    judge_rewrite: Callable[[ChatRequest, ChatResult], ChatResult] | None = None,
    scorer_rewrite: Callable[[ChatRequest, ChatResult], ChatResult] | None = None,
) -> tuple[Audit, FakeReader, dict[str, Recorder]]:
    fake_reader = FakeReader(name="fake-reader")
    models = {
        "reader": Recorder(fake_reader, reader_rewrite),
        "judge": Recorder(FakeJudge(name="fake-judge"), judge_rewrite),
        "scorer": Recorder(FakeScorer(name="fake-scorer"), scorer_rewrite),
    }
    audit = Audit(dataset, config, **models)  # type: ignore[arg-type]
    fake_reader.learn(p.history for p in audit.questions)
    return audit, fake_reader, models


def run_grid(audit: Audit, policies: Sequence[str] = POLICIES) -> list[CellRun]:
    registry = default_registry()
    return [audit.run_cell(registry[name], b) for name in policies for b in audit.config.budgets]


@pytest.fixture(scope="module")
def tiny() -> Dataset:
    return load_dataset(TINY)


@pytest.fixture(scope="module")
def grid(tiny: Dataset) -> tuple[Audit, FakeReader, dict[str, Recorder], list[CellRun]]:
    audit, reader, models = make_audit(tiny, AuditConfig(budgets=BUDGETS))
    return audit, reader, models, run_grid(audit)


def records_of(runs: list[CellRun]) -> list[Record]:
    return [r for run in runs for r in run.records]


# --- the clean grid -----------------------------------------------------------


def test_questions_and_exclusions(grid: Any, tiny: Dataset) -> None:
    audit, _, _, runs = grid
    assert [p.question.question_id for p in audit.questions] == [
        q.question_id for q in tiny.questions if not q.is_abstention
    ]
    assert audit.exclusion_counts() == {ABSTENTION: 1}
    assert {run.policy for run in runs} == set(POLICIES)


def test_record_counts_and_seeds(grid: Any) -> None:
    audit, _, _, runs = grid
    n = len(audit.questions)
    for run in runs:
        seeds = (0, 1, 2) if run.policy == "random" else (0,)
        assert len(run.records) == n * len(seeds) * 2
        keys = Counter((r.question_id, r.seed, r.regime) for r in run.records)
        assert set(keys.values()) == {1}
        assert {r.seed for r in run.records} == set(seeds)
        assert {r.budget for r in run.records} == {run.budget}
        assert {r.policy for r in run.records} == {run.policy}


def test_cell_checks_pass(grid: Any) -> None:
    audit, _, _, runs = grid
    for run in runs:
        assert construct_checks(run, audit) == []


def test_construct_checks_directly(grid: Any) -> None:
    _, _, _, runs = grid
    total_err = 0
    for run in runs:
        for regime in ("a", "b"):
            fig = tally(r for r in run.records if r.regime == regime)
            assert fig.irr + fig.rec + fig.res == fig.err
            assert fig.excluded == 0
            if regime == "a":
                assert fig.rec == 0
            if run.policy == "no-evict":
                assert fig.irr == 0 and fig.gold_evicted == 0
            total_err += fig.err
    assert total_err > 0  # the grid really has errors to bin


def test_grid_is_not_trivial(grid: Any) -> None:
    records = records_of(grid[3])
    bins = Counter(r.bin for r in records)
    assert bins["irreversible"] > 0
    assert any(r.conditions.oracle.correct for r in records)
    assert any(r.gold_evicted for r in records)
    # regime (b) has recoverable errors somewhere: the counterfactual can tell them apart
    assert any(r.bin == "recoverable" and r.regime == "b" for r in records)


def test_bins_only_on_oracle_answerable_errors(grid: Any) -> None:
    for r in records_of(grid[3]):
        if r.bin is None:
            assert not (enters_n(r) and r.conditions.policy.correct is False)
            continue
        assert enters_n(r) and r.conditions.policy.correct is False
        if r.bin == "residual":
            assert r.conditions.restored.correct is False
        else:
            assert r.conditions.restored.correct is True
            assert (r.bin == "irreversible") == (r.gold_evicted > 0)
        assert r.negative_restore_gain is False
    for r in records_of(grid[3]):
        assert r.negative_restore_gain == (
            r.conditions.policy.correct is True and r.conditions.restored.correct is False
        )


def field_at(record: Record, path: str) -> Any:
    """The field of ``record`` at a dotted path (``conditions.policy.answer``)."""
    value: Any = record
    for name in path.split("."):
        value = getattr(value, name)
    return value


def test_records_follow_the_schema(grid: Any) -> None:
    for r in records_of(grid[3]):
        for path, types in SCHEMA.items():
            assert type(field_at(r, path)) in types, (path, field_at(r, path))
        assert r.regime in ("a", "b")
        assert r.bin in (None, "irreversible", "recoverable", "residual")
        assert (r.reader, r.judge) == ("fake-reader", "fake-judge")
        assert r.scorer == ("fake-scorer" if r.policy == "llm-importance" else None)


def test_restored_condition_shared_by_both_regimes(grid: Any) -> None:
    by_key: dict[tuple[Any, ...], list[Record]] = {}
    for r in records_of(grid[3]):
        by_key.setdefault((r.question_id, r.policy, r.budget, r.seed), []).append(r)
    fields = (
        "conditions.restored.answer",
        "conditions.restored.correct",
        "conditions.restored.injected_tokens",
        "conditions.restored.injected_units",
        "conditions.oracle.answer",
        "conditions.oracle.correct",
        "gold_evicted",
        "store_tokens",
        "store_units",
    )
    for pair in by_key.values():
        assert sorted(r.regime for r in pair) == ["a", "b"]
        a, b = pair
        assert {f: field_at(a, f) for f in fields} == {f: field_at(b, f) for f in fields}


def test_conditions_rebuilt_from_the_protocol(grid: Any) -> None:
    """Every record's answers equal the fake reader's answer to the context docs/PROTOCOL.md section 5 defines."""
    audit, reader, _, runs = grid
    prompts = PromptSet()
    cap, k = audit.config.cap, audit.config.top_k

    def answer(p: Any, injected: list[int]) -> str:
        q = p.question
        snippets = render_context(p.history, injected)
        return reader.answer(
            user_text(
                prompts.reader(
                    question=q.question, question_date=q.question_date, snippets=snippets
                )
            )
        )

    prepared = {p.question.question_id: p for p in audit.questions}
    for run in runs:
        for r in run.records:
            p = prepared[r.question_id]
            h = p.history
            mask = run.stores[(r.question_id, r.seed)]
            gold = list(h.gold)
            assert r.gold_units == len(gold)
            assert r.gold_evicted == sum(not mask[g] for g in gold)
            assert r.store_tokens == int(h.sizes[mask].sum()) and r.store_units == int(
                mask.sum()
            )
            if run.policy != "no-evict":
                assert r.store_tokens <= run.budget
            restored_store = mask.copy()
            restored_store[gold] = True
            restored = inject(gold, rank(p.index, restored_store, k), h.sizes, cap)
            if r.regime == "a":
                policy = inject([g for g in gold if mask[g]], rank(p.index, mask, k), h.sizes, cap)
            else:
                policy = inject([], rank(p.index, mask, k), h.sizes, cap)
            assert r.conditions.oracle.answer == answer(p, gold)
            assert r.conditions.policy.answer == answer(p, policy)
            assert r.conditions.restored.answer == answer(p, restored)
            assert r.conditions.policy.injected_units == len(policy)
            assert r.conditions.policy.injected_tokens == int(h.sizes[policy].sum())
            assert r.conditions.restored.injected_units == len(restored)
            assert r.conditions.restored.injected_tokens == int(h.sizes[restored].sum())
            assert r.conditions.oracle.correct == (r.conditions.oracle.answer == h.question.answer)
            assert r.conditions.policy.correct == (r.conditions.policy.answer == h.question.answer)


def test_no_evict_store_is_everything(grid: Any) -> None:
    for run in grid[3]:
        if run.policy == "no-evict":
            assert all(m.all() for m in run.stores.values())


def test_nothing_reveals_gold_to_any_model(grid: Any) -> None:
    audit, _, models, _ = grid
    ids = {sid for p in audit.questions for sid in p.question.haystack_session_ids}
    ids |= {sid for p in audit.questions for sid in p.question.answer_session_ids}
    assert models["reader"].requests and models["judge"].requests and models["scorer"].requests
    for role in ("reader", "judge", "scorer"):
        for request in models[role].requests:
            text = "\n".join(c for _, c in request.messages)
            assert "has_answer" not in text
            assert not any(sid in text for sid in ids)
            if role != "judge":  # the judge sees the reference answer, never labels
                assert "answer_" not in text
    contents = {u.content for p in audit.questions for u in p.history.units}
    for request in models["scorer"].requests:  # the scorer gets one unit's content and nothing else
        text = user_text(request)
        m = re.fullmatch(r"Snippet: (.*)\nImportance \(1-10\):", text, re.DOTALL)
        assert m is not None and m.group(1) in contents
    questions = {p.question.question for p in audit.questions}
    for request in models["reader"].requests:
        assert request.temperature == 0.0
        assert any(f"Question: {q}\n" in user_text(request) for q in questions)


def test_each_distinct_request_sent_once(grid: Any) -> None:
    _, _, models, _ = grid
    for role in ("reader", "judge", "scorer"):
        requests = models[role].requests
        assert len(requests) == len(set(requests)), role


def test_each_context_read_and_judged_once_per_process(tiny: Dataset, monkeypatch: pytest.MonkeyPatch) -> None:
    """A context several cells read (the oracle's, a store no budget binds, nothing to restore) is read once per
    process: the reader's request made once per distinct context, the judge's once per distinct (question,
    reference, answer), though the grid's conditions ask for them many times over."""
    audit, _, models = make_audit(tiny, AuditConfig(budgets=BUDGETS))
    made: Counter[tuple[int, tuple[int, ...]]] = Counter()
    reader_request = audit.reader_request

    def counted(history: Any, injected: Sequence[int]) -> ChatRequest:
        made[(id(history), tuple(injected))] += 1
        return reader_request(history, injected)

    audit.reader_request = counted  # type: ignore[method-assign]
    judged: Counter[tuple[str, str, str]] = Counter()
    judge = PromptSet.judge

    def counted_judge(self: PromptSet, *, question: str, answer: str, prediction: str) -> ChatRequest:
        judged[(question, answer, prediction)] += 1
        return judge(self, question=question, answer=answer, prediction=prediction)

    monkeypatch.setattr(PromptSet, "judge", counted_judge)
    runs = run_grid(audit, ("no-evict", "fifo", "random", "control"))
    asked = len(audit.questions) + sum(3 * len(run.stores) for run in runs)  # the oracle's, then three a store
    assert set(made.values()) == {1} and set(judged.values()) == {1}
    assert len(made) < asked // 2 and len(judged) < len(made)
    assert len(models["reader"].requests) == len(made) and len(models["judge"].requests) == len(judged)
    # and the records say so: every context read, each a prompt of its own
    prompts = {c.prompt for r in records_of(runs) for _, c in r.conditions.by_name() if c.prompt is not None}
    assert len(prompts) == len(made)


def test_session_granularity_grid(tiny: Dataset) -> None:
    audit, _, _ = make_audit(
        tiny, AuditConfig(budgets=(300, 100), granularity=Granularity.SESSION, seeds=(0, 1))
    )
    for run in run_grid(audit):
        assert construct_checks(run, audit) == []
        for r in run.records:
            assert r.gold_units == len(audit.history(r.question_id).gold)


# --- failed calls -------------------------------------------------------------


def test_failed_reader_calls_exclude_records(tiny: Dataset, grid: Any) -> None:
    questions = [q for q in tiny.questions if not q.is_abstention]
    all_fail = questions[0].question  # every call of this question fails (the oracle too)
    some_fail = questions[3].question  # calls with any non-gold snippet fail

    gold_snippets = {
        p.question.question: {p.history.units[g].snippet for g in p.history.gold}
        for p in grid[0].questions
    }

    def rewrite(request: ChatRequest, result: ChatResult) -> ChatResult:
        text = user_text(request)
        if f"Question: {all_fail}\n" in text:
            return ChatResult(None, error="boom")
        if f"Question: {some_fail}\n" in text:
            block = text.split("Memory snippets:\n", 1)[1].split("\n\nQuestion: ", 1)[0]
            if set(block.split("\n\n")) != gold_snippets[some_fail]:
                return ChatResult(None, error="boom")
        return result

    audit, _, _ = make_audit(tiny, AuditConfig(budgets=BUDGETS), reader_rewrite=rewrite)
    runs = run_grid(audit)
    clean = {
        (r.question_id, r.policy, r.budget, r.seed, r.regime): r
        for r in records_of(grid[3])
    }
    partial = 0
    for r in records_of(runs):
        key = (r.question_id, r.policy, r.budget, r.seed, r.regime)
        if r.question_id == questions[0].question_id:
            assert r.excluded == "api_error: oracle reader"
            assert r.conditions.oracle.correct is None
        elif r.question_id == questions[3].question_id and r.excluded is not None:
            # a context holding exactly the gold snippets succeeds; every other one fails
            assert r.excluded in ("api_error: policy reader", "api_error: restored reader")
            assert r.conditions.oracle.correct is True
            partial += 1
        else:
            assert r == clean[key]  # other questions are untouched
            continue
        assert "boom" in r.error
        assert r.bin is None
        assert not enters_n(r)
        assert r.negative_restore_gain is False
    assert partial > 0
    for run, clean_run in zip(runs, grid[3]):
        assert (run.policy, run.budget) == (clean_run.policy, clean_run.budget)
        failed = {(r.question_id, r.seed, r.regime) for r in run.records if r.excluded}
        for regime in ("a", "b"):
            fig = tally(r for r in run.records if r.regime == regime)
            clean_recs = [r for r in clean_run.records if r.regime == regime]
            dropped = [r for r in clean_recs if (r.question_id, r.seed, regime) in failed]
            assert fig.excluded == len(dropped)
            assert fig.N == tally(clean_recs).N - sum(enters_n(r) for r in dropped)
            assert fig.N == sum(enters_n(r) for r in run.records if r.regime == regime)
        assert construct_checks(run, audit) == []


def test_a_failed_request_has_one_outcome_for_every_cell_that_shares_it(tiny: Dataset) -> None:
    # a rate limit that clears: each request fails the first time it is sent, then is answered
    sent: Counter[ChatRequest] = Counter()

    def first_try_fails(request: ChatRequest, result: ChatResult) -> ChatResult:
        sent[request] += 1
        return ChatResult(None, error="HTTP 429: rate limited") if sent[request] == 1 else result

    audit, _, _ = make_audit(tiny, AuditConfig(budgets=BUDGETS), reader_rewrite=first_try_fails)
    runs = run_grid(audit, ("no-evict", "fifo", "random"))
    assert set(sent.values()) == {1}  # no prompt paid for twice
    # every cell shares the oracle prompts, and so their failure: no cell got a second chance
    assert {r.excluded for r in records_of(runs)} == {"api_error: oracle reader"}
    # asked again (as the calibration gate's cell asks the grid's requests): the same outcomes, nothing sent
    before = sum(sent.values())
    assert audit.run_cell(default_registry()["fifo"], 600).records == runs[3].records
    assert sum(sent.values()) == before


def test_judge_reply_not_a_verdict_is_excluded(tiny: Dataset) -> None:
    target = next(q for q in tiny.questions if not q.is_abstention)

    def rewrite(request: ChatRequest, result: ChatResult) -> ChatResult:
        if f"Question: {target.question}\n" in user_text(request):
            return ChatResult("Well, it depends.")
        return result

    audit, _, _ = make_audit(tiny, AuditConfig(budgets=(100,)), judge_rewrite=rewrite)
    runs = run_grid(audit, ("fifo", "random"))
    hit = [r for r in records_of(runs) if r.question_id == target.question_id]
    assert hit
    for r in records_of(runs):
        if r.question_id == target.question_id:
            assert r.excluded == "api_error: oracle judge"
            assert "not a verdict" in r.error
            assert r.bin is None and r.conditions.oracle.correct is None
        else:
            assert r.excluded is None
    for run in runs:
        fig = tally(run.records)
        assert fig.excluded == sum(r.question_id == target.question_id for r in run.records)
        assert fig.N == sum(r.conditions.oracle.correct is True for r in run.records)


def test_failed_scorer_excludes_questions_using_that_content(tiny: Dataset) -> None:
    audit0, _, _ = make_audit(tiny, AuditConfig(budgets=(100,)))
    first = audit0.questions[0].history.units[0].content
    users = {
        p.question.question_id
        for p in audit0.questions
        if any(u.content == first for u in p.history.units)
    }

    def rewrite(request: ChatRequest, result: ChatResult) -> ChatResult:
        return (
            ChatResult(None, error="down")
            if user_text(request) == f"Snippet: {first}\nImportance (1-10):"
            else result
        )

    audit, _, _ = make_audit(tiny, AuditConfig(budgets=(100,)), scorer_rewrite=rewrite)
    (run,) = run_grid(audit, ("llm-importance",))
    for r in run.records:
        if r.question_id in users:
            assert r.excluded == "api_error: scorer"
            assert r.bin is None and r.conditions.policy.correct is None
            assert "down" in r.error
        else:
            assert r.excluded is None
    assert tally(run.records).excluded == 2 * len(users)
    assert construct_checks(run, audit) == []


# --- question subset ----------------------------------------------------------


def many_questions(tiny: Dataset, counts: dict[str, int]) -> list[Question]:
    base = tiny.questions[0]
    out = []
    for t, n in counts.items():
        for i in range(n):
            out.append(dataclasses.replace(base, question_id=f"{t}-{i}", question_type=t))
    # interleave so the file order is not grouped by type
    out.sort(key=lambda q: (int(q.question_id.rsplit("-", 1)[1]), q.question_type))
    return [dataclasses.replace(q, index=i) for i, q in enumerate(out)]


def test_select_questions_stratified(tiny: Dataset) -> None:
    qs = many_questions(tiny, {"a": 40, "b": 35, "c": 25})
    picked = select_questions(qs, 10, seed=0)
    assert len(picked) == 10
    # quotas 4, 3.5, 2.5 -> floors 4, 3, 2; the one leftover seat goes to the tied remainder "b"
    assert Counter(q.question_type for q in picked) == {"a": 4, "b": 4, "c": 2}
    ids = [q.question_id for q in qs]
    assert [q.question_id for q in picked] == [
        i for i in ids if i in {q.question_id for q in picked}
    ]
    assert select_questions(qs, 10, seed=0) == picked  # deterministic
    others = [select_questions(qs, 10, seed=s) for s in range(1, 5)]
    assert any(o != picked for o in others)
    for o in others:
        assert Counter(q.question_type for q in o) == {"a": 4, "b": 4, "c": 2}
    picked20 = select_questions(qs, 20, seed=0)
    assert Counter(q.question_type for q in picked20) == {"a": 8, "b": 7, "c": 5}
    assert select_questions(qs, 100, seed=0) == qs
    assert select_questions(qs, 500, seed=3) == qs
    assert select_questions(qs, 0, seed=0) == []


def test_subset_config_excludes_the_rest(tiny: Dataset) -> None:
    audit, _, _ = make_audit(tiny, AuditConfig(budgets=(100,), questions=4, subset_seed=1))
    assert len(audit.questions) == 4
    assert audit.exclusion_counts() == {ABSTENTION: 1, OUTSIDE_SUBSET: 3}
    (run,) = run_grid(audit, ("fifo",))
    assert {r.question_id for r in run.records} == {
        p.question.question_id for p in audit.questions
    }
    assert construct_checks(run, audit) == []


def test_one_pass_and_one_ranking_per_store(tiny: Dataset) -> None:
    """A cell runs the policy's loop once per (history, seed) store, asking nothing of it again for the gold's
    fates, and ranks each store once (plus the restored store where gold was evicted)."""
    audit, _, _ = make_audit(tiny, AuditConfig(budgets=(300,)))
    asked: Counter[str] = Counter()
    rank = audit.rank

    def counted_rank(*args: Any, **kwargs: Any) -> list[int]:
        asked["rank"] += 1
        return rank(*args, **kwargs)

    audit.rank = counted_rank  # type: ignore[method-assign]
    inside: list[str] = []  # a call the audit made, not one a policy's method makes inside another

    def counting(method: Callable[..., Any], name: str) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            asked[name] += not inside
            inside.append(name)
            try:
                return method(*args, **kwargs)
            finally:
                inside.pop()

        return counted

    for name in ("fifo", "random", "redundancy", "control"):
        policy = default_registry()[name]
        for method in ("retain", "evict", "eviction_arrivals"):
            setattr(policy, method, counting(getattr(policy, method), method))
        asked.clear()
        run = audit.run_cell(policy, 300)
        shared = {(audit.history(qid).question.history_key, seed) for qid, seed in run.stores}
        assert asked["evict"] == len(shared) and asked["retain"] == asked["eviction_arrivals"] == 0, name
        restored = sum(bool(r.gold_evicted) for r in run.records if r.regime == "a")
        assert asked["rank"] == len(run.stores) + restored, name
        assert any(r.gold_evicted_after and any(a is not None for a in r.gold_evicted_after) for r in run.records)


def test_a_ranker_whose_top_k_is_not_its_head_is_asked_for_both(tiny: Dataset) -> None:
    """A ranker that does not say its top k is the head of its whole order (``Ranker.top_k_is_head``) is asked
    twice per store: the contexts read its top k, the gold's ranks its whole order. Its top k here is the
    oldest units, its whole order newest first: regime (b) injects from the top k, not from the order's head."""
    from pytest_restore.data.units import History
    from pytest_restore.memory.retrieval import Ranker, Recency, Store

    class Contrary(Ranker):
        name = "contrary"

        def __init__(self) -> None:
            self.calls: Counter[str] = Counter()

        def rank(self, history: History, store: Store, k: int, state: Any) -> list[int]:
            members = [int(p) for p in np.flatnonzero(store)]
            whole = k >= len(members)
            self.calls["whole" if whole else "top"] += 1
            return members[::-1] if whole else members[:k]

    assert Recency.top_k_is_head and not Contrary.top_k_is_head
    fake_reader = FakeReader()
    ranker = Contrary()
    audit = Audit(tiny, AuditConfig(budgets=(300,), top_k=2), reader=fake_reader, judge=FakeJudge(), scorer=FakeScorer(), ranker=ranker)
    fake_reader.learn(p.history for p in audit.questions)
    planned = audit.conditions(default_registry()["fifo"], 300, audit.questions, {}, {})
    stores = len(planned.stores)
    restored = sum(1 for p, _seed, mask in planned.plan if mask is not None and not all(mask[g] for g in p.history.gold))
    assert ranker.calls["whole"] == stores and ranker.calls["top"] == stores + restored
    for (p, _seed, mask), i in zip(planned.plan, range(0, len(planned.contexts), 3)):
        assert mask is not None
        oldest = [int(x) for x in np.flatnonzero(mask)][:2]
        assert planned.contexts[i + 1][1] == inject([], oldest, p.history.sizes, audit.config.cap)  # regime (b)
        assert planned.rankings[(p.question.question_id, _seed)][0] == int(np.flatnonzero(mask)[-1])
