"""The calibration gate, run before the main grid (docs/PROTOCOL.md section 9; paper appendix A).

On a stratified, seeded subset of the audited questions (40 by default) the
gate measures three things, and the run stops when a threshold is missed:

- **Oracle-answerable rate**: the share of the subset whose clean-gold
  (oracle) answer the judge grades correct. Calls that failed are counted
  apart and are not in the rate's denominator. Reported; no threshold.
- **Judge repeat self-consistency** (>= 0.90): every graded answer of the
  calibration run (the oracle answers, and the policy and restored answers
  of the calibration cell) is graded ``repeats`` more times by a judge built
  *without* a response cache, so the repeats are real calls rather than
  replays of the first grade. An item is consistent when its first grade and
  all repeats give the same verdict. A reply that is not a verdict, or a call
  that failed after its retries, makes its item inconsistent (a grade we
  cannot read is no evidence of stability) and is counted in the report.
  Identical items (same question, same candidate text) are graded once.
- **Negative-restore-gain rate** (<= 0.05): one cell (default ``fifo`` at the
  largest budget, where the store keeps the most and the policy is most
  often right) is run on the subset. In regime (b), among the records that
  are not excluded and whose policy answer is correct, the share whose
  restored answer is wrong. Restoring gold should never hurt; a high rate
  means the restored context confuses the reader and the bins would be
  unreliable.

- **Judge probes** (each rate >= 0.90): the grid's judge grades answers
  whose verdict is known, three per calibration question: the reference
  answer itself (must be CORRECT), another question's reference that shares
  no word with it (must be INCORRECT) and "I don't know." (must be
  INCORRECT). A judge that says CORRECT to everything, or INCORRECT to
  everything, is perfectly self-consistent; the probes are what catch it.
  The share of references graded CORRECT and the share of wrong answers
  graded INCORRECT must each reach the threshold; an unreadable grade or a
  failed call counts against its probe.
- **Lenient-judge probes** (each accepted at most 0.10): two more wrong
  answers per question that a judge grading by topic or by form accepts:
  *vague but on topic* (the question's subject restated, none of the
  reference's words) and *specific but wrong* (the reference with its value
  changed, or another same-type question's reference); built from the
  question and the reference alone, no model call (see
  :mod:`pytest_restore.audit.probes`). Each probe kind's acceptance rate is
  reported (the share graded CORRECT), and the gate fails when any wrong kind
  (these two, another question's reference, "I don't know.") is accepted
  above ``max_wrong_acceptance``, every kind's figures in one line.

A figure that cannot be measured (no graded items, no policy-correct
record) fails the gate with its own reason: the gate never passes on no
evidence. The calibration cell runs through the audit's own (memoised,
possibly cached) models, so the main grid reuses its calls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pytest_restore.audit.judge_audit import API_ERROR, JudgeItem, grade, verdict_word
from pytest_restore.audit.probes import answer_tokens, specific_wrong, vague_answer
from pytest_restore.audit.run import Audit, Prepared, select_questions
from pytest_restore.memory.eviction import Fifo, Policy
from pytest_restore.models.base import ChatModel
from pytest_restore.models.prompts import DONT_KNOW

#: The regime the negative-restore-gain rate is measured in (pure top-k, as deployed).
GATE_REGIME = "b"
#: The judge probes' kinds: the candidate each is, and the verdict it must get.
PROBE_KINDS: tuple[tuple[str, str, bool], ...] = (
    ("reference", "the reference answer", True),
    ("other", "another question's reference", False),
    ("dont-know", f"{DONT_KNOW!r}", False),
    ("vague", "vague but on topic", False),
    ("specific-wrong", "specific but wrong", False),
)


@dataclass(frozen=True)
class CalibrationResult:
    """Every figure of the calibration gate, its thresholds and its decision."""

    questions: int
    question_ids: list[str]
    seed: int
    repeats: int
    judge: str
    fresh_judge: str
    policy: str
    budget: int
    # oracle-answerable rate
    oracle_correct: int
    oracle_graded: int
    oracle_failed: int
    oracle_answerable_rate: float | None
    # judge repeat self-consistency
    judge_items: int
    judge_consistent: int
    judge_not_a_verdict: int
    judge_failed_calls: int
    judge_consistency: float | None
    # negative-restore-gain rate (regime b of the calibration cell)
    policy_correct: int
    negative_restore_gain: int
    negative_gain_rate: float | None
    cell_records: int
    cell_excluded: int
    # judge probes: answers of known verdict graded by the grid's judge
    #: References graded CORRECT, of the reference probes.
    probe_reference_correct: int
    probe_reference: int
    #: Wrong answers (another question's reference, "I don't know.") graded INCORRECT, of those probes.
    probe_wrong_incorrect: int
    probe_wrong: int
    #: Of the wrong ones: "I don't know." graded INCORRECT, of those.
    probe_dont_know_incorrect: int
    probe_dont_know: int
    #: Probes whose grade could not be read or whose call failed (counted against their probe).
    probe_unreadable: int
    probe_reference_rate: float | None
    probe_wrong_rate: float | None
    # thresholds and decision
    min_consistency: float
    max_negative_gain: float
    min_probe_rate: float
    passed: bool
    reasons: list[str]
    #: Each inconsistent item: ``question_id``, ``sources``, ``candidate``, ``verdicts``
    #: (first grade, then the repeats; ``None`` for an unreadable grade).
    inconsistent: list[dict[str, Any]] = field(default_factory=list)
    #: Per probe kind (:data:`PROBE_KINDS`): how many were asked, and how many graded CORRECT
    probe_asked: dict[str, int] = field(default_factory=dict)
    probe_accepted: dict[str, int] = field(default_factory=dict)
    #: The highest acceptance rate a wrong probe kind may have
    max_wrong_acceptance: float = 0.10

    def acceptance(self, kind: str) -> float | None:
        """The share of ``kind``'s probes graded CORRECT (``None``: none asked)."""
        asked = self.probe_asked.get(kind, 0)
        return self.probe_accepted.get(kind, 0) / asked if asked else None

    def to_dict(self) -> dict[str, Any]:
        """Every figure as plain JSON values."""
        return asdict(self)

    def to_json(self) -> str:
        """Deterministic JSON (sorted keys, fixed indentation, trailing newline)."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CalibrationResult:
        """The result back from :meth:`to_dict`'s plain values (``summary.json``'s check)."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


