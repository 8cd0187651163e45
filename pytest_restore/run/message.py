"""What a grid item sends the controller: one message, typed, the same in one process or across xdist.

A grid item's runner attaches one :class:`ItemMessage` to the item's report
(``plugin/runner.py``): its cell's records, the data's description and its
process's model calls, or the exit status of a run it stopped. In one process
the message travels as it is; from an xdist worker, as one JSON string
(:meth:`ItemMessage.to_text`: xdist's serializer is pure Python and would take
seconds over a full grid's records as nested values), read back by
:meth:`ItemMessage.of`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_restore.record import Record


@dataclass(frozen=True)
class ItemMessage:
    """One grid item's message to the controller."""

    #: the process that ran the item (``main``, or an xdist worker's id): model calls are summed per process
    process: str
    #: the cell's records (``None``: the item ran no cell, it stopped the run)
    records: tuple[Record, ...] | None = None
    #: the data's description, from the process that loaded it (``RunParts.meta``)
    data: Mapping[str, Any] = field(default_factory=dict)
    #: the process's cumulative use of each real model, by role and name (``RunParts.usage``)
    usage: Mapping[str, Any] = field(default_factory=dict)
    #: the process's real-model calls: failures by cause, concurrency reached, decoding (``RunParts.call_details``)
    calls: Mapping[str, Any] = field(default_factory=dict)
    #: the exit status the item stopped the run with (74: a file could not be read or written)
    exit_code: int | None = None
    #: a memory system's cell: what the system did building the cell's stores (``{"cell", "policy", "budget",
    #: "reader", "ranker", "figures"}``, figures as ``SystemFigures.to_json``); empty for a policy of raw units
    memory: Mapping[str, Any] = field(default_factory=dict)

    def to_text(self, records_json: str | None = None) -> str:
        """The message as one JSON string; ``records_json``: the records' JSON when already made."""
        if records_json is None and self.records is not None:
            records_json = json.dumps([r.to_json() for r in self.records])
        rest = json.dumps(
            {
                "process": self.process, "data": self.data, "usage": self.usage, "calls": self.calls,
                "exit_code": self.exit_code, "memory": self.memory,
            }
        )
        return rest[:-1] + f', "records": {records_json or "null"}}}'

    @classmethod
    def of(cls, value: object) -> ItemMessage:
        """The message as it arrived: itself (one process) or its JSON string (from an xdist worker)."""
        if isinstance(value, ItemMessage):
            return value
        if not isinstance(value, str):
            raise TypeError(f"not a grid item's message: {type(value).__name__}")
        data = json.loads(value)
        records = data["records"]
        return cls(
            process=str(data["process"]),
            records=None if records is None else tuple(Record.from_json(r) for r in records),
            data=dict(data["data"]),
            usage=dict(data["usage"]),
            calls=dict(data["calls"]),
            exit_code=None if data["exit_code"] is None else int(data["exit_code"]),
            memory=dict(data["memory"]),
        )
