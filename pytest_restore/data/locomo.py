"""Data: the LoCoMo loader (Maharana et al., ACL 2024), as its users load ``locomo10.json``.

The file is a JSON list of conversations::

    [{"sample_id": "conv-26",
      "conversation": {"speaker_a": ..., "speaker_b": ...,
                       "session_1_date_time": "1:56 pm on 8 May, 2023",
                       "session_1": [{"speaker": ..., "dia_id": "D1:1", "text": ...,
                                      "blip_caption": ...}, ...], ...},
      "qa": [{"question": ..., "answer": ..., "evidence": ["D1:3"], "category": 2}, ...]},
     ...]

What the audit reads from it:

- **One history per conversation**, shared by all of its questions (their
  :attr:`Question.history_id` is the ``sample_id``): the store of a
  conversation is evicted once per policy x budget x seed and every one of
  its questions is audited against that same store.
- **Sessions** in the order of their number N (``session_N``), each dated by
  its ``session_N_date_time`` (a session without its date is an error; a
  date without its session is ignored). A **turn** is one dialogue line: its
  role is the speaker's name, its text the line, and a turn that shares an
  image carries the image's caption in its text (``[shares CAPTION]``), as
  LoCoMo's own evaluation renders it.
- **A question** is dated by its conversation's last session (the history
  ends there); its id is ``SAMPLE:qJ`` (J its position in ``qa``); its type
  is its category's name and number (:data:`CATEGORIES`), so the report's
  bins by type are by LoCoMo category. Category 5 (adversarial: no
  ``answer``, only an ``adversarial_answer``) is excluded and counted, as
  abstention is for LongMemEval.
- **Gold** is the turns its ``evidence`` names (their sessions at session
  granularity): ``D<s>:<t>`` is line t of ``session_s`` (as every ``dia_id``
  of locomo10 says; a ``dia_id`` repeated within a conversation is an error).

Evidence references that do not name one existing turn as written follow
one rule, :func:`resolve_reference`: a reference is read as every
``D<session>:<turn>`` it contains, numbers as integers (so ``'D8:6; D9:17'``
is two ids, ``'D:11:26'`` is ``D11:26`` and ``'D30:05'`` is ``D30:5``); an id
that then names no turn is dropped; a question left with no evidence is
excluded. Each such reference is counted by kind (:data:`REPAIR_KINDS`) in
the dataset's ``repairs``, which the report prints: never a crash, never a
silent drop.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from typing import Any

from pytest_restore.data.dataset import Dataset, Question, RawData, Turn, check_encodable
from pytest_restore.data.fields import DataError, FieldChecks, json_kind, show

__all__ = [
    "ADVERSARIAL",
    "CATEGORIES",
    "LOCOMO_BUDGETS",
    "NO_EVIDENCE",
    "REPAIR_KINDS",
    "UNRESOLVED",
    "category_type",
    "load_locomo",
    "parse_locomo_date",
    "resolve_reference",
]

#: LoCoMo's question categories by number, named as the paper's results table and its
#: evaluation script order them (4, 1, 2, 3, 5: single-hop, multi-hop, temporal, open-domain,
#: adversarial).
CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

#: The default budgets (tokens). LoCoMo's conversations render to 16.7k-32.1k tokens here
#: (speaker and date headers included; measured on locomo10), so LongMemEval's 80k/30k/8k would
#: evict nothing: 16k binds for every conversation (keeping about the share 80k keeps of a
#: LongMemEval-S history), 8k and 2k evict most of each, as 30k and 8k do there.
LOCOMO_BUDGETS: tuple[int, ...] = (16_000, 8_000, 2_000)

# Exclusion reasons, as the report prints them.
ADVERSARIAL = "adversarial question (LoCoMo category 5: no answer to check)"
NO_EVIDENCE = "no evidence references"
UNRESOLVED = "no evidence reference names a turn of the conversation"

#: Kinds of evidence references that do not name one existing turn as written (see
#: :func:`resolve_reference`), as the report counts them.
REPAIR_KINDS: dict[str, str] = {
    "several": "evidence reference holding several ids: split",
    "colon": "evidence reference with a colon after 'D': read without it",
    "padded": "evidence reference with a zero-padded number: read as an integer",
    "around": "evidence reference with text around its id: read as the id",
    "no-id": "evidence reference naming no turn: dropped",
    "no-session": "evidence reference to a session the conversation lacks: dropped",
    "no-turn": "evidence reference past the end of its session: dropped",
}

_SESSION_KEY = re.compile(r"session_(\d+)")
_ID = re.compile(r"D(:?)(\d+):(\d+)")
_WELL_FORMED = re.compile(r"D[1-9]\d*:[1-9]\d*")
_DATE = re.compile(r"(\d{1,2}):(\d{2}) ?([ap]m) on (\d{1,2}) ([A-Za-z]+),? (\d{4})", re.IGNORECASE)
_MONTHS = {m: i for i, m in enumerate(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december"), start=1)}


def category_type(category: int) -> str:
    """The question type a LoCoMo category becomes: its name and number (``single-hop (4)``)."""
    return f"{CATEGORIES[category]} ({category})"


def parse_locomo_date(text: str) -> dt.datetime | None:
    """A LoCoMo session date (``1:56 pm on 8 May, 2023``), or ``None`` when it is not one."""
    match = _DATE.fullmatch(text.strip())
    if not match:
        return None
    hour, minute, half, day, month, year = match.groups()
    month_number = _MONTHS.get(month.lower())
    if month_number is None or not 1 <= int(hour) <= 12:
        return None
    try:
        return dt.datetime(int(year), month_number, int(day), int(hour) % 12 + 12 * (half.lower() == "pm"), int(minute))
    except ValueError:
        return None


def resolve_reference(reference: str, turns: dict[tuple[int, int], tuple[int, int]]) -> tuple[list[tuple[int, int]], list[str]]:
    """The turns one evidence reference names, and the kinds of repair it needed (empty: as written).

    ``turns`` maps (session number, turn number) to (session position, turn
    index). The rule: every ``D<session>:<turn>`` in the reference is an id
    (a colon after ``D`` and zero padding are tolerated); an id naming no
    turn is dropped. A well-formed reference that names a turn needs nothing.
    """
    found = [(colon, s, t) for colon, s, t in _ID.findall(reference)]
    kinds: list[str] = []
    if not found:
        return [], ["no-id"]
    if len(found) > 1:
        kinds.append("several")
    resolved: list[tuple[int, int]] = []
    for colon, s_text, t_text in found:
        if colon:
            kinds.append("colon")
        if (len(s_text) > 1 and s_text.startswith("0")) or (len(t_text) > 1 and t_text.startswith("0")):
            kinds.append("padded")
        key = (int(s_text), int(t_text))
        if key in turns:
            resolved.append(turns[key])
        elif any(s == key[0] for s, _ in turns):
            kinds.append("no-turn")
        else:
            kinds.append("no-session")
    if len(found) == 1 and not kinds and not _WELL_FORMED.fullmatch(reference):
        kinds.append("around")  # text around a single id (a space, a bracket): read as the id
    return resolved, list(dict.fromkeys(kinds))


def fits_locomo(value: Any) -> bool:
    """Whether parsed JSON has LoCoMo's shape: a list of objects with ``conversation`` or ``qa``."""
    return (
        isinstance(value, list)
        and bool(value)
        and isinstance(value[0], dict)
        and ("conversation" in value[0] or "qa" in value[0] or "sample_id" in value[0])
        and "question_id" not in value[0]
    )


