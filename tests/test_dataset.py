"""Tests for the LongMemEval-S loader (pytest_restore.data.dataset)."""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import pickle
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_restore.data.dataset import (
    QUESTION_TYPES,
    Dataset,
    Turn,
    is_official_sha256,
    load_dataset,
)
from pytest_restore.data.fields import DataError

TINY = Path(__file__).resolve().parent.parent / "fixtures" / "tiny.json"

Records = list[dict[str, Any]]


@pytest.fixture(scope="module")
def tiny() -> Dataset:
    return load_dataset(TINY)


def tiny_records() -> Records:
    records: Records = json.loads(TINY.read_text(encoding="utf-8"))
    return records


def write(tmp_path: Path, payload: Any, name: str = "data.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(payload, indent=1), encoding="utf-8")
    return path


# --- the tiny fixture ---------------------------------------------------------


def test_tiny_counts(tiny: Dataset) -> None:
    assert len(tiny.questions) == 8
    assert [q.index for q in tiny.questions] == list(range(8))
    types = Counter(q.question_type for q in tiny.questions)
    assert set(types) == set(QUESTION_TYPES)
    assert types["single-session-user"] == 3
    assert [q.question_id for q in tiny.questions if q.is_abstention] == ["09ba9854_abs"]
    for q in tiny.questions:
        assert 4 <= len(q.haystack_sessions) <= 6
        assert len(q.haystack_dates) == len(q.haystack_session_ids) == len(q.haystack_sessions)
        assert q.answer_session_ids
        assert all(sid.startswith("answer_") for sid in q.answer_session_ids)
    assert sum(len(s) for q in tiny.questions for s in q.haystack_sessions) == 80


def test_tiny_sha256_and_not_official(tiny: Dataset) -> None:
    assert tiny.sha256 == hashlib.sha256(TINY.read_bytes()).hexdigest()
    assert tiny.path == str(TINY)
    assert tiny.is_official is False


def test_official_hash_rule() -> None:
    assert is_official_sha256("d6f21ea9" + "0" * 50 + "c3a442")
    assert not is_official_sha256("d6f21ea9" + "0" * 56)
    assert not is_official_sha256("0" * 58 + "c3a442")


def test_answers_are_verbatim_in_evidence(tiny: Dataset) -> None:
    # The fake reader and hand checks rely on this property of the fixture.
    for q in tiny.questions:
        gold = [
            turn.content
            for sid, session in zip(q.haystack_session_ids, q.haystack_sessions)
            if sid in q.answer_session_ids
            for turn in session
            if turn.has_answer
        ]
        assert gold, q.question_id
        if q.is_abstention:
            continue
        if q.question_type == "multi-session":
            assert len(gold) == 2
            parts = q.answer.split(" and ")
            assert all(any(part in text for text in gold) for part in parts)
        else:
            assert any(q.answer in text for text in gold), q.question_id


def test_integer_answer_is_stored_as_str(tiny: Dataset) -> None:
    by_id = {q.question_id: q for q in tiny.questions}
    assert tiny_records()[6]["answer"] == 3
    assert by_id["c4a1ceb8"].answer == "3"


def test_turn_fields(tiny: Dataset) -> None:
    q = tiny.questions[0]
    assert q.haystack_session_ids[1] == "answer_e47becba_1"
    assert q.haystack_sessions[1][0] == Turn(
        role="user",
        content="I need podcast ideas for the train. My daily commute takes 45 minutes each way.",
        has_answer=True,
    )
    # A filler session has no has_answer keys: they default to False.
    assert "has_answer" not in tiny_records()[0]["haystack_sessions"][0][0]
    assert q.haystack_sessions[0][0].has_answer is False
    assert q.haystack_dates[0] == "2023/05/20 (Sat) 02:21"
    assert isinstance(q.haystack_sessions, tuple)
    assert isinstance(q.haystack_sessions[0], tuple)


def test_shared_sessions_are_one_object(tiny: Dataset) -> None:
    q0, q1 = tiny.questions[0], tiny.questions[1]
    sid = "sharegpt_Kq3vZ1p_0"
    s0 = q0.haystack_sessions[q0.haystack_session_ids.index(sid)]
    s1 = q1.haystack_sessions[q1.haystack_session_ids.index(sid)]
    assert s0 == s1
    assert s0 is s1


def test_extra_keys_are_ignored(tmp_path: Path, tiny: Dataset) -> None:
    records = tiny_records()
    records[0]["comment"] = "not part of the schema"
    records[0]["haystack_sessions"][0][0]["timestamp"] = 12
    loaded = load_dataset(write(tmp_path, records))
    assert loaded.questions[0] == tiny.questions[0]


def test_questions_are_frozen(tiny: Dataset) -> None:
    with pytest.raises(AttributeError):
        tiny.questions[0].answer = "x"  # type: ignore[misc]


# --- malformed records --------------------------------------------------------

Mutation = Callable[[Records], None]


def _set(index: int, key: str, value: Any) -> Mutation:
    def mutate(records: Records) -> None:
        records[index][key] = value

    return mutate


def _drop(index: int, key: str) -> Mutation:
    def mutate(records: Records) -> None:
        del records[index][key]

    return mutate


def _turn(index: int, s: int, t: int, key: str, value: Any = None, drop: bool = False) -> Mutation:
    def mutate(records: Records) -> None:
        turn = records[index]["haystack_sessions"][s][t]
        if drop:
            del turn[key]
        else:
            turn[key] = value

    return mutate


def _pop_last(index: int, key: str) -> Mutation:
    def mutate(records: Records) -> None:
        records[index][key].pop()

    return mutate


def _replace_record(index: int, value: Any) -> Mutation:
    def mutate(records: Records) -> None:
        records[index] = value

    return mutate


def _duplicate_id(records: Records) -> None:
    records[5]["question_id"] = records[2]["question_id"]


def _replace_session(index: int, s: int, value: Any) -> Mutation:
    def mutate(records: Records) -> None:
        records[index]["haystack_sessions"][s] = value

    return mutate


def _replace_turn(index: int, s: int, t: int, value: Any) -> Mutation:
    def mutate(records: Records) -> None:
        records[index]["haystack_sessions"][s][t] = value

    return mutate


def _bad_answer_id(records: Records) -> None:
    records[3]["answer_session_ids"][1] = "answer_deadbeef_9"


def _repeated_session_id(records: Records) -> None:
    ids = records[1]["haystack_session_ids"]
    ids[3] = ids[0]


# (id, mutation, where the error is, field, problem text)
MALFORMED: list[tuple[str, Mutation, str, str, str]] = [
    ("missing-question", _drop(1, "question"), "'118b2229' (index 1)", "question", "missing"),
    ("missing-answer", _drop(2, "answer"), "'8a2466db' (index 2)", "answer", "missing"),
    (
        "missing-sessions",
        _drop(0, "haystack_sessions"),
        "'e47becba' (index 0)",
        "haystack_sessions",
        "missing",
    ),
    (
        "missing-answer-ids",
        _drop(7, "answer_session_ids"),
        "'09ba9854_abs' (index 7)",
        "answer_session_ids",
        "missing",
    ),
    ("missing-id", _drop(4, "question_id"), "(index 4)", "question_id", "missing"),
    (
        "id-not-str",
        _set(4, "question_id", 17),
        "(index 4)",
        "question_id",
        "expected a string, got integer",
    ),
    ("id-empty", _set(4, "question_id", ""), "(index 4)", "question_id", "is empty"),
    (
        "question-not-str",
        _set(1, "question", ["what?"]),
        "'118b2229' (index 1)",
        "question",
        "expected a string, got list",
    ),
    (
        "answer-bool",
        _set(1, "answer", True),
        "'118b2229' (index 1)",
        "answer",
        "expected a string or an integer, got boolean",
    ),
    (
        "answer-float",
        _set(1, "answer", 2.5),
        "'118b2229' (index 1)",
        "answer",
        "expected a string or an integer, got number",
    ),
    (
        "answer-null",
        _set(1, "answer", None),
        "'118b2229' (index 1)",
        "answer",
        "got null",
    ),
    (
        "question-date-not-str",
        _set(2, "question_date", 20230701),
        "'8a2466db' (index 2)",
        "question_date",
        "expected a string, got integer",
    ),
    (
        "type-not-str",
        _set(2, "question_type", None),
        "'8a2466db' (index 2)",
        "question_type",
        "got null",
    ),
    (
        "sessions-not-list",
        _set(3, "haystack_sessions", {"a": []}),
        "'0a995998' (index 3)",
        "haystack_sessions",
        "expected a list of sessions, got object",
    ),
    (
        "session-not-list",
        _replace_session(3, 2, "hello"),
        "'0a995998' (index 3)",
        "haystack_sessions[2]",
        "expected a list of turns, got string",
    ),
    (
        "turn-not-object",
        _replace_turn(3, 2, 1, ["assistant", "hi"]),
        "'0a995998' (index 3)",
        "haystack_sessions[2][1]",
        "expected a turn object, got list",
    ),
    (
        "content-not-str",
        _turn(5, 3, 0, "content", 8),
        "'6a1eabeb' (index 5)",
        "haystack_sessions[3][0].content",
        "expected a string, got integer",
    ),
    (
        "content-missing",
        _turn(5, 3, 1, "content", drop=True),
        "'6a1eabeb' (index 5)",
        "haystack_sessions[3][1].content",
        "missing",
    ),
    (
        "role-missing",
        _turn(5, 0, 1, "role", drop=True),
        "'6a1eabeb' (index 5)",
        "haystack_sessions[0][1].role",
        "missing",
    ),
    (
        "role-unknown",
        _turn(5, 3, 1, "role", "system"),
        "'6a1eabeb' (index 5)",
        "haystack_sessions[3][1].role",
        "unknown role 'system'",
    ),
    (
        "role-unhashable",
        _turn(5, 3, 1, "role", ["user"]),
        "'6a1eabeb' (index 5)",
        "haystack_sessions[3][1].role",
        "expected a string, got list",
    ),
    (
        "has-answer-int",
        _turn(6, 1, 0, "has_answer", 1),
        "'c4a1ceb8' (index 6)",
        "haystack_sessions[1][0].has_answer",
        "expected a boolean, got integer",
    ),
    (
        "has-answer-str",
        _turn(6, 1, 1, "has_answer", "false"),
        "'c4a1ceb8' (index 6)",
        "haystack_sessions[1][1].has_answer",
        "expected a boolean, got string",
    ),
    (
        "dates-short",
        _pop_last(1, "haystack_dates"),
        "'118b2229' (index 1)",
        "haystack_dates",
        "has 4 entries but haystack_sessions has 5",
    ),
    (
        "session-ids-short",
        _pop_last(1, "haystack_session_ids"),
        "'118b2229' (index 1)",
        "haystack_session_ids",
        "has 4 entries but haystack_sessions has 5",
    ),
    (
        "sessions-short",
        _pop_last(1, "haystack_sessions"),
        "'118b2229' (index 1)",
        "haystack_session_ids",
        "has 5 entries but haystack_sessions has 4",
    ),
    (
        "session-id-not-str",
        _set(0, "haystack_session_ids", ["a", None, "c", "d"]),
        "'e47becba' (index 0)",
        "haystack_session_ids[1]",
        "expected a string, got null",
    ),
    (
        "dates-not-list",
        _set(0, "haystack_dates", "2023/05/20 (Sat) 02:21"),
        "'e47becba' (index 0)",
        "haystack_dates",
        "expected a list of strings, got string",
    ),
    (
        "answer-id-unknown",
        _bad_answer_id,
        "'0a995998' (index 3)",
        "answer_session_ids[1]",
        "'answer_deadbeef_9' is not among haystack_session_ids",
    ),
    (
        "duplicate-id",
        _duplicate_id,
        "'8a2466db' (index 5)",
        "question_id",
        "also used by the question at index 2",
    ),
    (
        "type-unknown",
        _set(2, "question_type", "single-session-usr"),
        "'8a2466db' (index 2)",
        "question_type",
        "unknown type 'single-session-usr' (LongMemEval-S has single-session-user, ",
    ),
    (
        "question-date-unparseable",
        _set(2, "question_date", "last Tuesday"),
        "'8a2466db' (index 2)",
        "question_date",
        "not a date: 'last Tuesday' (expected like '2023/05/30 (Tue) 23:40')",
    ),
    (
        "question-date-impossible",
        _set(2, "question_date", "2023/02/30 (Thu) 10:00"),
        "'8a2466db' (index 2)",
        "question_date",
        "not a date: '2023/02/30 (Thu) 10:00'",
    ),
    (
        "session-id-repeated",
        _repeated_session_id,
        "'118b2229' (index 1)",
        "haystack_session_ids[3]",
        "repeats haystack_session_ids[0]",
    ),
    (
        "record-not-object",
        _replace_record(6, ["c4a1ceb8"]),
        "(index 6)",
        "",
        "expected a question record (object), got list",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "where", "field", "problem"),
    [pytest.param(*case[1:], id=case[0]) for case in MALFORMED],
)
def test_malformed_record(
    tmp_path: Path, mutate: Mutation, where: str, field: str, problem: str
) -> None:
    records = copy.deepcopy(tiny_records())
    mutate(records)
    path = write(tmp_path, records)
    with pytest.raises(DataError) as info:
        load_dataset(path)
    message = str(info.value)
    assert "\n" not in message
    prefix = f"{path}: question {where}: " + (f"field {field!r}: " if field else "")
    assert message.startswith(prefix)
    assert problem in message[len(prefix) :]
    assert info.value.path == str(path)
    assert info.value.field == (field or None)


def test_error_example_format(tmp_path: Path) -> None:
    records = tiny_records()
    records[1]["haystack_dates"].pop()
    path = write(tmp_path, records)
    with pytest.raises(DataError) as info:
        load_dataset(path)
    assert str(info.value) == (
        f"{path}: question '118b2229' (index 1): field 'haystack_dates': "
        "has 4 entries but haystack_sessions has 5"
    )
    assert (info.value.index, info.value.question_id) == (1, "118b2229")


def test_error_stays_one_line_for_hostile_values(tmp_path: Path) -> None:
    records = tiny_records()
    records[0]["question_id"] = "q\nwith newline"
    records[0]["answer_session_ids"] = ["x\ny" * 100]
    path = write(tmp_path, records)
    with pytest.raises(DataError) as info:
        load_dataset(path)
    message = str(info.value)
    assert "\n" not in message
    assert "question 'q\\nwith newline' (index 0)" in message
    assert "answer_session_ids[0]" in message
    assert len(message) < len(str(path)) + 250


# --- file-level problems ------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(DataError) as info:
        load_dataset(path)
    assert str(info.value) == f"{path}: cannot read the file: No such file or directory"


def test_not_json(tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_text('[\n  {"question_id": "q1",\n   "question": oops}\n]\n', encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_dataset(path)
    message = str(info.value)
    assert "\n" not in message
    assert message == f"{path}: not valid JSON: Expecting value at line 3 column 16"


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_bytes(b'["\xff"]')
    with pytest.raises(DataError) as info:
        load_dataset(path)
    assert str(info.value) == f"{path}: not UTF-8 text: bad byte at offset 2"


@pytest.mark.parametrize(
    ("payload", "kind"),
    [({"questions": []}, "object"), ("text", "string"), (3, "integer"), (None, "null")],
)
def test_not_a_list(tmp_path: Path, payload: Any, kind: str) -> None:
    path = write(tmp_path, payload)
    with pytest.raises(DataError) as info:
        load_dataset(path)
    assert str(info.value) == f"{path}: expected a JSON list of question records, got {kind}"


def test_empty_list(tmp_path: Path) -> None:
    path = write(tmp_path, [])
    with pytest.raises(DataError) as info:
        load_dataset(path)
    assert str(info.value) == f"{path}: the list of question records is empty"


def test_iso_question_dates_are_dates(tmp_path: Path) -> None:
    records = tiny_records()
    records[2]["question_date"] = "2023-07-01T19:00"
    assert load_dataset(write(tmp_path, records)).questions[2].question_date == "2023-07-01T19:00"


def test_gzip_file_is_read_as_its_json(tmp_path: Path, tiny: Dataset) -> None:
    # a .json.gz (LoCoMo's shared copy is one) is decompressed transparently, by its magic bytes
    path = tmp_path / "data.json.gz"
    path.write_bytes(gzip.compress(TINY.read_bytes()))
    loaded = load_dataset(path)
    assert loaded.questions == tiny.questions
    assert loaded.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()  # of the file as stored


def test_damaged_gzip_says_gzip(tmp_path: Path) -> None:
    path = tmp_path / "data.json.gz"
    path.write_bytes(gzip.compress(TINY.read_bytes())[:200])
    with pytest.raises(DataError) as info:
        load_dataset(path)
    message = str(info.value)
    assert message.startswith(f"{path}: a gzip file that does not decompress: ")
    assert "\n" not in message


def test_gzip_of_non_utf8_says_gzip(tmp_path: Path) -> None:
    path = tmp_path / "data.json.gz"
    path.write_bytes(gzip.compress(b'["\xff"]'))
    with pytest.raises(DataError) as info:
        load_dataset(path)
    assert str(info.value) == f"{path}: not UTF-8 text (after gzip decompression): bad byte at offset 2"


@pytest.mark.parametrize(
    ("mutate", "where", "field"),
    [
        pytest.param(_set(1, "question", "What is \ud800 this?"), "'118b2229' (index 1)", "question", id="question"),
        pytest.param(_set(2, "answer", "yes \udfff"), "'8a2466db' (index 2)", "answer", id="answer"),
        pytest.param(
            _turn(5, 3, 0, "content", "a \udbff b"), "'6a1eabeb' (index 5)", "haystack_sessions[3][0].content", id="turn"
        ),
    ],
)
def test_lone_surrogate_is_refused_at_load(tmp_path: Path, mutate: Mutation, where: str, field: str) -> None:
    # JSON allows an unpaired \\udXXX escape; UTF-8 cannot hold it, so the report writer would fail
    # after the grid: refused here, naming the record and the field
    records = copy.deepcopy(tiny_records())
    mutate(records)
    path = write(tmp_path, records)
    assert "\\ud" in path.read_text(encoding="utf-8")  # json.dumps wrote it as an escape
    with pytest.raises(DataError) as info:
        load_dataset(path)
    message = str(info.value)
    assert message.startswith(f"{path}: question {where}: field {field!r}: text UTF-8 cannot hold: a lone surrogate")
    assert "\n" not in message
    message.encode("utf-8")  # the message itself is printable


def test_paired_surrogate_escapes_are_text(tmp_path: Path) -> None:
    # an emoji written as an escaped pair is one character: nothing to refuse
    records = tiny_records()
    records[1]["question"] = "What did I send? \U0001f600"
    path = write(tmp_path, records)
    assert "\\ud83d\\ude00" in path.read_text(encoding="utf-8")
    assert load_dataset(path).questions[1].question.endswith("\U0001f600")


def test_error_pickles() -> None:
    err = DataError("f.json", "missing", index=3, question_id="q3", field="answer")
    clone = pickle.loads(pickle.dumps(err))
    assert isinstance(clone, DataError)
    assert str(clone) == str(err) == "f.json: question 'q3' (index 3): field 'answer': missing"
    assert clone.field == "answer"
