"""What a grid item sends the controller: one message, typed, the same in one process or across xdist.

A grid item's runner attaches one :class:`ItemMessage` to the item's report
(``plugin/runner.py``): its cell's records, the data's description and its
process's model calls, or the exit status of a run it stopped. In one process
the message travels as it is; from an xdist worker, as one JSON string
(:meth:`ItemMessage.to_text`: xdist's serializer is pure Python and would take
seconds over a full grid's records as nested values), read back by
:meth:`ItemMessage.of`.

The records in it are the worker's own :class:`~pytest_restore.record.Record`
objects, pickled (:func:`~pytest_restore.run.shared.records_text`): a worker built and checked them as
the one process builds its own, so the controller takes them as they are,
as the one process does, instead of writing them as JSON and reading every
field back and checking it again (on the 500-question grid, 4.4 of the
controller's CPU seconds while the workers ran, and about as much of the
workers' to write it). ``records.jsonl`` and every other file read from
outside the run are still read through ``Record.from_json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_restore.audit.memo import UsageJSON
from pytest_restore.memory.systems import SystemFiguresJSON
from pytest_restore.record import Record
from pytest_restore.report.inputs import data_description, usage_json
from pytest_restore.run.checks import SystemCell
from pytest_restore.run.parts import CallDetail, DataMeta
from pytest_restore.run.shared import pickled_records, records_of_pickle, records_text


@dataclass(frozen=True)
class ItemMessage:
    """One grid item's message to the controller."""

    #: the process that ran the item (``main``, or an xdist worker's id): model calls are summed per process
    process: str
    #: the cell's records (``None``: the item ran no cell, it stopped the run)
    records: tuple[Record, ...] | None = None
    #: the data's description, from the process that loaded it (``RunParts.meta``)
    data: DataMeta = field(default_factory=lambda: DataMeta())
    #: the process's cumulative use of each real model, by role and name (``RunParts.usage``)
    usage: Mapping[str, UsageJSON] = field(default_factory=dict)
    #: the process's real-model calls: failures by cause, concurrency reached, decoding (``RunParts.call_details``)
    calls: Mapping[str, CallDetail] = field(default_factory=dict)
    #: the exit status the item stopped the run with (74: a file could not be read or written)
    exit_code: int | None = None
    #: a memory system's cell: what the system did building the cell's stores (``None``: a policy of raw units)
    memory: SystemCell | None = None
    #: ``records`` as they arrived from another process, pickled (``None``: made in this one), kept for
    #: the report's page process, which reads them as they are (``run/page.py``)
    pickled: bytes | None = field(default=None, compare=False, repr=False)

    def to_text(self, records: str | None = None) -> str:
        """The message as one JSON string; ``records``: the records' :func:`records_text` when already made."""
        if records is None and self.records is not None:
            records = records_text(self.records)
        return json.dumps(
            {
                "process": self.process, "data": self.data, "usage": self.usage, "calls": self.calls,
                "exit_code": self.exit_code, "memory": self.memory or {}, "records": records,
            }
        )

    @classmethod
    def of(cls, value: object) -> ItemMessage:
        """The message as it arrived: itself (one process) or its JSON string (from an xdist worker)."""
        if isinstance(value, ItemMessage):
            return value
        if not isinstance(value, str):
            raise TypeError(f"not a grid item's message: {type(value).__name__}")
        data = json.loads(value)
        pickled = None if data["records"] is None else pickled_records(data["records"])
        return cls(
            process=str(data["process"]),
            records=None if pickled is None else records_of_pickle(pickled),
            data=data_meta(data["data"]),
            usage={str(name): usage_json(u) for name, u in data["usage"].items()},
            calls={str(name): call_detail_json(d) for name, d in data["calls"].items()},
            exit_code=None if data["exit_code"] is None else int(data["exit_code"]),
            memory=system_cell(data["memory"]) if data["memory"] else None,
            pickled=pickled,
        )


# A message's parts read back from JSON, each field typed as its sender made it (one process's own
# JSON: a field of another type is a bug in the sender, and ``int``/``str`` raise on it).


def data_meta(data: Mapping[str, Any]) -> DataMeta:
    """``RunParts.meta`` read back."""
    out = DataMeta()
    data_description(data, out)
    if "path" in data:
        out["path"] = str(data["path"])
    if "exclusions" in data:
        out["exclusions"] = {str(k): int(n) for k, n in data["exclusions"].items()}
    return out


def call_detail_json(data: Mapping[str, Any]) -> CallDetail:
    """``call_detail`` read back."""
    detail: CallDetail = {
        "failures": {str(k): int(n) for k, n in data["failures"].items()},
        "concurrency": int(data["concurrency"]),
        "decoding": {str(k): str(v) for k, v in data["decoding"].items()},
    }
    if "set_aside" in data:
        detail["set_aside"] = {str(k): str(v) for k, v in data["set_aside"].items()}
    return detail


def system_cell(data: Mapping[str, Any]) -> SystemCell:
    """A memory system's cell read back (its figures as ``SystemFigures.to_json`` made them)."""
    figures: SystemFiguresJSON = data["figures"]
    return {
        "cell": str(data["cell"]), "policy": str(data["policy"]), "budget": int(data["budget"]),
        "reader": str(data["reader"]), "ranker": str(data["ranker"]), "figures": figures,
    }
