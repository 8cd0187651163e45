"""Data: the dataset types every loader yields, the file reading they share, and the LongMemEval-S loader.

A loaded dataset (:class:`Dataset`) is questions with their dates, answers,
types and histories, and for each question what its gold evidence is; nothing
after loading knows which benchmark it came from (see
:mod:`pytest_restore.data.loaders` for the loaders' registry and
:mod:`pytest_restore.data.locomo` for LoCoMo).

:func:`read_json` reads any data file once: a gzip file (its first two bytes
are gzip's magic) is decompressed transparently, the text must be UTF-8
JSON, and text JSON allows but UTF-8 does not (a lone surrogate, written as
a ``\\udXXX`` escape) is refused there with the record and field that hold it,
so it never reaches the records, the cache or the report.

The LongMemEval-S input is a JSON list of question records, each carrying its
own haystack of dated chat sessions. ``load_dataset`` reads the file once,
parses it with the stdlib ``json`` and checks every record in one pass. The
first malformed record stops the load with a ``DataError`` whose message is
one line naming the file, the question and the field, so a user can go
straight to it. An unknown ``question_type``, a ``question_date`` that is not
a date, and a session id repeated within one haystack are errors too: each
would otherwise pass unnoticed into a misleading breakdown (see
:data:`QUESTION_TYPES`).

Histories in the real file (~270 MB, 500 questions) reuse the same sessions
across many questions. Identical turns and identical sessions are converted
once and shared, which keeps memory close to the size of the distinct text.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import marshal
import os
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Union

from pytest_restore.data.fields import DataError, FieldChecks, json_kind, show

__all__ = [
    "LONGMEMEVAL_BUDGETS",
    "OFFICIAL_SHA256_PREFIX",
    "OFFICIAL_SHA256_SUFFIX",
    "QUESTION_TYPES",
    "ROLES",
    "Dataset",
    "Question",
    "RawData",
    "Turn",
    "check_encodable",
    "is_official_sha256",
    "is_prepared",
    "load_cached",
    "load_dataset",
    "load_longmemeval",
    "parse_date",
    "read_json",
]

#: The official ``longmemeval_s_cleaned.json`` has a sha256 with this start ...
OFFICIAL_SHA256_PREFIX = "d6f21ea9"
#: ... and this end.
OFFICIAL_SHA256_SUFFIX = "c3a442"

#: The roles a turn may have.
ROLES: frozenset[str] = frozenset({"user", "assistant"})

#: The six question types of LongMemEval-S. A record of any other type is an
#: error naming these: the type decides the report's bins by type, so a typo
#: would otherwise make a bin of its own. (A benchmark with other types gets a
#: loader of its own: see :mod:`pytest_restore.data.loaders`.)
QUESTION_TYPES: tuple[str, ...] = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "temporal-reasoning",
    "knowledge-update",
)

_KNOWN_TYPES = frozenset(QUESTION_TYPES)

PathLike = Union[str, "os.PathLike[str]"]

#: LongMemEval's date format ("2023/05/30 (Tue) 23:40"); the weekday is not checked against the date.
_LME_DATE = re.compile(r"(\d{4})/(\d{2})/(\d{2}) \(\w{3}\) (\d{2}):(\d{2})")


def parse_date(text: str) -> dt.datetime | None:
    """A question or session date as LongMemEval writes it, or in ISO 8601; ``None`` when it is neither."""
    match = _LME_DATE.fullmatch(text.strip())
    try:
        if match:
            year, month, day, hour, minute = (int(g) for g in match.groups())
            return dt.datetime(year, month, day, hour, minute)
        return dt.datetime.fromisoformat(text.strip())
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of a chat session."""

    role: str  # "user" | "assistant"
    content: str
    has_answer: bool  # False when the key is absent


@dataclass(frozen=True, slots=True)
class Question:
    """One validated question record with its haystack."""

    question_id: str
    question_type: str
    question: str
    answer: str  # non-string answers (ints in the real file) are str()-ed
    question_date: str
    haystack_session_ids: tuple[str, ...]
    haystack_dates: tuple[str, ...]
    haystack_sessions: tuple[tuple[Turn, ...], ...]
    answer_session_ids: tuple[str, ...]
    index: int  # position in the file
    #: the gold turns as (session position, turn index), when the dataset names turns (LoCoMo's
    #: evidence); ``None``: the ``has_answer`` turns of the answer sessions (LongMemEval)
    evidence: tuple[tuple[int, int], ...] | None = None
    #: questions with the same history id share one history (one conversation's questions): its
    #: store is evicted once per policy x budget x seed and audited for each; "" is the question's own
    history_id: str = ""

    @property
    def is_abstention(self) -> bool:
        """True for abstention questions (id ends in ``_abs``): nothing to restore."""
        return self.question_id.endswith("_abs")

    @property
    def history_key(self) -> str:
        """The id of the history this question is asked of (its own id unless it shares one)."""
        return self.history_id or self.question_id


