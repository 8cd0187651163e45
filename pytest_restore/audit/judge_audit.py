"""The second-judge audit (docs/PROTOCOL.md section 9; the paper's appendix C).

A second, independent judge re-grades a stratified sample of the grades the
first judge gave during the audit, with the same frozen judge prompt, and
we report how often the two agree and Cohen's kappa.

Definitions:

- **Items.** One item is a recorded ``(question, reference, candidate,
  first-judge verdict)``, drawn from the answers and verdicts of the records'
  policy and restored conditions (``record.conditions.policy``, ``.restored``).
  An answer counts when the record holds both the text and its verdict, so a
  call that failed during the audit contributes nothing. Identical items
  (same question id, same candidate text) are graded once: the same answer
  reappears across regimes, seeds, budgets and as both a policy and a
  restored answer, and re-grading it would only weight it more. An item
  whose copies carry different first verdicts has no single first verdict
  to compare with; it is left out and counted.
- **Sample.** Strata are (first verdict, question type). Seats are shared
  out proportionally to stratum size by largest remainder (ties to the
  stratum that sorts first), and each stratum is sampled with its own
  generator seeded by ``(seed, verdict, type)`` from its items in a fixed
  order, so the sample depends on neither the records' order nor on the
  other strata.
- **Failures.** A second-judge call that failed after its retries, or a
  reply that is not a verdict, is excluded from agreement and kappa and
  counted by kind.
- **Agreement** is the share of completed grades on which the judges agree.
  **Kappa** is Cohen's ``(p_o - p_e) / (1 - p_e)`` over the 2x2 table; it is
  ``None`` (with a note) when there are no completed grades or when both
  judges used a single, identical class, because chance agreement is then 1
  and kappa is 0/0.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pytest_restore.data.dataset import Question
from pytest_restore.memory.eviction import stable_seed
from pytest_restore.models.base import ChatModel
from pytest_restore.models.prompts import PromptSet, parse_verdict
from pytest_restore.record import Record

#: Where an item comes from: the record's conditions whose answers are re-graded.
SOURCES: tuple[str, ...] = ("policy", "restored")

#: Failure kinds of a re-grade, as counted and reported.
API_ERROR = "api_error"
NOT_A_VERDICT = "not a verdict"


def verdict_word(verdict: bool) -> str:
    """``CORRECT`` or ``INCORRECT``, as the judge prompt spells them."""
    return "CORRECT" if verdict else "INCORRECT"


# -- grading ----------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeItem:
    """One thing a judge grades: a candidate answer to a question, with its reference."""

    question_id: str
    question_type: str
    question: str
    reference: str
    candidate: str
    #: The first judge's verdict (``None`` when it had none, e.g. its reply was junk).
    first_verdict: bool | None
    #: Where the candidate was recorded (``oracle``, ``policy``, ``restored``), sorted.
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class Grade:
    """One judge reply, read."""

    verdict: bool | None
    #: ``None``, or ``"api_error: ..."`` / ``"not a verdict: '...'"``.
    failure: str | None = None

    @property
    def kind(self) -> str | None:
        """The failure kind: ``API_ERROR``, ``NOT_A_VERDICT`` or ``None``."""
        if self.failure is None:
            return None
        return API_ERROR if self.failure.startswith(API_ERROR) else NOT_A_VERDICT


def grade(judge: ChatModel, prompts: PromptSet, items: Sequence[JudgeItem]) -> list[Grade]:
    """Grade every item with ``judge`` in one batch, in order.

    The request is the audit's own judge request, so a second judge sees
    exactly what the first one saw.
    """
    requests = [
        prompts.judge(question=i.question, answer=i.reference, prediction=i.candidate)
        for i in items
    ]
    grades = []
    for result in judge.run(requests):
        if not result.ok or result.text is None:
            grades.append(Grade(None, f"{API_ERROR}: {result.error}"))
            continue
        verdict = parse_verdict(result.text)
        if verdict is None:
            grades.append(Grade(None, f"{NOT_A_VERDICT}: {result.text!r}"))
        else:
            grades.append(Grade(verdict))
    return grades


# -- Cohen's kappa -------------------------------------------------------------------


def cohen_kappa(table: Sequence[Sequence[int]]) -> tuple[float | None, str | None]:
    """Cohen's kappa of a square agreement table (rows: rater 1, columns: rater 2).

    Returns ``(kappa, note)``. Computed from integer counts as
    ``(n * agree - sum_k r_k c_k) / (n**2 - sum_k r_k c_k)``, which is
    ``(p_o - p_e) / (1 - p_e)`` multiplied through by ``n**2``, so the
    degenerate case is an exact zero test rather than a float comparison.
    ``kappa`` is ``None`` with a note when the table is empty or both raters
    used one and the same class only (chance agreement 1, kappa 0/0). When
    only one rater used a single class, kappa is defined but cannot exceed
    0; the note says so.
    """
    k = len(table)
    if any(len(row) != k for row in table):
        raise ValueError(f"agreement table must be square, got {[len(r) for r in table]} x {k}")
    n = sum(sum(row) for row in table)
    if n == 0:
        return None, "no completed grades: kappa is undefined"
    rows = [sum(row) for row in table]
    cols = [sum(table[i][j] for i in range(k)) for j in range(k)]
    agree = sum(table[i][i] for i in range(k))
    chance = sum(r * c for r, c in zip(rows, cols))
    if n * n == chance:
        return (
            None,
            "both judges gave a single, identical class: kappa is undefined (chance agreement 1)",
        )
    kappa = (n * agree - chance) / (n * n - chance)
    note = None
    if sum(1 for r in rows if r) == 1 or sum(1 for c in cols if c) == 1:
        note = "one judge gave a single class only: kappa cannot exceed 0"
    return kappa, note


# -- the audit ---------------------------------------------------------------------------


def allocate(sizes: Mapping[tuple[str, str], int], n: int) -> dict[tuple[str, str], int]:
    """Seats per stratum: proportional to ``sizes``, by largest remainder, ``n`` in all.

    Ties in the remainder go to the stratum that sorts first. With ``n`` at
    or above the total every stratum is taken whole.
    """
    total = sum(sizes.values())
    if n >= total:
        return dict(sizes)
    quotas = {s: n * size / total for s, size in sorted(sizes.items())}
    seats = {s: int(q) for s, q in quotas.items()}
    leftovers = sorted(quotas, key=lambda s: (-(quotas[s] - seats[s]), s))
    for s in leftovers[: n - sum(seats.values())]:
        seats[s] += 1
    return seats


def collect_items(
    records: Iterable[Record], questions_by_id: Mapping[str, Question]
) -> tuple[list[JudgeItem], int, int]:
    """The distinct gradable items of ``records``, sorted.

    Returns ``(items, duplicates, conflicting)``: how many recorded answers
    were dropped as copies of an item already seen, and how many distinct
    items were left out because their copies carry different first verdicts.
    """
    verdicts: dict[tuple[str, str], set[bool]] = {}
    sources: dict[tuple[str, str], set[str]] = {}
    types: dict[str, str] = {}
    copies = 0
    for record in records:
        qid = record.question_id
        for source, condition in record.conditions.by_name():
            answer, verdict = condition.answer, condition.correct
            if source not in SOURCES or answer is None or verdict is None:
                continue
            if qid not in questions_by_id:
                raise KeyError(
                    f"record of question {qid!r}: the question is not in questions_by_id"
                )
            key = (qid, str(answer))
            copies += 1
            verdicts.setdefault(key, set()).add(bool(verdict))
            sources.setdefault(key, set()).add(source)
            types[qid] = record.question_type
    items = []
    conflicting = 0
    for key in sorted(verdicts):
        if len(verdicts[key]) != 1:
            conflicting += 1
            continue
        qid, candidate = key
        q = questions_by_id[qid]
        items.append(
            JudgeItem(
                question_id=qid,
                question_type=types[qid],
                question=q.question,
                reference=q.answer,
                candidate=candidate,
                first_verdict=next(iter(verdicts[key])),
                sources=tuple(sorted(sources[key])),
            )
        )
    return items, copies - len(verdicts), conflicting


def sample_items(items: Sequence[JudgeItem], n: int, seed: int) -> list[JudgeItem]:
    """A stratified (first verdict x question type), seeded sample of ``n`` items, sorted."""
    strata: dict[tuple[str, str], list[JudgeItem]] = {}
    for item in items:
        assert item.first_verdict is not None  # collect_items keeps verdicted items only
        strata.setdefault((verdict_word(item.first_verdict), item.question_type), []).append(item)
    seats = allocate({s: len(v) for s, v in strata.items()}, n)
    chosen: list[JudgeItem] = []
    for stratum, members in sorted(strata.items()):
        ordered = sorted(members, key=lambda i: (i.question_id, i.candidate))
        rng = random.Random(stable_seed("judge-audit", seed, *stratum))
        chosen.extend(rng.sample(ordered, seats[stratum]))
    return sorted(chosen, key=lambda i: (i.question_id, i.candidate))


@dataclass(frozen=True)
class Agreement:
    """Agreement of two judges over a set of completed grades."""

    graded: int
    #: ``[[both CORRECT, first CORRECT / second INCORRECT],
    #:   [first INCORRECT / second CORRECT, both INCORRECT]]``
    table: tuple[tuple[int, int], tuple[int, int]]
    agreement: float | None
    kappa: float | None
    kappa_note: str | None

    @classmethod
    def of(cls, pairs: Iterable[tuple[bool, bool]]) -> Agreement:
        """The figures of ``(first verdict, second verdict)`` pairs."""
        counts = [[0, 0], [0, 0]]
        for first, second in pairs:
            counts[0 if first else 1][0 if second else 1] += 1
        table = ((counts[0][0], counts[0][1]), (counts[1][0], counts[1][1]))
        graded = sum(map(sum, table))
        agree = table[0][0] + table[1][1]
        kappa, note = cohen_kappa(table)
        return cls(graded, table, agree / graded if graded else None, kappa, note)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Agreement:
        """Back from ``asdict``'s plain values."""
        (a, b), (c, d) = data["table"]
        return cls(data["graded"], ((a, b), (c, d)), data["agreement"], data["kappa"], data["kappa_note"])