def _at_least(value: float | None, threshold: float) -> bool:
    return value is not None and value >= threshold


def probe_items(subset: Sequence[Prepared], pool: Sequence[Prepared]) -> list[tuple[str, JudgeItem, bool]]:
    """The judge probes of ``subset``: ``(kind, item, expected verdict)``, up to five per question.

    The wrong answer of a question is the reference of the next question of
    ``pool`` (in order, wrapping round) that shares no word or number with its
    reference and is not the same text, so no fair judge could call it right;
    a question with no such other question has no wrong-answer probe. The
    vague and specific-but-wrong answers are :mod:`pytest_restore.audit.probes`';
    a question for which one cannot be built goes without it.
    """
    probes: list[tuple[str, JudgeItem, bool]] = []
    for p in subset:
        q = p.question
        here = next((i for i, other in enumerate(pool) if other.question.question_id == q.question_id), -1)
        own = answer_tokens(q.answer)
        other_answer = None
        later = [pool[(here + step) % len(pool)].question for step in range(1, len(pool))]
        for other in later:
            candidate = other.answer
            if candidate.strip().lower() != q.answer.strip().lower() and not (own & answer_tokens(candidate)):
                other_answer = candidate
                break
        shown_as = {
            "reference": q.answer,
            "other": other_answer,
            "dont-know": DONT_KNOW,
            "vague": vague_answer(q.question, q.answer),
            "specific-wrong": specific_wrong(q.answer, [o.answer for o in later if o.question_type == q.question_type]),
        }
        for kind, _said, expected in PROBE_KINDS:
            shown = shown_as[kind]
            if shown is None:
                continue
            item = JudgeItem(
                question_id=q.question_id,
                question_type=q.question_type,
                question=q.question,
                reference=q.answer,
                candidate=shown,
                first_verdict=expected,
                sources=(f"probe:{kind}",),
            )
            probes.append((kind, item, expected))
    return probes


def _versus(value: float, threshold: float) -> tuple[str, str]:
    """``value`` and ``threshold`` printed with two decimals, or more when two would look equal."""
    for places in range(2, 7):
        a, b = f"{value:.{places}f}", f"{threshold:.{places}f}"
        if a != b:
            return a, b
    return repr(value), repr(threshold)


def subset_of(audit: Audit, questions: int, seed: int) -> list[Prepared]:
    """The calibration questions: ``select_questions`` over the audited ones, as ``Prepared``."""
    by_id = {p.question.question_id: p for p in audit.questions}
    chosen = select_questions([p.question for p in audit.questions], questions, seed)
    return [by_id[q.question_id] for q in chosen]