#: LongMemEval-S's default budgets (tokens): its histories hold about 115k tokens.
LONGMEMEVAL_BUDGETS: tuple[int, ...] = (80_000, 30_000, 8_000)


@dataclass(frozen=True, slots=True)
class Dataset:
    """A loaded data file, whatever its benchmark: questions the audit can read."""

    path: str
    sha256: str  # hex digest of the file bytes
    questions: tuple[Question, ...]  # all valid records, abstention included
    is_official: bool  # sha256 matches the official file
    #: the loader that read it (its registry name)
    name: str = "longmemeval"
    #: the loader's default budgets (tokens), used unless ``--restore-budgets`` names some
    budgets: tuple[int, ...] = LONGMEMEVAL_BUDGETS
    #: questions of the file the loader left out, as (question id, reason): counted in the report
    excluded: tuple[tuple[str, str], ...] = ()
    #: data flaws the loader handled by a documented rule, as (kind, count): said in the report
    repairs: tuple[tuple[str, int], ...] = ()


def load_dataset(path: PathLike, *, cache_dir: PathLike | None = None) -> Dataset:
    """Read, hash, parse and validate a LongMemEval-S file.

    Raises ``DataError`` (one-line message) when the file is missing, is not
    UTF-8 JSON, is not a non-empty list, or holds any malformed record.

    With ``cache_dir``, the validated dataset is also written there in a
    compact form (see :func:`load_cached`). Another process (an xdist worker)
    that loads the same unchanged file reads that instead of parsing ~270 MB
    of JSON again.
    """
    return load_cached(path, cache_dir, "longmemeval", _load_dataset)


def load_cached(
    path: PathLike,
    cache_dir: PathLike | None,
    key: str,
    load: Callable[[str], Dataset],
    code: Sequence[str] = (),
    *,
    prepare: bool = True,
) -> Dataset:
    """``load(path)``, through a prepared copy in ``cache_dir`` when there is one (and left there).

    The copy is ``marshal`` (plain values only, nothing that runs code on
    load), keyed by the file's path, size, modification time and inode, by
    ``key`` (which loader, as asked) and by the code of this module and of
    the files named in ``code`` (the loaders' modules). ``prepare=False``
    reads a copy that is there but writes none.
    """
    name = os.fspath(path)
    cached = _cache_file(name, cache_dir, key, code) if cache_dir is not None else None
    if cached is not None:
        dataset = _read_cached(cached, name)
        if dataset is not None:
            return dataset
    dataset = load(name)
    if cached is not None and prepare:
        _write_cached(cached, dataset)
    return dataset


def is_prepared(path: PathLike, cache_dir: PathLike, key: str = "longmemeval", code: Sequence[str] = ()) -> bool:
    """Whether :func:`load_cached` with these arguments will read its prepared copy (a quick load)."""
    cached = _cache_file(os.fspath(path), cache_dir, key, code)
    return cached is not None and cached.exists()


#: gzip's magic: the first two bytes of every gzip file.
_GZIP_MAGIC = b"\x1f\x8b"
#: A JSON escape that may decode to a surrogate (lone ones are text UTF-8 cannot hold).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
#: A surrogate left in a parsed string: a valid escaped pair decodes to one character, so any is lone.
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class RawData:
    """A data file read and parsed, before any loader looks at it."""

    path: str
    sha256: str  #: of the file's bytes as stored (compressed, for a gzip file)
    value: Any  #: the parsed JSON
    gzip: bool  #: the file was gzip-compressed
    #: whether the text held escapes that may be surrogates (:func:`check_encodable` then looks)
    escapes: bool = False


