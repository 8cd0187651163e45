"""The per-question record: its schema, reading and writing, the N rule and the bins.

One :class:`Record` per (question, policy, budget, seed, regime, reader). The
audit produces records, the statistics and the report consume them, and
``python -m pytest_restore report`` reads them back through
:func:`read_records`. Everything a consumer needs to know about a record lives
here:

- the fields and their types (:data:`FIELDS`, the dataclass itself);
- which records enter a cell's ``N`` (:attr:`Record.enters_n`);
- the bins (:data:`BINS`) and the rule that assigns them (:func:`bin_of`);
- the cell a record belongs to (:class:`CellKey`).

Counting records is the statistics' work (:mod:`pytest_restore.stats.tally`).

Records cross xdist workers as plain JSON dicts (:meth:`Record.to_json`,
:meth:`Record.from_json`); a ``Record`` is also a read-only mapping, so
``record["policy"]`` reads the same field as ``record.policy``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

from pytest_restore import jsonl

BINS: tuple[str, ...] = ("irreversible", "recoverable", "residual")
REGIMES: tuple[str, ...] = ("a", "b")
#: The ranker of records written before records named theirs.
DEFAULT_RANKER = "bm25-lite"

#: The restore-tightness ablations: (key, title, the record field holding its verdict).
ABLATIONS: tuple[tuple[str, str, str], ...] = (
    ("surviving", "(i) surviving gold only, G ∩ S_P", "ablation_surviving_correct"),
    ("store", "(ii) complete retained store, no cap", "ablation_store_correct"),
    ("placebo", "(iii) length/position-matched placebo", "ablation_placebo_correct"),
)
ABLATION_FIELDS: tuple[str, ...] = tuple(f for _, _, f in ABLATIONS)
#: Every field the ablations fill in (null on a record they did not run on).
ABLATION_RECORD_FIELDS: tuple[str, ...] = (
    *ABLATION_FIELDS,
    "ablation_excluded",
    "ablation_store_tokens",
    "ablation_placebo_units",
    "ablation_placebo_tokens",
)



class CellKey(NamedTuple):
    """What makes a grid cell: the records of one cell are counted and tested together.

    The grid's dimensions, each a record field. A new dimension (a ranker, a
    dataset) is a field here (with the record field it is read from in
    :meth:`of`) and a place in :func:`pytest_restore.stats.results.cell_order`;
    the analysis and every renderer read cells through this key. Read its
    fields by name: the ranker dimension made it five long (empty ``ranker``
    for every cell of a one-ranker run).
    """

    policy: str
    budget: int
    regime: str
    reader: str
    #: the ranker, when the run compared several (``--restore-rankers``) and this is not the
    #: baseline one (:func:`baseline_ranker`); "" for the baseline's cells and every one-ranker run
    ranker: str = ""

    @classmethod
    def of(cls, record: Mapping[str, Any], baseline: str | None = None) -> CellKey:
        """The cell a record belongs to; ``baseline`` is the run's baseline ranker when it compared several."""
        ranker = ranker_of(record)
        return cls(
            str(record["policy"]),
            int(record["budget"]),
            str(record["regime"]),
            str(record["reader"]),
            "" if baseline is None or ranker == baseline else ranker,
        )


def ranker_of(record: Mapping[str, Any]) -> str:
    """The ranker a record was read with (records older than the field used BM25-lite)."""
    return str(record.get("ranker") or DEFAULT_RANKER)


def baseline_ranker(records: Iterable[Mapping[str, Any]]) -> str | None:
    """The ranker the others are compared with when the records hold several: ``bm25-lite`` when
    present (the protocol's), else the first by name; ``None`` for one ranker."""
    rankers = sorted({ranker_of(r) for r in records})
    if len(rankers) < 2:
        return None
    return DEFAULT_RANKER if DEFAULT_RANKER in rankers else rankers[0]