def calibrate(
    audit: Audit,
    *,
    fresh_judge: ChatModel,
    questions: int = 40,
    seed: int = 0,
    repeats: int = 2,
    policy: Policy | None = None,
    budget: int | None = None,
    min_consistency: float = 0.90,
    max_negative_gain: float = 0.05,
    min_probe_rate: float = 0.90,
    max_wrong_acceptance: float = 0.10,
) -> CalibrationResult:
    """Run the calibration gate (definitions in the module docstring).

    ``fresh_judge`` must be the audit's judge model built with no response
    cache (and not wrapped in the audit's memo), or the repeats would replay
    the first grade. ``policy`` defaults to ``fifo`` and ``budget`` to the
    largest of ``audit.config.budgets``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if questions < 1:
        raise ValueError(f"questions must be at least 1, got {questions}")
    policy = policy or Fifo()
    budget = max(audit.config.budgets) if budget is None else budget
    subset = subset_of(audit, questions, seed)

    # -- oracle-answerable rate
    oracle = audit.oracle(subset)
    oracle_failed = sum(1 for o in oracle.values() if o.error is not None)
    oracle_graded = len(oracle) - oracle_failed
    oracle_correct = sum(1 for o in oracle.values() if o.error is None and o.correct)

    # -- the calibration cell and its negative restore gains
    run = audit.run_cell(policy, budget, questions=subset)
    gate_records = [r for r in run.records if r.regime == GATE_REGIME]
    counted = [r for r in gate_records if r.excluded is None and r.conditions.policy.correct is True]
    negative = sum(1 for r in counted if r.negative_restore_gain)

    # -- judge repeat self-consistency over every graded answer of the calibration run
    first: dict[tuple[str, str], list[bool | None]] = {}
    sources: dict[tuple[str, str], set[str]] = {}

    def add(qid: str, source: str, answer: str | None, verdict: bool | None) -> None:
        if answer is None:  # the reader failed: there is nothing to grade
            return
        first.setdefault((qid, answer), []).append(verdict)
        sources.setdefault((qid, answer), set()).add(source)

    for qid, outcome in oracle.items():
        add(qid, "oracle", outcome.answer, outcome.correct)
    for r in run.records:
        policy_, restored = r.conditions.policy, r.conditions.restored
        add(r.question_id, "policy", policy_.answer, policy_.correct)
        add(r.question_id, "restored", restored.answer, restored.correct)
    prepared = {p.question.question_id: p.question for p in subset}
    items = [
        JudgeItem(
            question_id=qid,
            question_type=prepared[qid].question_type,
            question=prepared[qid].question,
            reference=prepared[qid].answer,
            candidate=answer,
            first_verdict=None,
            sources=tuple(sorted(sources[(qid, answer)])),
        )
        for qid, answer in sorted(first)
    ]
    # One batch per repeat: a provider deduplicates identical requests inside
    # a batch, so repeats in one batch would collapse into one call.
    repeat_grades = [grade(fresh_judge, audit.prompts, items) for _ in range(repeats)]
    consistent = 0
    # a first grade that is missing (its reply was junk or its call failed) counts here
    not_a_verdict = sum(1 for verdicts in first.values() if None in verdicts)
    failed_calls = 0
    inconsistent = []
    for n, item in enumerate(items):
        grades = [g[n] for g in repeat_grades]
        # copies of one item normally share one first grade; differing ones
        # (a failed first call graded again later) are all kept, and disagree
        firsts = list(dict.fromkeys(first[(item.question_id, item.candidate)]))
        failed_calls += sum(1 for g in grades if g.kind == API_ERROR)
        not_a_verdict += sum(1 for g in grades if g.failure is not None and g.kind != API_ERROR)
        verdicts = firsts + [g.verdict for g in grades]
        if None not in verdicts and len(set(verdicts)) == 1:
            consistent += 1
        else:
            inconsistent.append(
                {
                    "question_id": item.question_id,
                    "sources": list(item.sources),
                    "candidate": item.candidate,
                    "verdicts": [None if v is None else verdict_word(v) for v in verdicts],
                }
            )

    # -- judge probes: the grid's judge (memoised and cached like every grid grade) on known verdicts
    # Only once the judge has graded something: with no oracle answer graded (the reader or the
    # judge failed) the gate fails on that already, and probing a dead judge only costs calls.
    probes = probe_items(subset, audit.questions) if oracle_graded else []
    probe_grades = grade(audit.judge, audit.prompts, [item for _, item, _ in probes])
    right = {kind: 0 for kind, _, _ in PROBE_KINDS}
    asked = {kind: 0 for kind, _, _ in PROBE_KINDS}
    for (kind, _item, expected), g in zip(probes, probe_grades):
        asked[kind] += 1
        right[kind] += g.verdict is expected
    probe_unreadable = sum(1 for g in probe_grades if g.verdict is None)
    accepted = {kind: 0 for kind, _, _ in PROBE_KINDS}
    for (kind, _item, _expected), g in zip(probes, probe_grades):
        accepted[kind] += g.verdict is True
    wrong_right, wrong_asked = right["other"] + right["dont-know"], asked["other"] + asked["dont-know"]
    reference_rate = right["reference"] / asked["reference"] if asked["reference"] else None
    wrong_rate = wrong_right / wrong_asked if wrong_asked else None

    consistency = consistent / len(items) if items else None
    oracle_rate = oracle_correct / oracle_graded if oracle_graded else None
    negative_rate = negative / len(counted) if counted else None
    cell = f"{policy.name} @ {budget} regime ({GATE_REGIME})"

    reasons = []
    if consistency is None:
        reasons.append(
            "judge self-consistency undefined: no answer of the calibration run could be graded"
        )
    elif consistency < min_consistency:
        shown, limit = _versus(consistency, min_consistency)
        reasons.append(
            f"judge self-consistency {shown} < {limit} ({len(items) - consistent} of {len(items)} "
            f"items disagree over 1 + {repeats} gradings; {not_a_verdict} not a verdict, "
            f"{failed_calls} failed calls)"
        )
    if probes and (not _at_least(reference_rate, min_probe_rate) or not _at_least(wrong_rate, min_probe_rate)):
        # one line with every figure: a judge that cannot tell right from wrong is named as such
        reasons.append(
            f"judge cannot tell right from wrong answers: {right['reference']} of {asked['reference']} "
            f"reference answers graded CORRECT, {wrong_right} of {wrong_asked} wrong ones graded INCORRECT "
            f"({right['dont-know']} of {asked['dont-know']} {DONT_KNOW!r}, {right['other']} of {asked['other']} "
            f"other questions' answers); {probe_unreadable} unreadable; each must be at least {min_probe_rate:.2f}"
        )
    lenient = [
        kind for kind, _said, expected in PROBE_KINDS
        if not expected and asked[kind] and accepted[kind] / asked[kind] > max_wrong_acceptance
    ]
    if lenient:
        reasons.append(lenient_line(asked, accepted, max_wrong_acceptance))
    if oracle_rate is None:
        reasons.append(f"oracle-answerable rate undefined: all {len(subset)} oracle calls failed")
    if negative_rate is None:
        reasons.append(f"negative-restore-gain rate undefined: no policy-correct record in {cell}")
    elif negative_rate > max_negative_gain:
        shown, limit = _versus(negative_rate, max_negative_gain)
        reasons.append(
            f"negative-restore-gain rate {shown} > {limit} ({negative} of {len(counted)} "
            f"policy-correct records in {cell})"
        )

    return CalibrationResult(
        questions=len(subset),
        question_ids=[p.question.question_id for p in subset],
        seed=seed,
        repeats=repeats,
        judge=audit.judge.name,
        fresh_judge=fresh_judge.name,
        policy=policy.name,
        budget=budget,
        oracle_correct=oracle_correct,
        oracle_graded=oracle_graded,
        oracle_failed=oracle_failed,
        oracle_answerable_rate=oracle_rate,
        judge_items=len(items),
        judge_consistent=consistent,
        judge_not_a_verdict=not_a_verdict,
        judge_failed_calls=failed_calls,
        judge_consistency=consistency,
        policy_correct=len(counted),
        negative_restore_gain=negative,
        negative_gain_rate=negative_rate,
        cell_records=len(gate_records),
        cell_excluded=sum(1 for r in gate_records if r.excluded is not None),
        probe_reference_correct=right["reference"],
        probe_reference=asked["reference"],
        probe_wrong_incorrect=wrong_right,
        probe_wrong=wrong_asked,
        probe_dont_know_incorrect=right["dont-know"],
        probe_dont_know=asked["dont-know"],
        probe_unreadable=probe_unreadable,
        probe_reference_rate=reference_rate,
        probe_wrong_rate=wrong_rate,
        min_consistency=min_consistency,
        max_negative_gain=max_negative_gain,
        min_probe_rate=min_probe_rate,
        passed=not reasons,
        reasons=reasons,
        inconsistent=inconsistent,
        probe_asked=asked,
        probe_accepted=accepted,
        max_wrong_acceptance=max_wrong_acceptance,
    )


def lenient_line(asked: Mapping[str, int], accepted: Mapping[str, int], limit: float) -> str:
    """The gate's one line for a judge that accepts wrong answers: every probe kind's acceptance, then the limit."""
    figures = ", ".join(
        f"{said} {accepted.get(kind, 0)} of {asked.get(kind, 0)}"
        + (f" ({accepted.get(kind, 0) / asked[kind]:.2f})" if asked.get(kind) else "")
        for kind, said, _expected in PROBE_KINDS
    )
    return f"judge accepts wrong answers: accepted {figures}; each wrong kind must be accepted at most {limit:.2f}"