def load_locomo(data: RawData, *, name: str = "locomo") -> Dataset:
    """Validate a parsed LoCoMo file (:func:`pytest_restore.data.dataset.read_json`) into a :class:`Dataset`.

    A malformed conversation stops the load with a one-line ``DataError``
    naming the file, the conversation and the field; flawed evidence is
    repaired or excluded by the module's rule, and counted.
    """
    path, value = data.path, data.value
    if not isinstance(value, list):
        raise DataError(path, f"expected a JSON list of LoCoMo conversations, got {json_kind(value)}")
    if not value:
        raise DataError(path, "the list of conversations is empty")
    questions: list[Question] = []
    excluded: list[tuple[str, str]] = []
    repairs: Counter[str] = Counter()
    seen: dict[str, int] = {}
    for index, record in enumerate(value):
        if not isinstance(record, dict):
            raise DataError(
                path, f"expected a conversation (object), got {json_kind(record)}", index=index, record="conversation"
            )
        rec = FieldChecks(path, index, record, kind="conversation")
        sample_id = rec.string("sample_id", nonempty=True)
        rec.question_id = sample_id
        first = seen.setdefault(sample_id, index)
        if first != index:
            raise rec.fail("sample_id", f"duplicate id: also used by the conversation at index {first}")
        conversation = rec.get("conversation")
        if not isinstance(conversation, dict):
            raise rec.fail("conversation", f"expected an object, got {json_kind(conversation)}")
        sessions, dates, numbers, turns = _sessions(rec, conversation)
        session_ids = tuple(f"{sample_id}:session_{n}" for n in numbers)
        qa = rec.get("qa")
        if not isinstance(qa, list):
            raise rec.fail("qa", f"expected a list of questions, got {json_kind(qa)}")
        for j, item in enumerate(qa):
            where = f"qa[{j}]"
            if not isinstance(item, dict):
                raise rec.fail(where, f"expected a question (object), got {json_kind(item)}")
            qid = f"{sample_id}:q{j}"
            category = item.get("category")
            if category.__class__ is not int or category not in CATEGORIES:
                if "category" not in item:
                    got = "missing"
                elif isinstance(category, str):  # "4" reads like a category: say it is the string that is wrong
                    got = f"the string {show(category)} (a category is a number: 4, not \"4\")"
                else:
                    got = show(str(category))
                raise rec.fail(f"{where}.category", f"expected a category 1-5, got {got}")
            question = item.get("question")
            if not isinstance(question, str) or not question.strip():
                problem = "missing" if "question" not in item else f"expected a non-empty string, got {json_kind(question)}"
                raise rec.fail(f"{where}.question", problem)
            if category == 5:
                excluded.append((qid, ADVERSARIAL))
                continue
            answer = item.get("answer")
            if isinstance(answer, int) and not isinstance(answer, bool):
                answer = str(answer)  # a few answers are bare years
            elif not isinstance(answer, str):
                problem = "missing" if "answer" not in item else f"expected a string or an integer, got {json_kind(answer)}"
                raise rec.fail(f"{where}.answer", problem)
            references = item.get("evidence", [])
            if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
                raise rec.fail(f"{where}.evidence", "expected a list of strings")
            gold: dict[tuple[int, int], None] = {}
            for reference in references:
                resolved, kinds = resolve_reference(reference, turns)
                repairs.update(kinds)
                gold.update(dict.fromkeys(resolved))
            if not gold:
                excluded.append((qid, UNRESOLVED if references else NO_EVIDENCE))
                continue
            evidence = tuple(sorted(gold))
            questions.append(
                Question(
                    question_id=qid,
                    question_type=category_type(category),
                    question=question,
                    answer=answer,
                    question_date=dates[-1],
                    haystack_session_ids=session_ids,
                    haystack_dates=dates,
                    haystack_sessions=sessions,
                    answer_session_ids=tuple(dict.fromkeys(session_ids[s] for s, _ in evidence)),
                    index=len(questions),
                    evidence=evidence,
                    history_id=sample_id,
                )
            )
    check_encodable(data, "sample_id")
    return Dataset(
        path=path,
        sha256=data.sha256,
        questions=tuple(questions),
        is_official=False,
        name=name,
        budgets=LOCOMO_BUDGETS,
        excluded=tuple(excluded),
        repairs=tuple((REPAIR_KINDS[k], n) for k, n in sorted(repairs.items(), key=lambda kv: list(REPAIR_KINDS).index(kv[0]))),
    )