#: The version of the record schema this package writes (``summary.json``'s ``record_schema``,
#: beside ``records.jsonl``) and reads. Files without a version (written before there was one)
#: are read by the current rule: a field they lack reads as null. Any other version is refused
#: in one line (:func:`check_schema_version`). Adding a field that reads as null when absent
#: keeps the version; changing what a field means or dropping one raises it.
SCHEMA_VERSION = 1
#: The fields that identify a record: no two records of one run share them.
KEY_FIELDS: tuple[str, ...] = ("question_id", "policy", "budget", "seed", "regime", "reader")


class RecordError(ValueError):
    """A record that breaks the schema; ``str(err)`` is one line naming the field."""


# -- validation --------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_verdict(value: Any) -> bool:
    return value is None or isinstance(value, bool)


def _list_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or isinstance(v, (list, tuple)) and all(check(x) for x in v)


_STR, _OPT_STR, _INT, _OPT_INT = (
    (_is_str, "a string"),
    (_optional(_is_str), "a string or null"),
    (_is_int, "an integer"),
    (_optional(_is_int), "an integer or null"),
)
_VERDICT = (_is_verdict, "true, false or null")
_BOOL = (lambda v: isinstance(v, bool), "true or false")
_REGIME = (lambda v: v in REGIMES, "'a' or 'b'")
_BIN = (lambda v: v is None or v in BINS, "'irreversible', 'recoverable', 'residual' or null")
_GRANULARITY = (lambda v: v is None or v in ("turn", "session"), "'turn', 'session' or null")
_INT_LIST = (_list_of(_is_int), "a list of integers or null")
_STR_LIST = (_list_of(_is_str), "a list of strings or null")
_STR_MAP = (
    lambda v: v is None or isinstance(v, dict) and all(_is_str(x) for x in v.values()),
    "an object of strings or null",
)


def _field(kind: tuple[Callable[[Any], bool], str], meaning: str, *, required: bool = True) -> Any:
    """One record field's declaration: its check, what a valid value is, and what it means.

    A field added after the first release is not ``required``: it reads as null when absent.
    """
    check, want = kind
    metadata = {"check": check, "want": want, "meaning": meaning}
    return field(metadata=metadata) if required else field(default=None, metadata=metadata)


