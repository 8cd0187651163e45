"""A data file's one-line errors and the field checks every loader shares.

:class:`DataError` is how every loader (LongMemEval-S, LoCoMo, the errata, a
user's) says a data file cannot be used: one line naming the file, the record
and the field. :class:`FieldChecks` checks one record's fields and raises it,
located; :func:`json_kind` and :func:`show` name a parsed value in those lines.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DataError", "FieldChecks", "json_kind", "show"]


_JSON_KINDS = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    dict: "object",
    list: "list",
    type(None): "null",
}


def json_kind(value: object) -> str:
    """The JSON name of a parsed value's type, for error messages."""
    return _JSON_KINDS.get(type(value), type(value).__name__)


def show(value: str, limit: int = 80) -> str:
    """A quoted, one-line, length-capped rendering of a string from the file."""
    shown = repr(value)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


class DataError(Exception):
    """A data file that cannot be used.

    ``str(err)`` is one line: ``FILE: question ID (index I): field 'F': problem``;
    the question and field parts are left out when they do not apply (e.g. a
    file that is not JSON), and ``record`` names what the file's records are
    (``conversation`` for LoCoMo). The parts are also kept as attributes.
    """

    def __init__(
        self,
        path: str,
        problem: str,
        *,
        index: int | None = None,
        question_id: str | None = None,
        field: str | None = None,
        record: str = "question",
    ) -> None:
        self.path = path
        self.problem = problem
        self.index = index
        self.question_id = question_id
        self.field = field
        self.record = record
        parts = [path]
        if index is not None:
            if question_id is not None:
                parts.append(f"{record} {show(question_id)} (index {index})")
            else:
                parts.append(f"{record} (index {index})")
        if field is not None:
            parts.append(f"field {field!r}")
        parts.append(problem)
        # One line whatever the path or the problem text hold: callers grep logs.
        message = " ".join(": ".join(parts).splitlines())
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments defeat Exception's default pickling (xdist, multiprocessing).
        return (
            _rebuild_error,
            (self.path, self.problem, self.index, self.question_id, self.field, self.record),
        )


def _rebuild_error(
    path: str, problem: str, index: int | None, question_id: str | None, field: str | None, record: str = "question"
) -> DataError:
    return DataError(path, problem, index=index, question_id=question_id, field=field, record=record)


class FieldChecks:
    """Field checks for one record of a data file, each raising a fully located DataError.

    Loaders share it: ``kind`` is what a record is (``question``,
    ``conversation``), ``question_id`` names it once known.
    """

    def __init__(self, path: str, index: int, record: dict[str, Any], kind: str = "question") -> None:
        self.path = path
        self.index = index
        self.record = record
        self.kind = kind
        self.question_id: str | None = None

    def fail(self, field: str, problem: str) -> DataError:
        return DataError(
            self.path, problem, index=self.index, question_id=self.question_id, field=field, record=self.kind
        )

    def get(self, field: str) -> Any:
        try:
            return self.record[field]
        except KeyError:
            raise self.fail(field, "missing") from None

    def string(self, field: str, *, nonempty: bool = False) -> str:
        value = self.get(field)
        if not isinstance(value, str):
            raise self.fail(field, f"expected a string, got {json_kind(value)}")
        if nonempty and not value:
            raise self.fail(field, "is empty")
        return value

    def strings(self, field: str) -> tuple[str, ...]:
        value = self.get(field)
        if not isinstance(value, list):
            raise self.fail(field, f"expected a list of strings, got {json_kind(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.fail(f"{field}[{i}]", f"expected a string, got {json_kind(item)}")
        return tuple(value)