def _sessions(
    rec: FieldChecks, conversation: dict[str, Any]
) -> tuple[tuple[tuple[Turn, ...], ...], tuple[str, ...], tuple[int, ...], dict[tuple[int, int], tuple[int, int]]]:
    """The sessions in order, their dates and numbers, and (session no., turn no.) -> (position, index)."""
    numbers = sorted(int(m.group(1)) for key in conversation if (m := _SESSION_KEY.fullmatch(key)))
    padded = next((key for key in conversation if (m := _SESSION_KEY.fullmatch(key)) and m.group(1).startswith("0")), None)
    if padded is not None:  # session_01: LoCoMo numbers sessions from 1, unpadded, as the dia_ids D1:... name them
        number = int(padded.removeprefix("session_"))
        raise rec.fail(f"conversation.{padded}", f"a zero-padded session number: write session_{number} (and session_{number}_date_time)")
    if not numbers:
        raise rec.fail("conversation", "holds no session_N list")
    sessions: list[tuple[Turn, ...]] = []
    dates: list[str] = []
    turns: dict[tuple[int, int], tuple[int, int]] = {}
    ids: dict[str, str] = {}
    for position, n in enumerate(numbers):
        key = f"session_{n}"
        date_key = f"{key}_date_time"
        if date_key not in conversation:
            raise rec.fail(f"conversation.{date_key}", f"missing (session {n} has no date)")
        date = conversation[date_key]
        if not isinstance(date, str):
            raise rec.fail(f"conversation.{date_key}", f"expected a string, got {json_kind(date)}")
        if parse_locomo_date(date) is None:
            raise rec.fail(f"conversation.{date_key}", f"not a date: {show(date)} (expected like '1:56 pm on 8 May, 2023')")
        lines = conversation[key]
        if not isinstance(lines, list):
            raise rec.fail(f"conversation.{key}", f"expected a list of turns, got {json_kind(lines)}")
        built = []
        for t, line in enumerate(lines):
            where = f"conversation.{key}[{t}]"
            if not isinstance(line, dict):
                raise rec.fail(where, f"expected a turn object, got {json_kind(line)}")
            for field in ("speaker", "text", "dia_id"):
                got = line.get(field)
                if not isinstance(got, str):
                    raise rec.fail(f"{where}.{field}", "missing" if field not in line else f"expected a string, got {json_kind(got)}")
            dia_id = line["dia_id"]
            if dia_id in ids:
                raise rec.fail(f"{where}.dia_id", f"{show(dia_id)} repeats {ids[dia_id]}")
            ids[dia_id] = where
            text = line["text"]
            caption = line.get("blip_caption")
            if isinstance(caption, str) and caption.strip():
                text = f"{text} [shares {caption.strip()}]"
            built.append(Turn(line["speaker"], text, False))
            turns[(n, t + 1)] = (position, t)
        sessions.append(tuple(built))
        dates.append(date)
    return tuple(sessions), tuple(dates), tuple(numbers), turns