@dataclass(frozen=True)
class Record(Mapping[str, Any]):
    """One question under one policy, budget, seed, regime and reader.

    Each field is declared once, here: its type, its check, what a valid
    value is and what it means (the field's metadata, read by :data:`FIELDS`,
    :data:`MEANINGS`, :func:`check` and :func:`schema_markdown`, which
    generates ``docs/DESIGN.md``'s table). The first block of fields is
    required in a saved record; the rest were added later and read as null
    when absent.
    """

    question_id: str = _field(_STR, "the question")
    question_type: str = _field(_STR, "its LongMemEval type")
    policy: str = _field(_STR, "eviction policy (registry name)")
    budget: int = _field(_INT, "memory budget in tokens (no-evict carries the cell's budget)")
    seed: int = _field(_INT, "the policy's seed (0 for deterministic policies)")
    regime: str = _field(_REGIME, "a = forced surviving gold, b = top-k retrieval")
    reader: str = _field(_STR, "reader model name")
    oracle_correct: bool | None = _field(_VERDICT, "the reader with all of the history (null: the call failed)")
    policy_correct: bool | None = _field(_VERDICT, "the reader with the policy's store (null when excluded)")
    restored_correct: bool | None = _field(_VERDICT, "the reader with the store plus the evicted gold restored")
    negative_restore_gain: bool = _field(_BOOL, "policy right, restored wrong")
    gold_units: int = _field(_INT, "size of G_q, the gold units")
    gold_evicted: int | None = _field(_OPT_INT, "gold units not in the store (null when there is no store)")
    bin: str | None = _field(_BIN, "only oracle-answerable policy errors are binned (see bin_of)")
    excluded: str | None = _field(_OPT_STR, "why the record is out of N (a failed model call), else null")
    # -- added later: null when absent ------------------------------------------
    judge: str | None = _field(_OPT_STR, "judge model name", required=False)
    scorer: str | None = _field(_OPT_STR, "importance scorer name, null unless the policy uses it", required=False)
    ranker: str | None = _field(
        _OPT_STR, "the run's ranker (missing: bm25-lite, the only one before the field)", required=False
    )
    run_id: str | None = _field(
        _OPT_STR, "digest of what the run was asked (data, prompts, the settings that decide records)", required=False
    )
    granularity: str | None = _field(_GRANULARITY, "what one memory unit is", required=False)
    question: str | None = _field(_OPT_STR, "question text (for the report's cases)", required=False)
    reference: str | None = _field(_OPT_STR, "reference answer (for the report's cases)", required=False)
    gold_tokens: int | None = _field(_OPT_INT, "tokens of G_q", required=False)
    gold_evicted_units: tuple[int, ...] | None = _field(
        _INT_LIST, "positions of the evicted gold units", required=False
    )
    gold_evicted_where: tuple[str, ...] | None = _field(
        _STR_LIST, "the same units as 'session S, turn T (date, role)'", required=False
    )
    error: str | None = _field(_OPT_STR, "the failed call's message (the reason is in excluded)", required=False)
    oracle_prompt: str | None = _field(
        _OPT_STR, "first 16 hex of the sha256 of the oracle's reader request", required=False
    )
    policy_prompt: str | None = _field(_OPT_STR, "the same for the policy condition", required=False)
    restored_prompt: str | None = _field(_OPT_STR, "the same for the restored condition", required=False)
    oracle_answer: str | None = _field(_OPT_STR, "the reader's answer, oracle condition", required=False)
    policy_answer: str | None = _field(_OPT_STR, "the reader's answer, policy condition", required=False)
    restored_answer: str | None = _field(_OPT_STR, "the reader's answer, restored condition", required=False)
    policy_injected_tokens: int | None = _field(
        _OPT_INT, "tokens injected into the reader's context, policy condition", required=False
    )
    restored_injected_tokens: int | None = _field(_OPT_INT, "the same, restored condition", required=False)
    policy_injected_units: int | None = _field(_OPT_INT, "units injected, policy condition", required=False)
    restored_injected_units: int | None = _field(_OPT_INT, "units injected, restored condition", required=False)
    store_tokens: int | None = _field(_OPT_INT, "size of the store S_P in tokens", required=False)
    store_units: int | None = _field(_OPT_INT, "size of the store S_P in units", required=False)
    ablation_surviving_correct: bool | None = _field(
        _VERDICT, "(i) G_q ∩ S_P forced, S_P ranked (regime a's context)", required=False
    )
    ablation_store_correct: bool | None = _field(_VERDICT, "(ii) all of S_P forced, no cap", required=False)
    ablation_placebo_correct: bool | None = _field(
        _VERDICT, "(iii) a nearby non-gold placebo forced in the gold's place", required=False
    )
    ablation_excluded: Mapping[str, str] | None = _field(
        _STR_MAP, "null: not run; {}: run; else ablation -> reason", required=False
    )
    ablation_store_tokens: int | None = _field(_OPT_INT, "tokens injected by (ii)", required=False)
    ablation_placebo_units: tuple[int, ...] | None = _field(_INT_LIST, "the placebo's positions", required=False)
    ablation_placebo_tokens: int | None = _field(_OPT_INT, "the placebo's tokens", required=False)

    # -- the counting rule --------------------------------------------------------

    @property
    def enters_n(self) -> bool:
        """Whether the record enters its cell's ``N``: not excluded and oracle-answerable."""
        return enters_n(self)

    @property
    def cell(self) -> CellKey:
        """The record's grid cell."""
        return CellKey.of(self)

    @property
    def key(self) -> tuple[Any, ...]:
        """The :data:`KEY_FIELDS` and the ranker: unique within one run (a run of several rankers has a record per ranker)."""
        return (*(getattr(self, name) for name in KEY_FIELDS), ranker_of(self))

    # -- JSON ------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict of every field (tuples as lists)."""
        out: dict[str, Any] = {name: getattr(self, name) for name in _NAMES}
        for name in _TUPLES:
            if out[name] is not None:
                out[name] = list(out[name])
        if out["ablation_excluded"] is not None:
            out["ablation_excluded"] = dict(out["ablation_excluded"])
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Record:
        """Validate a JSON object and build the record; a problem raises :class:`RecordError`.

        The message names the question and the field (the caller prefixes the
        file and line).
        """
        problem = check(data)
        if problem is not None:
            name, what = problem
            raise RecordError(f"question {data.get('question_id', '?')!r}: field {name!r}: {what}")
        values: dict[str, Any] = {name: data.get(name) for name in _NAMES}
        for name in _TUPLES:
            if values[name] is not None:
                values[name] = tuple(values[name])
        return cls(**values)

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> Record:
        """``record`` itself when it is a :class:`Record`, else validated from its fields."""
        return record if isinstance(record, Record) else cls.from_json(record)

    def with_fields(self, **changes: Any) -> Record:
        """A copy with some fields changed (the audit fills in the ablations this way)."""
        return type(self)(**{**{n: getattr(self, n) for n in _NAMES}, **changes})

    # -- read-only mapping view: consumers written against dict records keep working --

    def __getitem__(self, name: str) -> Any:
        if name not in _NAME_SET:
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(_NAMES)

    def __len__(self) -> int:
        return len(_NAMES)