@dataclass(frozen=True)
class JudgeAuditResult:
    """What the second-judge audit found; every figure of the report's section."""

    first_judge: str
    second_judge: str
    seed: int
    requested: int
    #: Distinct gradable items in the records, the sampling frame.
    population: int
    #: Recorded answers dropped as copies of an item already in the frame.
    duplicates: int
    #: Distinct items left out because their copies disagree on the first verdict.
    conflicting_first_verdicts: int
    sampled: int
    #: One row per stratum: ``verdict``, ``question_type``, ``population``, ``sampled``.
    strata: list[dict[str, Any]]
    #: Second-judge calls that failed after their retries (excluded).
    api_errors: int
    #: Second-judge replies that are not a verdict (excluded).
    not_a_verdict: int
    #: Both kinds: ``question_id``, ``candidate``, ``reason``.
    failures: list[dict[str, Any]]
    overall: Agreement
    #: The same figures restricted to items recorded as policy / restored answers.
    by_source: dict[str, Agreement]
    #: Every sampled item the judges disagree on.
    disagreements: list[dict[str, Any]] = field(default_factory=list)

    @property
    def graded(self) -> int:
        """Completed second grades (agreement and kappa are over these)."""
        return self.overall.graded

    @property
    def agreement(self) -> float | None:
        """Share of completed grades on which the judges agree."""
        return self.overall.agreement

    @property
    def kappa(self) -> float | None:
        """Cohen's kappa, ``None`` when undefined (see ``kappa_note``)."""
        return self.overall.kappa

    @property
    def kappa_note(self) -> str | None:
        """Why kappa is undefined or uninformative, when it is."""
        return self.overall.kappa_note

    @property
    def second_stricter(self) -> int:
        """Items the first judge passed and the second failed."""
        return self.overall.table[0][1]

    @property
    def second_more_lenient(self) -> int:
        """Items the first judge failed and the second passed."""
        return self.overall.table[1][0]

    def to_dict(self) -> dict[str, Any]:
        """Every figure as plain JSON values."""
        data = asdict(self)
        data["failed"] = self.api_errors + self.not_a_verdict
        data["second_stricter"] = self.second_stricter
        data["second_more_lenient"] = self.second_more_lenient
        return data

    def to_json(self) -> str:
        """Deterministic JSON (sorted keys, fixed indentation, trailing newline)."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JudgeAuditResult:
        """The result back from :meth:`to_dict`'s plain values (``summary.json``'s check)."""
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values["overall"] = Agreement.from_dict(data["overall"])
        values["by_source"] = {k: Agreement.from_dict(v) for k, v in data["by_source"].items()}
        return cls(**values)


def audit_judge(
    records: Iterable[Record],
    questions_by_id: Mapping[str, Question],
    judge: ChatModel,
    prompts: PromptSet,
    *,
    sample: int = 400,
    seed: int = 0,
) -> JudgeAuditResult:
    """Re-grade a stratified, seeded sample of the first judge's grades with ``judge``.

    ``records`` are the audit's per-question records; ``questions_by_id`` gives each question's text and
    reference answer. The definitions are in the module docstring.
    """
    if sample < 0:
        raise ValueError(f"sample must be non-negative, got {sample}")
    records = list(records)
    first_judges = sorted({r.judge for r in records if r.judge is not None})
    items, duplicates, conflicting = collect_items(records, questions_by_id)
    chosen = sample_items(items, sample, seed)
    grades = grade(judge, prompts, chosen) if chosen else []

    frame: dict[tuple[str, str], int] = {}
    taken: dict[tuple[str, str], int] = {}
    for item in items:
        assert item.first_verdict is not None
        s = (verdict_word(item.first_verdict), item.question_type)
        frame[s] = frame.get(s, 0) + 1
    pairs: list[tuple[JudgeItem, bool]] = []
    failures = []
    for item, g in zip(chosen, grades):
        assert item.first_verdict is not None
        s = (verdict_word(item.first_verdict), item.question_type)
        taken[s] = taken.get(s, 0) + 1
        if g.verdict is None:
            failures.append(
                {"question_id": item.question_id, "candidate": item.candidate, "reason": g.failure}
            )
        else:
            pairs.append((item, g.verdict))

    def agreement_of(selected: Iterable[tuple[JudgeItem, bool]]) -> Agreement:
        return Agreement.of((bool(i.first_verdict), v) for i, v in selected)

    return JudgeAuditResult(
        first_judge=",".join(first_judges),
        second_judge=judge.name,
        seed=seed,
        requested=sample,
        population=len(items),
        duplicates=duplicates,
        conflicting_first_verdicts=conflicting,
        sampled=len(chosen),
        strata=[
            {
                "verdict": v,
                "question_type": t,
                "population": frame[(v, t)],
                "sampled": taken.get((v, t), 0),
            }
            for v, t in sorted(frame)
        ],
        api_errors=sum(1 for g in grades if g.kind == API_ERROR),
        not_a_verdict=sum(1 for g in grades if g.kind == NOT_A_VERDICT),
        failures=failures,
        overall=agreement_of(pairs),
        by_source={s: agreement_of((i, v) for i, v in pairs if s in i.sources) for s in SOURCES},
        disagreements=[
            {
                "question_id": i.question_id,
                "question_type": i.question_type,
                "candidate": i.candidate,
                "first": verdict_word(bool(i.first_verdict)),
                "second": verdict_word(v),
            }
            for i, v in pairs
            if v != i.first_verdict
        ],
    )
