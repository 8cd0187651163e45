"""What a record says of its conditions: each condition's answer scores, the importance scores' counts,
where a unit or a derived memory sits in the haystack (the report's cases).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from pytest_restore.audit.outcomes import Outcome
from pytest_restore.audit.questions import Prepared
from pytest_restore.data.answer_metrics import bleu1, category_of, locomo_f1
from pytest_restore.data.dataset import Question
from pytest_restore.data.units import Unit
from pytest_restore.record import Condition


def record_condition(outcome: Outcome | None, question: Question, *, oracle: bool = False) -> Condition:
    """A condition of the record from its outcome (all null when the condition did not run; the oracle has no sizes)."""
    if outcome is None:
        return Condition(None)
    f1, bleu = answer_scores(outcome.answer, question)
    return Condition(
        outcome.correct,
        outcome.answer,
        outcome.prompt,
        None if oracle else outcome.injected_tokens,
        None if oracle else outcome.injected_units,
        outcome.injected,
        f1,
        bleu,
        outcome.reader_tokens,
        outcome.judge_tokens,
        outcome.tokens_estimated if outcome.reader_tokens is not None else None,
    )


def answer_scores(answer: str | None, question: Question) -> tuple[float | None, float | None]:
    """LoCoMo's token F1 (by the question's category) and BLEU-1 of an answer, rounded to 6 places; nulls for no answer."""
    if answer is None:
        return None, None
    return _scores(answer, question.answer, question.question_type)


@lru_cache(maxsize=1 << 16)
def _scores(answer: str, reference: str, question_type: str) -> tuple[float, float]:
    # each answer once per reference: a question's records repeat its answers across cells and conditions
    # (the 500-question grid scored 53,580 conditions per process)
    f1 = locomo_f1(answer, reference, category_of(question_type))
    return round(f1, 6) + 0.0, round(bleu1(answer, reference), 6) + 0.0


def score_counts(prepared: Prepared, importance: Mapping[str, int]) -> tuple[int, ...] | None:
    """How many units of the question's history the scorer gave each score 1-10 (``None``: not all scored)."""
    counts = [0] * 10
    for unit in prepared.history.units:
        score = importance.get(unit.content)
        if score is None or not 1 <= score <= 10:
            return None
        counts[score - 1] += 1
    return tuple(counts)


@dataclass(frozen=True)
class Forced:
    """Regime (a)'s outcome (the held memories citing gold forced) and what a record's own condition injected."""

    outcome: Outcome
    injected: Sequence[int]


def memory_label(memory: Unit, sources: Sequence[int], units: Sequence[Unit]) -> str:
    """Where a derived memory came from: ``memory of session S, turns T-U (date)`` (sessions joined when several)."""
    by_session: dict[int, list[int]] = {}
    for s in sources:
        by_session.setdefault(units[s].session, []).append(units[s].turn)
    parts = []
    for session, turns in by_session.items():
        span = f"turn {turns[0]}" if len(turns) == 1 else f"turns {min(turns)}-{max(turns)}"
        parts.append(f"session {session}, {span}")
    return f"memory of {'; '.join(parts)} ({memory.date})"


def unit_label(unit: Unit) -> str:
    """Where a unit sits in the haystack, for the report's cases (no gold is revealed to a model)."""
    where = f"session {unit.session}" + (f", turn {unit.turn}" if unit.turn >= 0 else "")
    return f"{where} ({unit.date}, {unit.role})"