_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Record))
_NAME_SET = frozenset(_NAMES)
#: Fields held as tuples (lists in JSON), read off the annotations so a new one cannot be missed.
_TUPLES: tuple[str, ...] = tuple(f.name for f in fields(Record) if str(f.type).startswith("tuple["))
#: Fields a saved record must carry (the rest read as null when absent).
REQUIRED_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Record) if f.default is MISSING)
#: Every field: (name, check, what the check wants), read off the declarations.
FIELDS: tuple[tuple[str, Callable[[Any], bool], str], ...] = tuple(
    (f.name, f.metadata["check"], f.metadata["want"]) for f in fields(Record)
)
_CHECKS = {name: (check, want) for name, check, want in FIELDS}
#: What each field means (``docs/DESIGN.md`` shows this table: :func:`schema_markdown`).
MEANINGS: dict[str, str] = {f.name: f.metadata["meaning"] for f in fields(Record)}


def enters_n(record: Mapping[str, Any]) -> bool:
    """The one rule for a cell's ``N``: not excluded and the oracle answered correctly.

    Excluded records (failed model calls) are counted apart, never as errors.
    """
    return record["excluded"] is None and record["oracle_correct"] is True


def bin_of(*, oracle_correct: bool | None, policy_correct: bool | None,
           restored_correct: bool | None, gold_evicted: int | None) -> str | None:
    """The bin of a not-excluded record: only oracle-answerable policy errors are binned.

    Restore fixes it and gold was evicted: irreversible; restore fixes it and
    no gold was evicted: recoverable; restore does not fix it: residual.
    """
    if not oracle_correct or policy_correct is not False:
        return None
    if restored_correct:
        return "irreversible" if gold_evicted else "recoverable"
    return "residual"


def check_schema_version(version: Any, where: str) -> None:
    """Refuse, in one line naming ``where``, records of a schema version this package does not read.

    ``None`` (a file from before versions) reads by the current rule.
    """
    if version is None or version == SCHEMA_VERSION:
        return
    raise RecordError(
        f"{where}: records of schema version {version!r}; this pytest-restore reads version {SCHEMA_VERSION} "
        "(and files without a version): use the pytest-restore release that wrote them"
    )


def schema_markdown() -> str:
    """The record schema as a markdown table: field, what a valid value is, meaning, required."""
    lines = ["| field | value | required | meaning |", "|---|---|---|---|"]
    for name, _check, want in FIELDS:
        required = "yes" if name in REQUIRED_FIELDS else ""
        lines.append(f"| `{name}` | {want} | {required} | {MEANINGS[name]} |")
    return "\n".join(lines) + "\n"


