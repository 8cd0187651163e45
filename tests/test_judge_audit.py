"""Tests for the second-judge audit (pytest_restore.audit.judge_audit).

The second judge is a real ``OpenAIChatModel`` talking to
``openai_server.OpenAIServer`` through the official client; the server plays
the fake judge, or a stricter one.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from grid_helpers import flat_record
from openai_server import OpenAIServer

from pytest_restore.audit.judge_audit import (
    Agreement,
    JudgeAuditResult,
    allocate,
    audit_judge,
    cohen_kappa,
    collect_items,
    sample_items,
)
from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.dataset import Dataset, Question, load_dataset
from pytest_restore.memory.eviction import default_registry
from pytest_restore.models.base import ChatRequest, ChatResult
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.models.openai_chat import OpenAIChatModel
from pytest_restore.models.prompts import PromptSet
from pytest_restore.record import Record
from pytest_restore.report.checks import render_judge_audit_md

TINY = Path(__file__).resolve().parent.parent / "fixtures" / "tiny.json"
BUDGETS = (600, 300, 100)
DUMMY_KEY = "sk-test-DUMMY-KEY-0123456789"
Responder = Callable[[list[dict[str, Any]]], str]


def cohens_kappa(table: Any) -> Any:
    """statsmodels' Cohen's kappa of ``table``: statsmodels (and scipy) imported by the tests that compare with it,
    not at collection, where every xdist worker paid ~1 CPU s for them."""
    from statsmodels.stats.inter_rater import cohens_kappa as theirs  # type: ignore[import-untyped]

    return theirs(table)


@pytest.fixture(scope="module")
def tiny() -> Dataset:
    return load_dataset(TINY)


@pytest.fixture(scope="module")
def records(tiny: Dataset) -> list[Record]:
    """Records of a small fake-model grid on tiny.json (both regimes, all seeds of random)."""
    reader = FakeReader(name="fake-reader")
    audit = Audit(
        tiny,
        AuditConfig(budgets=BUDGETS),
        reader=reader,
        judge=FakeJudge(name="fake-judge"),
        scorer=FakeScorer(name="fake-scorer"),
    )
    reader.learn(p.history for p in audit.questions)
    registry = default_registry()
    return [
        r
        for name in ("no-evict", "fifo", "random", "control")
        for b in BUDGETS
        for r in audit.run_cell(registry[name], b).records
    ]


@pytest.fixture(scope="module")
def by_id(tiny: Dataset) -> dict[str, Question]:
    return {q.question_id: q for q in tiny.questions}


def user_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m["content"]) for m in messages if m["role"] == "user")


def fake_responder(messages: list[dict[str, Any]]) -> str:
    """The fake judge, served over HTTP."""
    return FakeJudge().grade(user_text(messages))


def stricter_responder(messages: list[dict[str, Any]]) -> str:
    """Like the fake judge, but it never passes an answer whose reference has a number."""
    prompt = user_text(messages)
    reference = prompt.split("\nReference answer: ", 1)[1].split("\nCandidate answer: ", 1)[0]
    if re.search(r"\d", reference):
        return "INCORRECT"
    return FakeJudge().grade(prompt)


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Responder], OpenAIChatModel]]:
    """Start a server with a responder; returns a real OpenAI judge pointed at it."""
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    servers: list[OpenAIServer] = []
    models: list[OpenAIChatModel] = []

    def start(responder: Responder) -> OpenAIChatModel:
        server = OpenAIServer(responder, expected_key=DUMMY_KEY).start()
        servers.append(server)
        model = OpenAIChatModel(
            model="gpt-5.5",
            base_url=server.base_url,
            cache=None,
            timeout=5.0,
            max_tries=2,
            backoff_base=0.005,
            backoff_cap=0.05,
        )
        models.append(model)
        return model

    yield start
    for model in models:
        model.close()
    for server in servers:
        server.stop()


# -- Cohen's kappa --------------------------------------------------------------------


def test_kappa_by_hand() -> None:
    # n = 50, p_o = 35/50 = 0.7; p_e = (25*30 + 25*20) / 50**2 = 0.5; kappa = 0.2 / 0.5
    kappa, note = cohen_kappa([[20, 5], [10, 15]])
    assert kappa == pytest.approx(0.4, abs=1e-12) and note is None
    # perfect agreement over both classes
    assert cohen_kappa([[7, 0], [0, 3]]) == (1.0, None)
    # appendix C's audit, its table rebuilt from the reported margins: 393 grades,
    # the second judge 132 CORRECT / 261 INCORRECT, stricter on 14, so 3 the other way
    table = [[129, 14], [3, 247]]
    kappa, _ = cohen_kappa(table)
    assert Agreement.of(
        [(True, True)] * 129 + [(True, False)] * 14 + [(False, True)] * 3 + [(False, False)] * 247
    ).agreement == pytest.approx(0.957, abs=5e-4)
    assert kappa == pytest.approx(0.90, abs=5e-3)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # statsmodels' z-value of a one-class row
@pytest.mark.parametrize(
    "table",
    [
        [[20, 5], [10, 15]],
        [[118, 14], [3, 258]],
        [[1, 9], [9, 1]],
        [[40, 1], [0, 2]],
        [[5, 5], [0, 0]],
    ],
)
def test_kappa_matches_statsmodels(table: list[list[int]]) -> None:
    kappa, _ = cohen_kappa(table)
    assert kappa is not None
    assert kappa == pytest.approx(float(cohens_kappa(np.array(table)).kappa), abs=1e-12)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_kappa_matches_statsmodels_on_random_tables() -> None:
    rng = random.Random(7)
    for _ in range(200):
        table = [[rng.randint(0, 30) for _ in range(2)] for _ in range(2)]
        kappa, _ = cohen_kappa(table)
        if kappa is None:
            continue
        assert kappa == pytest.approx(float(cohens_kappa(np.array(table)).kappa), abs=1e-12)


def test_kappa_degenerate_cases() -> None:
    kappa, note = cohen_kappa([[0, 0], [0, 0]])
    assert kappa is None and note is not None and "no completed grades" in note
    for table in ([[12, 0], [0, 0]], [[0, 0], [0, 9]]):
        kappa, note = cohen_kappa(table)
        assert kappa is None and note is not None and "single, identical class" in note
    # one judge uses one class: defined, but 0 at best
    kappa, note = cohen_kappa([[5, 5], [0, 0]])
    assert kappa == 0.0 and note is not None and "cannot exceed 0" in note
    with pytest.raises(ValueError, match="square"):
        cohen_kappa([[1, 2, 3], [4, 5, 6]])


def test_agreement_table_orientation() -> None:
    a = Agreement.of([(True, True), (True, False), (True, False), (False, True), (False, False)])
    assert a.table == ((1, 2), (1, 1))
    assert a.graded == 5 and a.agreement == pytest.approx(0.4)


# -- sampling ---------------------------------------------------------------------------


def test_allocate_is_proportional_by_largest_remainder() -> None:
    sizes = {
        ("CORRECT", "a"): 10,
        ("CORRECT", "b"): 5,
        ("INCORRECT", "a"): 3,
        ("INCORRECT", "b"): 2,
    }
    # quotas for 7 of 20: 3.5, 1.75, 1.05, 0.7 -> floors 3, 1, 1, 0 -> two leftovers to .75 and .7
    assert allocate(sizes, 7) == {
        ("CORRECT", "a"): 3,
        ("CORRECT", "b"): 2,
        ("INCORRECT", "a"): 1,
        ("INCORRECT", "b"): 1,
    }
    assert allocate(sizes, 100) == sizes
    assert sum(allocate(sizes, 13).values()) == 13


def test_items_are_distinct_and_carry_the_first_verdicts(
    records: list[Record], by_id: dict[str, Question]
) -> None:
    items, duplicates, conflicting = collect_items(records, by_id)
    answers = [
        (r.question_id, c.answer, c.correct)
        for r in records
        for c in (r.conditions.policy, r.conditions.restored)
        if c.answer is not None and c.correct is not None
    ]
    distinct = {(q, a) for q, a, _ in answers}
    assert len(items) == len(distinct) and conflicting == 0
    assert duplicates == len(answers) - len(distinct) > 0
    first = {(q, a): v for q, a, v in answers}
    for item in items:
        assert first[(item.question_id, item.candidate)] is item.first_verdict
        assert item.reference == by_id[item.question_id].answer
        assert set(item.sources) <= {"policy", "restored"}
    assert Counter(i.first_verdict for i in items).keys() == {True, False}
    assert any(i.sources == ("policy", "restored") for i in items)


def test_conflicting_first_verdicts_are_left_out(by_id: dict[str, Question]) -> None:
    qid = next(iter(by_id))
    base = {
        "question_id": qid,
        "question_type": by_id[qid].question_type,
        "restored_answer": None,
        "restored_correct": None,
    }
    recs = [
        flat_record(**base, policy_answer="x", policy_correct=True),
        flat_record(**base, policy_answer="x", policy_correct=False),
    ]
    items, duplicates, conflicting = collect_items(recs, by_id)
    assert (items, duplicates, conflicting) == ([], 1, 1)
    with pytest.raises(KeyError, match="not in questions_by_id"):
        collect_items(
            [flat_record(**{**base, "question_id": "nope"}, policy_answer="x", policy_correct=True)], by_id
        )


def test_sample_is_deterministic_stratified_and_order_free(
    records: list[Record], by_id: dict[str, Question]
) -> None:
    items, _, _ = collect_items(records, by_id)
    n = len(items) // 2
    shuffled = list(records)
    random.Random(3).shuffle(shuffled)
    items_shuffled, _, _ = collect_items(shuffled, by_id)
    assert sample_items(items, n, 0) == sample_items(items_shuffled, n, 0)
    assert sample_items(items, n, 0) != sample_items(items, n, 1)
    chosen = sample_items(items, n, 0)
    assert len(chosen) == n == len(set(chosen))

    def stratum(i: Any) -> tuple[str, str]:
        return ("CORRECT" if i.first_verdict else "INCORRECT", i.question_type)

    frame = Counter(stratum(i) for i in items)
    assert Counter(stratum(i) for i in chosen) == +Counter(allocate(frame, n))
    assert sample_items(items, 10**6, 0) == sorted(
        items, key=lambda i: (i.question_id, i.candidate)
    )


# -- the audit through the real client -------------------------------------------------------


def test_same_judge_agrees_fully(
    records: list[Record],
    by_id: dict[str, Question],
    serve: Callable[[Responder], OpenAIChatModel],
) -> None:
    judge = serve(fake_responder)
    result = audit_judge(records, by_id, judge, PromptSet(), sample=10, seed=0)
    assert (result.first_judge, result.second_judge) == ("fake-judge", "openai:gpt-5.5")
    assert result.population > 10
    assert result.sampled == 10 == result.graded
    assert (result.api_errors, result.not_a_verdict, result.failures) == (0, 0, [])
    assert result.agreement == 1.0 and result.kappa == 1.0 and result.kappa_note is None
    t = result.overall.table
    assert t[0][1] == t[1][0] == 0 and t[0][0] > 0 and t[1][1] > 0
    assert result.disagreements == []
    assert sum(s["sampled"] for s in result.strata) == 10
    assert sum(s["population"] for s in result.strata) == result.population
    assert set(result.by_source) == {"policy", "restored"}
    assert result.by_source["restored"].graded > 0


def test_stricter_judge_disagrees(
    records: list[Record],
    by_id: dict[str, Question],
    serve: Callable[[Responder], OpenAIChatModel],
) -> None:
    judge = serve(stricter_responder)
    result = audit_judge(records, by_id, judge, PromptSet(), sample=400, seed=0)
    assert result.sampled == result.population  # tiny: the whole frame fits in 400
    assert result.agreement is not None and result.agreement < 1
    # only ever stricter: it fails answers the first judge passed, never the reverse
    assert result.second_stricter > 0 and result.second_more_lenient == 0
    kappa, _ = cohen_kappa(result.overall.table)
    assert result.kappa == kappa
    assert result.kappa == pytest.approx(float(cohens_kappa(np.array(result.overall.table)).kappa))
    assert len(result.disagreements) == result.second_stricter
    for d in result.disagreements:
        assert (d["first"], d["second"]) == ("CORRECT", "INCORRECT")
        assert re.search(r"\d", by_id[d["question_id"]].answer)
    text = render_judge_audit_md(result)
    assert render_judge_audit_md(JudgeAuditResult.from_dict(json.loads(result.to_json()))) == text
    assert "| first \\ second | CORRECT | INCORRECT |" in text
    assert f"| CORRECT | {result.overall.table[0][0]} | {result.second_stricter} |" in text


def test_failures_are_excluded_and_counted(
    records: list[Record],
    by_id: dict[str, Question],
    serve: Callable[[Responder], OpenAIChatModel],
) -> None:
    items, _, _ = collect_items(records, by_id)
    junk_for = items[0].candidate

    def sometimes_junk(messages: list[dict[str, Any]]) -> str:
        if f"Candidate answer: {junk_for}\n" in user_text(messages):
            return "Well, it depends."
        return fake_responder(messages)

    judge = serve(sometimes_junk)
    result = audit_judge(records, by_id, judge, PromptSet(), sample=1000)
    junk = sum(1 for i in items if i.candidate == junk_for)
    assert result.not_a_verdict == junk > 0 and result.api_errors == 0
    assert result.graded == result.sampled - junk
    assert result.agreement == 1.0
    assert all(f["reason"].startswith("not a verdict: ") for f in result.failures)


class Failing:
    """A judge whose every call failed after its retries."""

    name = "failing"

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        return [ChatResult(None, error="HTTP 503 after 6 tries") for _ in requests]


def test_all_calls_failed(records: list[Record], by_id: dict[str, Question]) -> None:
    result = audit_judge(records, by_id, Failing(), PromptSet(), sample=10)
    assert result.api_errors == 10 and result.graded == 0
    assert result.agreement is None and result.kappa is None
    assert result.kappa_note is not None and "no completed grades" in result.kappa_note
    assert all(f["reason"] == "api_error: HTTP 503 after 6 tries" for f in result.failures)
    assert "n/a" in render_judge_audit_md(result)


def test_one_class_only(by_id: dict[str, Question]) -> None:
    # every recorded answer correct, and the second judge agrees: kappa undefined
    recs = [
        flat_record(
            question_id=q.question_id,
            question_type=q.question_type,
            judge="fake-judge",
            policy_answer=q.answer,
            policy_correct=True,
            restored_answer=None,
            restored_correct=None,
        )
        for q in by_id.values()
    ]
    result = audit_judge(recs, by_id, FakeJudge(), PromptSet())
    assert result.agreement == 1.0 and result.kappa is None
    assert result.kappa_note is not None and "single, identical class" in result.kappa_note
    assert "single, identical class" in render_judge_audit_md(result)


def test_json_is_deterministic(records: list[Record], by_id: dict[str, Question]) -> None:
    shuffled = list(records)
    random.Random(1).shuffle(shuffled)
    a = audit_judge(records, by_id, FakeJudge(), PromptSet(), sample=15, seed=2).to_json()
    b = audit_judge(shuffled, by_id, FakeJudge(), PromptSet(), sample=15, seed=2).to_json()
    assert a == b and a.endswith("\n")
    data = json.loads(a)
    for key in (
        "agreement",
        "kappa",
        "table",
        "failed",
        "strata",
        "sampled",
        "population",
        "by_source",
    ):
        assert key in data or key in data["overall"]