def read_json(path: PathLike, *, what: str = "JSON") -> RawData:
    """Read, hash, decompress (gzip, by its magic bytes), decode and parse a data file.

    Every problem is a one-line ``DataError`` naming the file: unreadable, a
    damaged gzip stream, not UTF-8, not JSON (``what`` names the JSON expected
    in the too-deeply-nested case).
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise DataError(name, f"cannot read the file: {exc.strerror or exc}") from None
    sha256 = hashlib.sha256(raw).hexdigest()
    compressed = raw[:2] == _GZIP_MAGIC
    if compressed:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(name, f"a gzip file that does not decompress: {exc}") from None
    gz = " (after gzip decompression)" if compressed else ""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(name, f"not UTF-8 text{gz}: bad byte at offset {exc.start}") from None
    # Drop the bytes before parsing: the raw file and its parse need not be held at once.
    del raw
    escapes = _SURROGATE_ESCAPE.search(text) is not None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(
            name, f"not valid JSON{gz}: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        # Arrays or objects nested thousands deep: no data record looks like that.
        raise DataError(name, f"not valid {what}: nested too deeply to parse") from None
    return RawData(name, sha256, value, compressed, escapes)


def check_encodable(data: RawData, id_field: str | None) -> None:
    """Refuse text JSON allows but UTF-8 cannot hold (a lone surrogate), naming record and field.

    Only looked for when the file's text held an escape that can make one
    (``RawData.escapes``): plain UTF-8 text cannot. Each record of the
    top-level list is named by its index and, when it has one, ``id_field``.
    """
    if not data.escapes:
        return
    records = data.value if isinstance(data.value, list) else [data.value]
    for index, record in enumerate(records):
        where = _surrogate_in(record, "")
        if where is None:
            continue
        field, text = where
        qid = record.get(id_field) if isinstance(record, dict) and id_field else None
        position = _SURROGATE.search(text)
        assert position is not None
        raise DataError(
            data.path,
            f"text UTF-8 cannot hold: a lone surrogate \\u{ord(position.group()):04x} at character "
            f"{position.start()} (the JSON has an unpaired \\ud800-\\udfff escape)",
            index=index,
            question_id=qid if isinstance(qid, str) and not _SURROGATE.search(qid) else None,
            field=field or None,
        )


def _surrogate_in(value: Any, where: str) -> tuple[str, str] | None:
    """The first (field path, string) under ``value`` holding a surrogate, keys included."""
    if isinstance(value, str):
        return (where, value) if _SURROGATE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            if _SURROGATE.search(key):
                return (path, key)
            found = _surrogate_in(item, path)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _surrogate_in(item, f"{where}[{i}]")
            if found is not None:
                return found
    return None


def _load_dataset(name: str) -> Dataset:
    return load_longmemeval(read_json(name, what="LongMemEval-S JSON"))


def load_longmemeval(data: RawData) -> Dataset:
    """Validate a parsed LongMemEval-S file (:func:`read_json`) into a :class:`Dataset`."""
    name, sha256, records = data.path, data.sha256, data.value
    if not isinstance(records, list):
        raise DataError(name, f"expected a JSON list of question records, got {json_kind(records)}")
    if not records:
        raise DataError(name, "the list of question records is empty")

    interner = _Interner()
    seen: dict[str, int] = {}
    questions = []
    for index, record in enumerate(records):
        question = _question(name, index, record, interner)
        first = seen.setdefault(question.question_id, index)
        if first != index:
            raise DataError(
                name,
                f"duplicate id: also used by the question at index {first}",
                index=index,
                question_id=question.question_id,
                field="question_id",
            )
        questions.append(question)
    check_encodable(data, "question_id")
    return Dataset(
        path=name,
        sha256=sha256,
        questions=tuple(questions),
        is_official=is_official_sha256(sha256),
    )


# --- the shared cache of validated datasets -----------------------------------

_CACHE_FORMAT = 2


def _cache_file(name: str, cache_dir: PathLike, key: str, code: Sequence[str]) -> Path | None:
    """Where a validated copy of the file at ``name`` is cached (``None``: the file is unreadable)."""
    try:
        st = os.stat(name)
    except OSError:
        return None  # the load reports it
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for file in code:
        digest.update(Path(file).read_bytes())
    stamp = f"{os.path.realpath(name)}\x1f{st.st_size}\x1f{st.st_mtime_ns}\x1f{st.st_ino}\x1f{key}\x1f{digest.hexdigest()[:12]}"
    return Path(os.fspath(cache_dir)) / f"dataset-{hashlib.sha256(stamp.encode()).hexdigest()[:24]}.marshal"


def _read_cached(file: Path, name: str) -> Dataset | None:
    """The dataset cached in ``file``, or ``None`` when there is none (or it cannot be read)."""
    try:
        data = marshal.loads(file.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if not isinstance(data, tuple) or len(data) != 8 or data[0] != _CACHE_FORMAT:
        return None
    _, sha256, turn_rows, session_rows, question_rows, loader, budgets, extra = data
    excluded, repairs = extra
    turns = [Turn(role, content, has_answer) for role, content, has_answer in turn_rows]
    sessions = [tuple(turns[i] for i in row) for row in session_rows]
    questions = tuple(
        Question(qid, qtype, text, answer, date, sids, dates, tuple(sessions[i] for i in sidx), aids, index, evidence, hid)
        for qid, qtype, text, answer, date, sids, dates, sidx, aids, index, evidence, hid in question_rows
    )
    return Dataset(
        path=name,
        sha256=sha256,
        questions=questions,
        is_official=is_official_sha256(sha256),
        name=loader,
        budgets=budgets,
        excluded=excluded,
        repairs=repairs,
    )


def _write_cached(file: Path, dataset: Dataset) -> None:
    """Write ``dataset`` to ``file`` atomically (readers see the whole file or none); best effort."""
    turn_ids: dict[int, int] = {}
    session_ids: dict[int, int] = {}
    turn_rows: list[tuple[str, str, bool]] = []
    session_rows: list[tuple[int, ...]] = []
    question_rows = []
    for q in dataset.questions:
        sidx = []
        for session in q.haystack_sessions:
            s = session_ids.get(id(session))
            if s is None:
                row = []
                for turn in session:
                    t = turn_ids.get(id(turn))
                    if t is None:
                        t = turn_ids[id(turn)] = len(turn_rows)
                        turn_rows.append((turn.role, turn.content, turn.has_answer))
                    row.append(t)
                s = session_ids[id(session)] = len(session_rows)
                session_rows.append(tuple(row))
            sidx.append(s)
        question_rows.append(
            (q.question_id, q.question_type, q.question, q.answer, q.question_date,
             q.haystack_session_ids, q.haystack_dates, tuple(sidx), q.answer_session_ids, q.index,
             q.evidence, q.history_id)
        )
    payload = marshal.dumps(
        (_CACHE_FORMAT, dataset.sha256, turn_rows, session_rows, question_rows, dataset.name, dataset.budgets,
         (dataset.excluded, dataset.repairs))
    )
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_name(f"{file.name}.{os.getpid()}.tmp")
        tmp.write_bytes(payload)
        os.replace(tmp, file)
    except OSError:
        pass  # a cache that cannot be written only costs time


def is_official_sha256(digest: str) -> bool:
    """True when a hex sha256 is that of the official ``longmemeval_s_cleaned.json``."""
    return digest.startswith(OFFICIAL_SHA256_PREFIX) and digest.endswith(OFFICIAL_SHA256_SUFFIX)


# --- validation -------------------------------------------------------------

class _Interner:
    """Shares identical turns and sessions across the whole file.

    Keys are built only from already validated values (``has_answer`` is a
    real bool), so ``1 == True``-style collisions cannot merge a bad turn
    with a good one.
    """

    def __init__(self) -> None:
        self.turns: dict[tuple[str, str, bool], Turn] = {}
        self.sessions: dict[tuple[tuple[str, str, bool], ...], tuple[Turn, ...]] = {}

    def session(self, keys: list[tuple[str, str, bool]]) -> tuple[Turn, ...]:
        key = tuple(keys)
        shared = self.sessions.get(key)
        if shared is None:
            turns = self.turns
            built = []
            for turn_key in key:
                turn = turns.get(turn_key)
                if turn is None:
                    turn = turns[turn_key] = Turn(*turn_key)
                built.append(turn)
            shared = self.sessions[key] = tuple(built)
        return shared


def _question(path: str, index: int, record: object, interner: _Interner) -> Question:
    """Validate one record and convert it to a ``Question``."""
    if not isinstance(record, dict):
        raise DataError(
            path, f"expected a question record (object), got {json_kind(record)}", index=index
        )
    rec = FieldChecks(path, index, record)
    # The id comes first so that every later message can name the question.
    question_id = rec.string("question_id", nonempty=True)
    rec.question_id = question_id
    question_type = rec.string("question_type", nonempty=True)
    if question_type not in _KNOWN_TYPES:
        raise rec.fail(
            "question_type", f"unknown type {show(question_type)} (LongMemEval-S has {', '.join(QUESTION_TYPES)})"
        )
    question = rec.string("question")
    answer = rec.get("answer")
    # The real file has a few integer answers; bool is an int subclass but never an answer.
    if isinstance(answer, int) and not isinstance(answer, bool):
        answer = str(answer)
    elif not isinstance(answer, str):
        raise rec.fail("answer", f"expected a string or an integer, got {json_kind(answer)}")
    question_date = rec.string("question_date")
    if parse_date(question_date) is None:
        raise rec.fail("question_date", f"not a date: {show(question_date)} (expected like '2023/05/30 (Tue) 23:40')")
    session_ids = rec.strings("haystack_session_ids")
    dates = rec.strings("haystack_dates")
    sessions = _sessions(rec, interner)
    for field, values in (("haystack_session_ids", session_ids), ("haystack_dates", dates)):
        if len(values) != len(sessions):
            raise rec.fail(
                field,
                f"has {len(values)} entries but haystack_sessions has {len(sessions)}",
            )
    first_at: dict[str, int] = {}
    for i, sid in enumerate(session_ids):
        at = first_at.setdefault(sid, i)
        if at != i:
            # answer_session_ids could not say which of the two sessions holds the evidence
            raise rec.fail(f"haystack_session_ids[{i}]", f"{show(sid)} repeats haystack_session_ids[{at}]")
    answer_ids = rec.strings("answer_session_ids")
    known = set(session_ids)
    for i, sid in enumerate(answer_ids):
        if sid not in known:
            raise rec.fail(
                f"answer_session_ids[{i}]", f"{show(sid)} is not among haystack_session_ids"
            )
    return Question(
        question_id=question_id,
        question_type=question_type,
        question=question,
        answer=answer,
        question_date=question_date,
        haystack_session_ids=session_ids,
        haystack_dates=dates,
        haystack_sessions=sessions,
        answer_session_ids=answer_ids,
        index=index,
    )


def _sessions(rec: FieldChecks, interner: _Interner) -> tuple[tuple[Turn, ...], ...]:
    """Validate ``haystack_sessions`` and convert it to shared turn tuples."""
    field = "haystack_sessions"
    value = rec.get(field)
    if not isinstance(value, list):
        raise rec.fail(field, f"expected a list of sessions, got {json_kind(value)}")
    roles = ROLES
    sessions = []
    # This loop runs once per turn of the file: plain type checks, no helpers.
    for s, session in enumerate(value):
        if not isinstance(session, list):
            raise rec.fail(f"{field}[{s}]", f"expected a list of turns, got {json_kind(session)}")
        keys = []
        for t, turn in enumerate(session):
            if not isinstance(turn, dict):
                raise rec.fail(f"{field}[{s}][{t}]", f"expected a turn object, got {json_kind(turn)}")
            role = turn.get("role")
            content = turn.get("content")
            has_answer = turn.get("has_answer", False)
            # Exact class checks: json only makes exact types, and ``role`` is checked to be a
            # str before the set lookup (a list there would raise TypeError).
            if (
                role.__class__ is not str
                or role not in roles
                or content.__class__ is not str
                or has_answer.__class__ is not bool
            ):
                _turn_problem(rec, f"{field}[{s}][{t}]", turn)
            keys.append((role, content, has_answer))
        sessions.append(interner.session(keys))
    return tuple(sessions)


def _turn_problem(rec: FieldChecks, where: str, turn: dict[str, Any]) -> NoReturn:
    """Raise the precise error for a turn that failed the fast check."""
    if "role" not in turn:
        raise rec.fail(f"{where}.role", "missing")
    role = turn["role"]
    if not isinstance(role, str):
        raise rec.fail(f"{where}.role", f"expected a string, got {json_kind(role)}")
    if role not in ROLES:
        raise rec.fail(
            f"{where}.role", f"unknown role {show(role)} (expected 'user' or 'assistant')"
        )
    if "content" not in turn:
        raise rec.fail(f"{where}.content", "missing")
    content = turn["content"]
    if not isinstance(content, str):
        raise rec.fail(f"{where}.content", f"expected a string, got {json_kind(content)}")
    has_answer = turn.get("has_answer", False)
    raise rec.fail(f"{where}.has_answer", f"expected a boolean, got {json_kind(has_answer)}")


def auditable(dataset: Dataset, granularity: str) -> tuple[int, int, int]:
    """``(abstention, without_gold, auditable)`` question counts at ``granularity``.

    The same rule as ``units.build_history``'s gold, without building any
    history: at turn granularity a question needs a ``has_answer`` turn in one
    of its answer sessions, at session granularity an answer session in its
    haystack. A file with no auditable question stops the run before it starts.
    """
    abstention = without_gold = 0
    for q in dataset.questions:
        if q.is_abstention:
            abstention += 1
            continue
        if q.evidence is not None:
            without_gold += not q.evidence
            continue
        answers = set(q.answer_session_ids)
        sessions = [turns for sid, turns in zip(q.haystack_session_ids, q.haystack_sessions) if sid in answers]
        if granularity == "turn":
            has_gold = any(turn.has_answer for turns in sessions for turn in turns)
        else:
            has_gold = bool(sessions)
        without_gold += not has_gold
    return abstention, without_gold, len(dataset.questions) - abstention - without_gold