def check(record: Mapping[str, Any], required: Sequence[str] = REQUIRED_FIELDS) -> tuple[str, str] | None:
    """The first field of ``record`` that is missing, unknown or wrong, and what is wrong with it.

    ``required`` fields must be present; every other known field is checked
    when present. Then the fields must agree with the counting rule: a record
    in ``N`` has a verdict, and only an oracle-answerable policy error has a bin.
    """
    for name in required:
        if name not in record:
            return name, "missing"
    for name, value in record.items():
        if name not in _CHECKS:
            return name, "not a record field"
        test, want = _CHECKS[name]
        if not test(value):
            return name, f"must be {want}, got {json.dumps(value, default=str)}"
    counted = enters_n(record)
    if counted and record["policy_correct"] is None:
        return "policy_correct", "null on an oracle-answerable record that is not excluded"
    if record["bin"] is not None and not (counted and record["policy_correct"] is False):
        return "bin", f"{record['bin']!r} on a record that is not an oracle-answerable policy error"
    return None


# -- records.jsonl ------------------------------------------------------------------------


def dumps(records: Iterable[Mapping[str, Any]]) -> str:
    """``records.jsonl`` text: one JSON object per record, keys sorted, in the given order."""
    return jsonl.dumps((r.to_json() if isinstance(r, Record) else dict(r) for r in records), sort_keys=True)


def read_records(path: str | Path) -> list[Record]:
    """Read and validate ``records.jsonl``.

    A bad line is a one-line :class:`RecordError` naming the file, the line,
    the question and the field. The records must be of one run: one
    ``run_id``, one granularity, and no record key (:data:`KEY_FIELDS`) twice;
    the first conflict is named with the line it contradicts.
    """
    p = Path(path)
    try:
        text = jsonl.read_text(p)
    except OSError as exc:
        raise RecordError(f"{p}: cannot read: {exc.strerror}") from None
    except jsonl.JsonlError as err:
        raise RecordError(str(err)) from None
    records = []
    run = _OneRun()
    for n, line in jsonl.numbered_lines(text):
        try:
            data = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise RecordError(f"{p}: line {n}: not JSON: {msg}") from None
        if not isinstance(data, dict):
            raise RecordError(f"{p}: line {n}: not a JSON object")
        try:
            record = Record.from_json(data)
        except RecordError as err:
            raise RecordError(f"{p}: line {n}: {err}") from None
        conflict = run.conflict(record, n)
        if conflict is not None:
            raise RecordError(f"{p}: line {n}: question {record.question_id!r}: {conflict}")
        records.append(record)
    if not records:
        raise RecordError(f"{p}: no records")
    return records


#: Fields every record of one run shares, and what mixing them means.
RUN_FIELDS: tuple[tuple[str, str], ...] = (
    ("run_id", "records of two runs"),
    ("granularity", "mixed granularity"),
)


class _OneRun:
    """What the records read so far say about their run: its shared fields and the keys seen."""

    def __init__(self) -> None:
        self.first: tuple[int, Record] | None = None
        self.seen: dict[tuple[Any, ...], int] = {}

    def conflict(self, record: Record, line: int) -> str | None:
        """Why ``record`` (on ``line``) cannot join the records before it, or ``None``."""
        if self.first is None:
            self.first = (line, record)
        first_line, first = self.first
        for name, meaning in RUN_FIELDS:
            if record[name] != first[name]:
                return (
                    f"field {name!r}: {record[name]!r} differs from line {first_line}'s "
                    f"{first[name]!r} ({meaning})"
                )
        earlier = self.seen.setdefault(record.key, line)
        if earlier != line:
            return f"repeats the record of line {earlier} ({describe(record)})"
        return None


def describe(record: Mapping[str, Any]) -> str:
    """The record's key fields, for an error message."""
    return ", ".join(f"{k}={record.get(k)!r}" for k in KEY_FIELDS)
