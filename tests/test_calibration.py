"""Tests for the calibration gate (pytest_restore.audit.calibration) with the fake models on tiny.json."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from pytest_restore.audit.calibration import CalibrationResult, _versus, calibrate, subset_of
from pytest_restore.audit.probes import answer_tokens, specific_wrong, vague_answer
from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.dataset import Dataset, load_dataset
from pytest_restore.memory.eviction import Fifo, default_registry
from pytest_restore.memory.retrieval import inject, rank, render_context
from pytest_restore.models.base import ChatModel, ChatRequest, ChatResult
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.models.prompts import DONT_KNOW
from pytest_restore.report.checks import render_calibration_md

TINY = Path(__file__).resolve().parent.parent / "fixtures" / "tiny.json"
BUDGETS = (600, 300, 100)

Rewrite = Callable[[int, int, ChatRequest, ChatResult], ChatResult]


class Wrapped:
    """A ChatModel around another; ``rewrite(call, position, request, result)`` may change results.

    ``call`` counts the ``run`` batches (from 0) and ``position`` is the
    request's place in its batch, so a test can misbehave deterministically.
    """

    def __init__(
        self, model: ChatModel, rewrite: Rewrite | None = None, name: str | None = None
    ) -> None:
        self.model = model
        self.rewrite = rewrite
        self._name = name or model.name
        self.batches: list[list[ChatRequest]] = []

    @property
    def name(self) -> str:
        return self._name

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        call = len(self.batches)
        self.batches.append(list(requests))
        results = self.model.run(requests)
        if self.rewrite is None:
            return list(results)
        rewrite = self.rewrite
        return [rewrite(call, n, req, res) for n, (req, res) in enumerate(zip(requests, results))]


def flip(result: ChatResult) -> ChatResult:
    """The opposite verdict."""
    return ChatResult("INCORRECT" if result.text == "CORRECT" else "CORRECT")


def make_audit(
    dataset: Dataset,
    reader_rewrite: Callable[[ChatRequest, ChatResult], ChatResult] | None = None,
    judge: ChatModel | None = None,
) -> Audit:
    """An audit of ``dataset`` with the fake models (the reader's results optionally rewritten)."""
    fake_reader = FakeReader(name="fake-reader")
    reader = Wrapped(
        fake_reader, None if reader_rewrite is None else (lambda c, n, q, r: reader_rewrite(q, r))
    )
    audit = Audit(
        dataset,
        AuditConfig(budgets=BUDGETS),
        reader=reader,
        judge=judge or FakeJudge(name="fake-judge"),
        scorer=FakeScorer(name="fake-scorer"),
    )
    fake_reader.learn(p.history for p in audit.questions)
    return audit


@pytest.fixture(scope="module")
def tiny() -> Dataset:
    return load_dataset(TINY)


# -- the clean gate --------------------------------------------------------------


def test_gate_passes_with_the_fake_models(tiny: Dataset) -> None:
    audit = make_audit(tiny)
    fresh = Wrapped(FakeJudge(name="fake-judge-fresh"))
    result = calibrate(audit, fresh_judge=fresh)

    assert result.passed and result.reasons == []
    # tiny.json has 7 evidence questions, fewer than 40: the subset is all of them
    assert result.questions == 7
    assert result.question_ids == [p.question.question_id for p in audit.questions]
    assert (result.oracle_correct, result.oracle_graded, result.oracle_failed) == (7, 7, 0)
    assert result.oracle_answerable_rate == 1.0
    assert result.judge_consistency == 1.0
    assert result.judge_consistent == result.judge_items > 0
    assert (result.judge_not_a_verdict, result.judge_failed_calls) == (0, 0)
    assert (result.policy, result.budget) == ("fifo", 600)  # fifo at the largest budget
    assert result.negative_gain_rate == 0.0 and result.policy_correct > 0
    assert result.cell_records == 7 and result.cell_excluded == 0
    assert (result.judge, result.fresh_judge) == ("fake-judge", "fake-judge-fresh")
    # the repeats are separate batches, each grading every item once
    assert len(fresh.batches) == 2
    assert all(len(b) == result.judge_items == len(set(b)) for b in fresh.batches)
    assert fresh.batches[0] == fresh.batches[1]


def test_items_are_the_distinct_graded_answers(tiny: Dataset) -> None:
    audit = make_audit(tiny)
    fresh = Wrapped(FakeJudge())
    result = calibrate(audit, fresh_judge=fresh)
    subset = subset_of(audit, 40, 0)
    run = audit.run_cell(Fifo(), 600, questions=subset)
    oracle = audit.oracle(subset)
    expected = {(qid, o.answer) for qid, o in oracle.items()}
    for r in run.records:
        expected.add((r.question_id, r.conditions.policy.answer))
        expected.add((r.question_id, r.conditions.restored.answer))
    assert result.judge_items == len(expected)
    graded = {req.messages[1][1] for req in fresh.batches[0]}
    by_id = {p.question.question_id: p.question for p in subset}
    for qid, answer in expected:
        q = by_id[qid]
        prompt = audit.prompts.judge(question=q.question, answer=q.answer, prediction=str(answer))
        assert prompt.messages[1][1] in graded


def test_subset_is_stratified_and_seeded(tiny: Dataset) -> None:
    audit = make_audit(tiny)
    result = calibrate(audit, fresh_judge=FakeJudge(), questions=3, seed=5)
    again = calibrate(audit, fresh_judge=FakeJudge(), questions=3, seed=5)
    assert result.question_ids == again.question_ids
    assert result.questions == 3
    types = [audit.history(q).question.question_type for q in result.question_ids]
    # 7 questions: 3 single-session-user, one of each other type; 3 seats go to
    # single-session-user (quota 1.29) and the two types first in name order
    assert types.count("single-session-user") == 1
    assert len(set(types)) == 3


def test_json_is_deterministic_and_complete(tiny: Dataset) -> None:
    first = calibrate(make_audit(tiny), fresh_judge=FakeJudge()).to_json()
    second = calibrate(make_audit(tiny), fresh_judge=FakeJudge()).to_json()
    assert first == second and first.endswith("\n")
    data = json.loads(first)
    for key in (
        "oracle_answerable_rate",
        "judge_consistency",
        "negative_gain_rate",
        "min_consistency",
        "max_negative_gain",
        "passed",
        "reasons",
    ):
        assert key in data
    assert list(data) == sorted(data)


def test_markdown_table(tiny: Dataset) -> None:
    result = calibrate(make_audit(tiny), fresh_judge=FakeJudge())
    text = render_calibration_md(result)
    # summary.json keeps the figures only: the section renders the same from them
    assert render_calibration_md(CalibrationResult.from_dict(json.loads(result.to_json()))) == text
    assert "| judge repeat self-consistency | 1.000 |" in text
    assert "| oracle-answerable rate | 1.000 | 7 of 7" in text
    assert "| negative-restore-gain rate | 0.000 |" in text
    assert "Calibration gate: **passed**." in text


# -- a judge that is not stable ------------------------------------------------------


def test_flipping_judge_fails_the_gate(tiny: Dataset) -> None:
    # the second repeat flips every third item: 3 of the 9 items disagree
    fresh = Wrapped(
        FakeJudge(), lambda call, n, req, res: flip(res) if call == 1 and n % 3 == 0 else res
    )
    result = calibrate(make_audit(tiny), fresh_judge=fresh)
    assert result.judge_items == 9
    assert result.judge_consistent == 6
    assert not result.passed
    assert result.reasons == [
        (
            "judge self-consistency 0.67 < 0.90 (3 of 9 items disagree over 1 + 2 gradings; "
            "0 not a verdict, 0 failed calls)"
        )
    ]
    assert len(result.inconsistent) == 3
    assert all(len(i["verdicts"]) == 3 for i in result.inconsistent)
    assert all(len(set(i["verdicts"])) == 2 for i in result.inconsistent)
    assert "Calibration gate: **failed**:" in render_calibration_md(result)
    assert "| >= 0.90 | **fail** |" in render_calibration_md(result)


def test_junk_and_failed_calls_count_as_disagreement(tiny: Dataset) -> None:
    def junk(call: int, n: int, req: ChatRequest, res: ChatResult) -> ChatResult:
        if call == 0 and n in (0, 4):
            return ChatResult("It depends.")
        if call == 1 and n == 8:
            return ChatResult(None, error="HTTP 500 after 6 tries")
        return res

    result = calibrate(make_audit(tiny), fresh_judge=Wrapped(FakeJudge(), junk))
    assert (result.judge_not_a_verdict, result.judge_failed_calls) == (2, 1)
    assert result.judge_consistent == 6
    assert result.reasons == [
        (
            "judge self-consistency 0.67 < 0.90 (3 of 9 items disagree over 1 + 2 gradings; "
            "2 not a verdict, 1 failed calls)"
        )
    ]
    assert sum(None in i["verdicts"] for i in result.inconsistent) == 3


def test_one_unstable_item_in_many_passes(tiny: Dataset) -> None:
    # with enough repeats nothing changes for a stable judge; 1 bad item of 9 is 0.89 < 0.90
    fresh = Wrapped(
        FakeJudge(), lambda call, n, req, res: flip(res) if (call, n) == (3, 2) else res
    )
    result = calibrate(make_audit(tiny), fresh_judge=fresh, repeats=4)
    assert len(fresh.batches) == 4
    assert result.judge_consistent == 8
    assert result.reasons[0].startswith("judge self-consistency 0.89 < 0.90 (1 of 9 items")
    assert calibrate(make_audit(tiny), fresh_judge=fresh, repeats=4, min_consistency=0.85).passed


def test_threshold_printing_never_looks_equal() -> None:
    assert _versus(0.85, 0.90) == ("0.85", "0.90")
    assert _versus(0.899, 0.90) == ("0.899", "0.900")
    assert _versus(0.0501, 0.05) == ("0.0501", "0.0500")


# -- a judge that cannot tell right from wrong -------------------------------------------


class OneWordJudge:
    """A broken judge: the same verdict for every answer (perfectly self-consistent)."""

    def __init__(self, verdict: str) -> None:
        self.verdict = verdict

    @property
    def name(self) -> str:
        return f"always-{self.verdict.lower()}"

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        return [ChatResult(self.verdict) for _ in requests]


def test_the_probes_are_known_verdicts(tiny: Dataset) -> None:
    result = calibrate(make_audit(tiny), fresh_judge=FakeJudge())
    # 7 questions, three probes each; every reference differs in its words from some other one
    assert (result.probe_reference_correct, result.probe_reference) == (7, 7)
    assert (result.probe_wrong_incorrect, result.probe_wrong) == (14, 14)
    assert (result.probe_dont_know_incorrect, result.probe_dont_know) == (7, 7)
    assert result.probe_reference_rate == result.probe_wrong_rate == 1.0 and result.passed
    assert "| judge probes: wrong answers graded INCORRECT | 1.000 | 14 of 14 (7 of 7 \"I don't know.\")" in (
        render_calibration_md(result)
    )


@pytest.mark.parametrize(
    ("verdict", "line"),
    [
        (
            "CORRECT",
            ("judge cannot tell right from wrong answers: 7 of 7 reference answers graded CORRECT, 0 of 14 wrong "
            "ones graded INCORRECT (0 of 7 \"I don't know.\", 0 of 7 other questions' answers); 0 unreadable; "
            "each must be at least 0.90"),
        ),
        (
            "INCORRECT",
            ("judge cannot tell right from wrong answers: 0 of 7 reference answers graded CORRECT, 14 of 14 wrong "
            "ones graded INCORRECT (7 of 7 \"I don't know.\", 7 of 7 other questions' answers); 0 unreadable; "
            "each must be at least 0.90"),
        ),
    ],
)
def test_a_judge_with_one_word_for_everything_fails_the_gate(tiny: Dataset, verdict: str, line: str) -> None:
    # the reader says "I don't know." every time (the case) or answers well: the gate fails either way
    for reader_rewrite in (None, lambda req, res: ChatResult(DONT_KNOW)):
        judge = OneWordJudge(verdict)
        result = calibrate(make_audit(tiny, reader_rewrite, judge=judge), fresh_judge=judge)
        assert result.judge_consistency == 1.0  # perfectly consistent, and useless
        assert not result.passed and line in result.reasons


# -- negative restore gains -------------------------------------------------------------


def restored_only_blocks(audit: Audit, budget: int) -> set[str]:
    """The fifo restored contexts at ``budget`` that differ from their regime-(b) context."""
    blocks = set()
    fifo = Fifo()
    for p in audit.questions:
        h = p.history
        mask = audit.retain(fifo, p, budget, 0, {})
        restored_store = mask.copy()
        restored_store[list(h.gold)] = True
        cap, k = audit.config.cap, audit.config.top_k
        restored = render_context(
            h, inject(list(h.gold), rank(p.index, restored_store, k), h.sizes, cap)
        )
        regime_b = render_context(h, inject([], rank(p.index, mask, k), h.sizes, cap))
        if restored != regime_b:
            blocks.add(restored)
    return blocks


def test_negative_restore_gains_fail_the_gate(tiny: Dataset) -> None:
    # With the fake reader a regime-(b) answer is right only when all gold is
    # injected, and then the restored context is the same context: negative
    # gains cannot happen. So this reader guesses right without the gold and
    # is confused by exactly the restored contexts that differ from regime (b).
    probe = make_audit(tiny)
    blocks = restored_only_blocks(probe, 600)
    assert blocks
    answers = {p.question.question: p.question.answer for p in probe.questions}

    def lucky_then_confused(request: ChatRequest, result: ChatResult) -> ChatResult:
        user = request.messages[1][1]
        block = user.split("Memory snippets:\n", 1)[1].rsplit("\n\nQuestion: ", 1)[0]
        if block in blocks:
            return ChatResult(DONT_KNOW)
        if result.text == DONT_KNOW:
            question = user.rsplit("\n\nQuestion: ", 1)[1].rsplit("\nAnswer:", 1)[0]
            return ChatResult(answers[question])
        return result

    result = calibrate(make_audit(tiny, lucky_then_confused), fresh_judge=FakeJudge())
    assert result.negative_restore_gain == len(blocks) == 2
    assert result.policy_correct == 7
    assert result.negative_gain_rate == 2 / 7
    assert not result.passed
    assert result.reasons == [
        "negative-restore-gain rate 0.29 > 0.05 (2 of 7 policy-correct records in fifo @ 600 regime (b))"
    ]
    assert "| <= 0.05 | **fail** |" in render_calibration_md(result)


def test_unmeasurable_rate_fails(tiny: Dataset) -> None:
    # at 100 tokens fifo keeps no gold: no policy answer is correct, the rate is undefined
    result = calibrate(make_audit(tiny), fresh_judge=FakeJudge(), budget=100)
    assert result.policy_correct == 0 and result.negative_gain_rate is None
    assert result.reasons == [
        "negative-restore-gain rate undefined: no policy-correct record in fifo @ 100 regime (b)"
    ]
    other = calibrate(
        make_audit(tiny), fresh_judge=FakeJudge(), policy=default_registry()["no-evict"], budget=100
    )
    assert other.passed and other.policy == "no-evict"


def test_failed_reader_fails_every_check(tiny: Dataset) -> None:
    audit = make_audit(tiny, lambda req, res: ChatResult(None, error="HTTP 503"))
    result = calibrate(audit, fresh_judge=FakeJudge())
    assert (result.oracle_graded, result.oracle_failed, result.oracle_answerable_rate) == (
        0,
        7,
        None,
    )
    assert result.judge_items == 0 and result.cell_excluded == 7
    assert result.reasons == [
        "judge self-consistency undefined: no answer of the calibration run could be graded",
        "oracle-answerable rate undefined: all 7 oracle calls failed",
        "negative-restore-gain rate undefined: no policy-correct record in fifo @ 600 regime (b)",
    ]


def test_bad_arguments(tiny: Dataset) -> None:
    with pytest.raises(ValueError, match="repeats"):
        calibrate(make_audit(tiny), fresh_judge=FakeJudge(), repeats=0)
    with pytest.raises(ValueError, match="questions"):
        calibrate(make_audit(tiny), fresh_judge=FakeJudge(), questions=0)


# -- a lenient judge: accepts an answer on topic ----------------------------------------------


class TopicalJudge:
    """A lenient judge: CORRECT when the candidate holds a word of the question (or is the reference)."""

    name = "topical"

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        out = []
        for request in requests:
            prompt = request.messages[-1][1]
            question = prompt.split("Question: ", 1)[1].split("\n", 1)[0]
            reference = prompt.split("\nReference answer: ", 1)[1].split("\nCandidate answer: ", 1)[0]
            candidate = prompt.split("\nCandidate answer: ", 1)[1].split("\n\nVerdict", 1)[0]
            topical = bool(answer_tokens(question) & answer_tokens(candidate))
            out.append(ChatResult("CORRECT" if topical or candidate == reference else "INCORRECT"))
        return out


def test_a_judge_accepting_answers_on_topic_fails_the_gate_with_its_rates_in_one_line(tiny: Dataset) -> None:
    judge = TopicalJudge()
    result = calibrate(make_audit(tiny, judge=judge), fresh_judge=judge)
    assert not result.passed
    # the old probes do not see it: references accepted, other answers and "I don't know." refused
    assert result.probe_reference_rate == 1.0 and result.probe_wrong_rate == 1.0
    assert result.probe_asked == {"reference": 7, "other": 7, "dont-know": 7, "vague": 7, "specific-wrong": 3}
    # "11 books" for "How many books have I read this year?" holds a word of the question: accepted too
    assert result.acceptance("vague") == 1.0 and result.probe_accepted["specific-wrong"] == 1
    assert result.reasons == [
        ("judge accepts wrong answers: accepted the reference answer 7 of 7 (1.00), another question's reference 0 of 7 "
        "(0.00), \"I don't know.\" 0 of 7 (0.00), vague but on topic 7 of 7 (1.00), specific but wrong 1 of 3 (0.33); "
        "each wrong kind must be accepted at most 0.10")
    ]
    assert "| judge probes: vague but on topic accepted | 1.000 | 7 of 7 | <= 0.10 | **fail** |" in render_calibration_md(result)
    # the figures travel through summary.json's plain values
    again = CalibrationResult.from_dict(json.loads(result.to_json()))
    assert again.probe_accepted == result.probe_accepted and again.acceptance("vague") == 1.0


def test_the_fake_judge_passes_the_lenient_probes(tiny: Dataset) -> None:
    result = calibrate(make_audit(tiny), fresh_judge=FakeJudge())
    assert result.passed
    assert result.probe_accepted == {"reference": 7, "other": 0, "dont-know": 0, "vague": 0, "specific-wrong": 0}


@pytest.mark.parametrize(
    ("reference", "wrong"),
    [
        ("10 years ago", "13 years ago"),
        ("The sunday before 25 May 2023", "The sunday before 28 May 2020"),
        ("Wednesdays", "Saturdays"),
        ("in May", "in November"),
        ("two", "five"),
        ("Lisbon", "a red bicycle"),  # no value to change: a same-type reference sharing no word, closest in length
    ],
)
def test_specific_but_wrong_answers_keep_the_form_and_change_the_value(reference: str, wrong: str) -> None:
    assert specific_wrong(reference, ["Lisbon", "the Lisbon flat near the river", "a red bicycle"]) == wrong


def test_vague_answers_name_the_subject_and_none_of_the_reference() -> None:
    assert vague_answer("When did Melanie paint a sunrise?", "2022") == (
        "That was about Melanie, paint and sunrise, as the conversation said."
    )
    # a word of the reference is never in it: the answer says nothing of the fact
    assert vague_answer("Where does Paula live, Lisbon?", "Lisbon") == "That was about Paula and live, as the conversation said."
    assert vague_answer("What is it?", "a cat") is None
