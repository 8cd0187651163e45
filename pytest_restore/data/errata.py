"""Data: corrections to a dataset's labels (errata), applied as the data is loaded (``--restore-errata FILE``).

The bins are computed from the gold: a question whose evidence cites the
wrong turns puts the wrong turns in G_q, and the audit then restores the
wrong evidence. An errata file lists corrections per question, and
:func:`apply_errata` makes a corrected copy of a loaded
:class:`~pytest_restore.data.dataset.Dataset`:

- **evidence** (the default part): a correction's evidence replaces the
  evidence the dataset cites (the question's gold turns and their sessions);
- **answers** (only when asked: ``--restore-errata-apply evidence,answers``
  or ``answers``): a correction's answer replaces the reference the judge
  grades against. Evidence and answers are separate choices: a user may
  trust an audit's citations and not its rewritten answers, or the reverse;
- a question the correction leaves **unanswerable** is excluded, whichever
  parts are applied, with :data:`UNANSWERABLE` as its reason: the question
  as asked has no answer in the conversation, so no reference is right.

Every correction read is counted by its type and what it changed
(:class:`ErrataSummary`), for the report; a correction to a question the
loader left out (an adversarial one, say) is counted as not applied, with
nothing else done. A malformed file stops the run with one line naming the
file, the entry and the field.

Formats are an extension point like dataset loaders: an
:class:`ErrataFormat` reads one file layout into :class:`Correction`\\ s; the
built-in ``locomo-audit`` reads the LoCoMo Benchmark Audit's ``errors.json``
as published::

    [{"question_id": "locomo_0_qa1", "question": ..., "golden_answer": ..., "category": 2,
      "error_type": "WRONG_CITATION", "cited_evidence": ["D1:12"], "correct_evidence": ["D1:14"],
      "reasoning": ..., "correct_answer": ...}, ...]

``locomo_C_qaJ`` is conversation C (its position in the LoCoMo file) and
question J of its ``qa`` list, both from 0. The conversations' order is
read off the loaded questions (each conversation's first question; a
conversation all of whose questions the loader left out is placed after
the others), and every entry's ``question`` text must be its question's: a
mismatch is an error, never a silent misapplication. A user's own layout
is registered with the ``pytest_restore_register_errata`` hook or the
``pytest_restore.errata`` entry-point group; ``--restore-errata-format
NAME`` forces one.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_restore.data.dataset import Dataset, PathLike, Question, RawData, read_json
from pytest_restore.data.fields import DataError, json_kind, show
from pytest_restore.data.locomo import resolve_reference
from pytest_restore.registry import Registry

__all__ = [
    "ERRATA_PARTS",
    "UNANSWERABLE",
    "UNANSWERABLE_OPENINGS",
    "Correction",
    "ErrataFormat",
    "ErrataRegistry",
    "ErrataSummary",
    "LocomoAudit",
    "apply_errata",
    "default_errata_formats",
    "load_errata",
    "locomo_turns",
    "parse_parts",
]

#: The parts of a correction a run may apply (``--restore-errata-apply``).
ERRATA_PARTS: tuple[str, ...] = ("evidence", "answers")

#: The exclusion reason of a question a correction leaves without an answer.
UNANSWERABLE = "unanswerable as corrected by the errata"

#: How the LoCoMo audit's corrected answers open when the conversation does not answer the
#: question (lower-cased; measured on its errors.json: 4 answers, plus 1 correction with no evidence).
UNANSWERABLE_OPENINGS: tuple[str, ...] = (
    "cannot be determined",
    "cannot be reliably determined",
    "unknown",
    "unanswerable",
    "not answerable",
    "no answer",
)


@dataclass(frozen=True)
class Correction:
    """One question's correction, in the dataset's terms."""

    #: the dataset's question id
    question_id: str
    #: the error's type as the file names it (``WRONG_CITATION``, ...): the report counts by it
    kind: str
    #: the corrected gold turns as (session position, turn index); ``None``: the file corrects no evidence
    evidence: tuple[tuple[int, int], ...] | None
    #: the corrected reference answer; ``None``: the file corrects no answer
    answer: str | None
    #: the correction says the conversation does not answer the question
    unanswerable: bool = False


@dataclass(frozen=True)
class ErrataSummary:
    """What a corrections file did to a dataset, for the report and ``summary.json``."""

    path: str
    sha256: str
    format: str
    #: the parts applied, in :data:`ERRATA_PARTS` order
    parts: tuple[str, ...]
    #: per error type: ``read``, ``evidence`` (replaced), ``answer`` (replaced), ``unanswerable``
    #: (excluded) and ``not_applied`` (the loader had left the question out)
    by_type: tuple[tuple[str, Mapping[str, int]], ...]

    #: the counts of one type, in the order the report prints them
    COUNTS = ("read", "evidence", "answer", "unanswerable", "not_applied")

    @property
    def read(self) -> int:
        """How many corrections the file holds."""
        return sum(counts["read"] for _, counts in self.by_type)

    def to_json(self) -> dict[str, Any]:
        """The summary as plain JSON values (``summary.json``'s ``dataset.errata``)."""
        return {
            "file": self.path,
            "sha256": self.sha256,
            "format": self.format,
            "parts": list(self.parts),
            "read": self.read,
            "by_type": {kind: dict(counts) for kind, counts in self.by_type},
        }


class ErrataFormat:
    """One layout of corrections files. Subclass it, set the class attributes, implement :meth:`fits` and :meth:`read`."""

    #: the registry name (``--restore-errata-format NAME``)
    name: str = ""
    #: what a file must look like, in a few words (said when a file fits no format)
    expects: str = ""

    def fits(self, value: Any) -> bool:
        """Whether parsed JSON has this layout (cheap: look at the top level only)."""
        raise NotImplementedError

    def read(self, data: RawData, dataset: Dataset) -> list[Correction]:
        """The corrections, in the dataset's question ids; a malformed entry raises a one-line ``DataError``."""
        raise NotImplementedError


def locomo_turns(question: Question) -> dict[tuple[int, int], tuple[int, int]]:
    """A LoCoMo question's turns: (session number, turn number) -> (session position, turn index).

    The session number is read off the session's id (``SAMPLE:session_N``),
    as the LoCoMo loader writes it; turns are numbered from 1 as ``dia_id`` s are.
    """
    turns: dict[tuple[int, int], tuple[int, int]] = {}
    for position, (session_id, session) in enumerate(zip(question.haystack_session_ids, question.haystack_sessions, strict=True)):
        match = re.search(r"session_(\d+)$", session_id)
        if match is None:
            continue
        for index in range(len(session)):
            turns[(int(match.group(1)), index + 1)] = (position, index)
    return turns


_LOCOMO_ID = re.compile(r"locomo_(\d+)_qa(\d+)")


class LocomoAudit(ErrataFormat):
    """The LoCoMo Benchmark Audit's ``errors.json`` (one entry per flawed locomo10 question)."""

    name = "locomo-audit"
    expects = "a JSON list of corrections with question_id (locomo_C_qaJ), error_type, correct_evidence and correct_answer"

    def fits(self, value: Any) -> bool:
        """A list whose first item is an object with ``question_id`` and ``error_type``."""
        return isinstance(value, list) and bool(value) and isinstance(value[0], dict) and {"question_id", "error_type"} <= set(value[0])

    def read(self, data: RawData, dataset: Dataset) -> list[Correction]:
        """Every entry checked and turned into the dataset's ids and gold turns."""
        if not isinstance(data.value, list):
            raise DataError(data.path, f"expected a JSON list of corrections, got {json_kind(data.value)}")
        by_id = {q.question_id: q for q in dataset.questions}
        order = list(dict.fromkeys([q.history_key for q in dataset.questions] + [qid.rpartition(":q")[0] for qid, _ in dataset.excluded]))
        out = []
        for i, entry in enumerate(data.value):
            def fail(field: str, problem: str, entry_id: str | None = None) -> DataError:
                return DataError(data.path, problem, index=i, question_id=entry_id, field=field, record="correction")  # noqa: B023

            if not isinstance(entry, dict):
                raise fail("", f"expected a correction (object), got {json_kind(entry)}")
            entry_id = entry.get("question_id")
            match = _LOCOMO_ID.fullmatch(entry_id) if isinstance(entry_id, str) else None
            if match is None:
                raise fail("question_id", f"expected locomo_C_qaJ, got {show(str(entry_id))}")
            conversation, j = int(match.group(1)), int(match.group(2))
            if conversation >= len(order):
                raise fail("question_id", f"conversation {conversation} is past the dataset's {len(order)}", entry_id)
            qid = f"{order[conversation]}:q{j}"
            for field in ("error_type", "correct_answer", "question"):
                value = entry.get(field)
                if isinstance(value, int) and not isinstance(value, bool) and field == "correct_answer":
                    continue
                if not isinstance(value, str) or not value.strip():
                    raise fail(field, "missing" if field not in entry else f"expected a non-empty string, got {json_kind(value)}", entry_id)
            references = entry.get("correct_evidence")
            if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
                raise fail("correct_evidence", "expected a list of strings", entry_id)
            answer = str(entry["correct_answer"])
            question = by_id.get(qid)
            evidence: tuple[tuple[int, int], ...] | None = None
            if question is not None:
                if " ".join(question.question.split()) != " ".join(entry["question"].split()):
                    raise fail("question", f"is not the text of {qid} ({show(question.question)})", entry_id)
                turns = locomo_turns(question)
                gold: dict[tuple[int, int], None] = {}
                for reference in references:
                    resolved, kinds = resolve_reference(reference, turns)
                    if not resolved or kinds:
                        raise fail("correct_evidence", f"{show(reference)} names no turn of {order[conversation]}", entry_id)
                    gold.update(dict.fromkeys(resolved))
                evidence = tuple(sorted(gold))
            unanswerable = not references or answer.strip().lower().startswith(UNANSWERABLE_OPENINGS)
            out.append(Correction(qid, entry["error_type"].strip(), evidence, answer, unanswerable))
        return out


class ErrataRegistry(Registry[ErrataFormat]):
    """Errata formats by name, in the order files are matched in."""

    kind = "errata format"
    item_type = ErrataFormat
    entry_point_group = "pytest_restore.errata"


BUILTIN_ERRATA: tuple[type[ErrataFormat], ...] = (LocomoAudit,)


def default_errata_formats() -> ErrataRegistry:
    """The built-in formats plus those installed packages declare as entry points."""
    return ErrataRegistry.default(BUILTIN_ERRATA)


def parse_parts(text: str) -> tuple[str, ...]:
    """``--restore-errata-apply``'s value (``evidence``, ``answers`` or both, comma-separated), checked."""
    asked = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [part for part in asked if part not in ERRATA_PARTS]
    if unknown or not asked:
        raise ValueError(f"{text!r}: expected evidence, answers or evidence,answers")
    return tuple(part for part in ERRATA_PARTS if part in asked)


def load_errata(
    path: PathLike, dataset: Dataset, registry: ErrataRegistry | None = None, *, name: str | None = None
) -> tuple[RawData, str, list[Correction]]:
    """Read a corrections file with the format ``name`` names or the first that fits: (its data, the format, the corrections)."""
    formats = registry if registry is not None else default_errata_formats()
    data = read_json(path)
    if name is not None:
        if name not in formats:
            raise DataError(data.path, f"no errata format named {name!r}; registered: {', '.join(formats)}")
        chosen = formats[name]
    else:
        fitting = [f for f in formats.values() if f.fits(data.value)]
        if not fitting:
            expected = "; ".join(f"{f.name} expects {f.expects}" for f in formats.values())
            raise DataError(data.path, f"fits no errata format: {expected}")
        chosen = fitting[0]
    return data, chosen.name, chosen.read(data, dataset)


def apply_errata(dataset: Dataset, data: RawData, format_name: str, corrections: Iterable[Correction], parts: tuple[str, ...]) -> tuple[Dataset, ErrataSummary]:
    """The dataset with ``corrections``' ``parts`` applied, and what was applied, counted by type."""
    by_id = {q.question_id: q for q in dataset.questions}
    left_out = {qid for qid, _ in dataset.excluded}
    counts: dict[str, Counter[str]] = {}
    replaced: dict[str, Question | None] = {}
    for correction in corrections:
        count = counts.setdefault(correction.kind, Counter(dict.fromkeys(ErrataSummary.COUNTS, 0)))
        count["read"] += 1
        if correction.question_id in replaced:
            raise DataError(data.path, f"a second correction of question {correction.question_id}")
        question = by_id.get(correction.question_id)
        if question is None:
            if correction.question_id not in left_out:
                raise DataError(data.path, f"corrects question {correction.question_id}, which the dataset does not hold")
            count["not_applied"] += 1
            replaced[correction.question_id] = None
            continue
        if correction.unanswerable:
            count["unanswerable"] += 1
            replaced[correction.question_id] = None
            continue
        changes: dict[str, Any] = {}
        if "evidence" in parts and correction.evidence is not None and correction.evidence != question.evidence:
            changes["evidence"] = correction.evidence
            changes["answer_session_ids"] = tuple(dict.fromkeys(question.haystack_session_ids[s] for s, _ in correction.evidence))
            count["evidence"] += 1
        if "answers" in parts and correction.answer is not None and correction.answer != question.answer:
            changes["answer"] = correction.answer
            count["answer"] += 1
        replaced[correction.question_id] = dataclasses.replace(question, **changes) if changes else question
    questions: list[Question] = []
    excluded = list(dataset.excluded)
    for question in dataset.questions:
        fixed = replaced.get(question.question_id, question)
        if fixed is None:
            excluded.append((question.question_id, UNANSWERABLE))
            continue
        questions.append(dataclasses.replace(fixed, index=len(questions)) if fixed.index != len(questions) else fixed)
    summary = ErrataSummary(
        path=data.path,
        sha256=data.sha256,
        format=format_name,
        parts=parts,
        by_type=tuple((kind, dict(count)) for kind, count in sorted(counts.items(), key=lambda kv: (-kv[1]["read"], kv[0]))),
    )
    return dataclasses.replace(dataset, questions=tuple(questions), excluded=tuple(excluded)), summary
