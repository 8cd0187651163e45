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

A figure that cannot be measured (no graded items, no policy-correct
record) fails the gate with its own reason: the gate never passes on no
evidence. The calibration cell runs through the audit's own (memoised,
possibly cached) models, so the main grid reuses its calls.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_restore.audit.judge_audit import API_ERROR, JudgeItem, grade, verdict_word
from pytest_restore.audit.run import Audit, Prepared, select_questions
from pytest_restore.memory.eviction import Fifo, Policy
from pytest_restore.models.base import ChatModel

#: The regime the negative-restore-gain rate is measured in (pure top-k, as deployed).
GATE_REGIME = "b"


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
    # thresholds and decision
    min_consistency: float
    max_negative_gain: float
    passed: bool
    reasons: list[str]
    #: Each inconsistent item: ``question_id``, ``sources``, ``candidate``, ``verdicts``
    #: (first grade, then the repeats; ``None`` for an unreadable grade).
    inconsistent: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Every figure as plain JSON values."""
        return asdict(self)

    def to_json(self) -> str:
        """Deterministic JSON (sorted keys, fixed indentation, trailing newline)."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=2, ensure_ascii=False) + "\n"

    def render_markdown(self) -> str:
        """A small table for report.md, then the decision and its reasons."""
        ok = {True: "pass", False: "**fail**"}
        consistency_ok = (
            self.judge_consistency is not None and self.judge_consistency >= self.min_consistency
        )
        negative_ok = (
            self.negative_gain_rate is not None
            and self.negative_gain_rate <= self.max_negative_gain
        )
        lines = [
            (
                f"Calibration on {self.questions} questions (seed {self.seed}); "
                f"cell `{self.policy}` @ {self.budget}, regime ({GATE_REGIME})."
            ),
            "",
            "| check | value | counts | threshold | result |",
            "|---|---:|---|---:|---|",
            (
                f"| judge repeat self-consistency | {_num(self.judge_consistency)} | "
                f"{self.judge_consistent} of {self.judge_items} items agree over "
                f"1 + {self.repeats} gradings; {self.judge_not_a_verdict} not a verdict, "
                f"{self.judge_failed_calls} failed calls | "
                f">= {self.min_consistency:.2f} | {ok[consistency_ok]} |"
            ),
            (
                f"| oracle-answerable rate | {_num(self.oracle_answerable_rate)} | "
                f"{self.oracle_correct} of {self.oracle_graded}; {self.oracle_failed} failed calls | "
                f"reported | {'n/a' if self.oracle_answerable_rate is None else 'ok'} |"
            ),
            (
                f"| negative-restore-gain rate | {_num(self.negative_gain_rate)} | "
                f"{self.negative_restore_gain} of {self.policy_correct} policy-correct records; "
                f"{self.cell_excluded} excluded | <= {self.max_negative_gain:.2f} | "
                f"{ok[negative_ok]} |"
            ),
            "",
        ]
        if self.passed:
            lines.append("Calibration gate: **passed**.")
        else:
            lines.append("Calibration gate: **failed**:")
            lines.append("")
            lines.extend(f"- {reason}" for reason in self.reasons)
        return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


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
    gate_records = [r for r in run.records if r["regime"] == GATE_REGIME]
    counted = [r for r in gate_records if r["excluded"] is None and r["policy_correct"] is True]
    negative = sum(1 for r in counted if r["negative_restore_gain"])

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
        add(r["question_id"], "policy", r["policy_answer"], r["policy_correct"])
        add(r["question_id"], "restored", r["restored_answer"], r["restored_correct"])
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
        cell_excluded=sum(1 for r in gate_records if r["excluded"] is not None),
        min_consistency=min_consistency,
        max_negative_gain=max_negative_gain,
        passed=not reasons,
        reasons=reasons,
        inconsistent=inconsistent,
    )
