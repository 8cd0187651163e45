"""``records.jsonl``: the one writer and reader of a run's records, and the version-1 migration.

:func:`dumps` writes records as ``records.jsonl`` (one JSON object a line,
keys sorted); :func:`read_records` reads one run's file back, each line
validated as a :class:`~pytest_restore.record.Record` and named in a one-line
:class:`~pytest_restore.record.RecordError` when it is not; files of schema
version 1 (one flat object per record) are migrated as read
(:func:`migrate_v1`, :func:`from_v1`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_restore import jsonl
from pytest_restore.record import (
    ABLATIONS,
    CONDITIONS,
    KEY_FIELDS,
    Record,
    RecordError,
    check_schema_version,
)

__all__ = ["V1_MOVED", "describe", "dumps", "from_v1", "migrate_v1", "read_records"]


# -- version 1: one flat object per record -----------------------------------------------

#: Where each field of a version-1 record went in version 2 (the fields not named here kept
#: their name at the top): the three conditions' fields and the ablations' moved into objects.
V1_MOVED: dict[str, str] = {
    **{f"{c}_correct": f"conditions.{c}.correct" for c in CONDITIONS},
    **{f"{c}_answer": f"conditions.{c}.answer" for c in CONDITIONS},
    **{f"{c}_prompt": f"conditions.{c}.prompt" for c in CONDITIONS},
    **{f"{c}_injected_tokens": f"conditions.{c}.injected_tokens" for c in ("policy", "restored")},
    **{f"{c}_injected_units": f"conditions.{c}.injected_units" for c in ("policy", "restored")},
    **{f"ablation_{a}_correct": f"ablations.{a}_correct" for a, _title in ABLATIONS},
    "ablation_excluded": "ablations.excluded",
    "ablation_store_tokens": "ablations.store_tokens",
    "ablation_placebo_units": "ablations.placebo_units",
    "ablation_placebo_tokens": "ablations.placebo_tokens",
}
_V1_REQUIRED = ("oracle_correct", "policy_correct", "restored_correct")
_V1_NAME = {path: name for name, path in V1_MOVED.items()}


def migrate_v1(data: Mapping[str, Any]) -> dict[str, Any]:
    """A version-1 record (one flat object) as a version-2 JSON object; the values are not checked here.

    Each condition's fields (``policy_answer``...) become that condition's
    object; the ablation fields become the ``ablations`` object, null when the
    ablations did not run (``ablation_excluded`` null). A version-1 verdict
    field that is missing stays missing, so :func:`check` names it.
    """
    out: dict[str, Any] = {name: value for name, value in data.items() if name not in V1_MOVED}
    conditions: dict[str, dict[str, Any]] = {c: {} for c in CONDITIONS}
    ablations: dict[str, Any] = {}
    for name, value in data.items():
        path = V1_MOVED.get(name)
        if path is None:
            continue
        parts = path.split(".")
        if parts[0] == "conditions":
            conditions[parts[1]][parts[2]] = value
        else:
            ablations[parts[1]] = value
    out["conditions"] = conditions
    ran = ablations.get("excluded") is not None
    if not ran and any(v is not None for v in ablations.values()):
        out["ablations"] = ablations  # refused by check: the ablations' fields without their 'excluded'
    else:
        out["ablations"] = ablations if ran else None
    return out


def from_v1(data: Mapping[str, Any]) -> Record:
    """Validate a version-1 record and build it (:func:`migrate_v1`); errors name the version-1 field."""
    for name in _V1_REQUIRED:
        if name not in data:
            raise RecordError(f"question {data.get('question_id', '?')!r}: field {name!r}: missing")
    try:
        return Record.from_json(migrate_v1(data))
    except RecordError as err:
        message = str(err)
        for path, name in _V1_NAME.items():
            message = message.replace(f"field {path!r}", f"field {name!r}")
        raise RecordError(message) from None


# -- records.jsonl ------------------------------------------------------------------------


def dumps(records: Iterable[Record]) -> str:
    """``records.jsonl`` text: one JSON object per record, keys sorted, in the given order."""
    return jsonl.dumps((r.to_json() for r in records), sort_keys=True)


def read_records(path: str | Path, version: int | None = None) -> list[Record]:
    """Read and validate ``records.jsonl`` of schema ``version`` (see :data:`SCHEMA_VERSION`).

    Version 1 is migrated as read (:func:`from_v1`). ``None`` (no
    ``summary.json`` names the version): each line's shape decides, a record
    with ``conditions`` being version 2 and one without version 1 (whose
    schema has no such field). A bad line
    is a one-line :class:`RecordError` naming the file, the line, the question
    and the field. The records must be of one run: one ``run_id``, one
    granularity, and no record key (:data:`KEY_FIELDS`) twice; the first
    conflict is named with the line it contradicts.
    """
    p = Path(path)
    check_schema_version(version, str(p))
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
        v1 = version == 1 or (version is None and "conditions" not in data)
        try:
            record = from_v1(data) if v1 else Record.from_json(data)
        except RecordError as err:
            raise RecordError(f"{p}: line {n}: {err}") from None
        conflict = run.conflict(record, n)
        if conflict is not None:
            raise RecordError(f"{p}: line {n}: question {record.question_id!r}: {conflict}")
        records.append(record)
    if not records:
        raise RecordError(f"{p}: no records")
    return records


def _run_fields(record: Record) -> tuple[tuple[str, str | None, str], ...]:
    """The fields every record of one run shares: (name, this record's value, what mixing them means)."""
    return (
        ("run_id", record.run_id, "records of two runs"),
        ("granularity", record.granularity, "mixed granularity"),
    )


class _OneRun:
    """What the records read so far say about their run: its shared fields and the keys seen."""

    def __init__(self) -> None:
        self.first: tuple[int, Record] | None = None
        self.seen: dict[tuple[str | int, ...], int] = {}

    def conflict(self, record: Record, line: int) -> str | None:
        """Why ``record`` (on ``line``) cannot join the records before it, or ``None``."""
        if self.first is None:
            self.first = (line, record)
        first_line, first = self.first
        for (name, mine, meaning), (_name, theirs, _meaning) in zip(_run_fields(record), _run_fields(first)):
            if mine != theirs:
                return f"field {name!r}: {mine!r} differs from line {first_line}'s {theirs!r} ({meaning})"
        earlier = self.seen.setdefault(record.key, line)
        if earlier != line:
            return f"repeats the record of line {earlier} ({describe(record)})"
        return None


def describe(record: Record) -> str:
    """The record's key fields, for an error message."""
    return ", ".join(f"{k}={getattr(record, k)!r}" for k in KEY_FIELDS)
