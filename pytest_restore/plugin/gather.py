"""What the grid's items send the controller: their records, the data's description, every process's model calls.

A grid item's runner (``plugin/runner.py``; an xdist worker's in
``plugin/worker.py``) attaches one :class:`~pytest_restore.run.message.ItemMessage`
to the item's report; the controller hands every report to
:meth:`Gathered.take`, which reads it off, whether the report came from its
own process (the message as it is) or from a worker through xdist (one JSON string).
"""

from __future__ import annotations

import pytest

from pytest_restore.plugin.options import MESSAGE_PROPERTY
from pytest_restore.record import Record
from pytest_restore.run.calls import ModelCalls
from pytest_restore.run.checks import SystemCell
from pytest_restore.run.message import ItemMessage
from pytest_restore.run.parts import DataMeta


class Gathered:
    """The session's records and model calls, gathered from every item's report, and which items ran."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        #: The data's description, from the process that loaded it (``RunParts.meta``).
        self.run_meta: DataMeta = DataMeta()
        #: Real model calls of every process: usage, failures by cause, concurrency reached.
        self.model_calls = ModelCalls()
        #: The grid items pytest selected (node ids; ``None`` until collection is known).
        self.selected: set[str] | None = None
        #: The items whose cell ran (their records arrived).
        self.ran: set[str] = set()
        #: The exit status an item that stopped the run asked for (74: a file could not be read or written).
        self.exit_code: int | None = None
        #: What each memory system's cell's stores cost and dropped, by cell id (``ItemMessage.memory``).
        self.memory: dict[str, SystemCell] = {}

    def take(self, report: pytest.TestReport) -> None:
        """Read a report's records, data description and model usage, and take them off the report.

        Taken off every phase's report (junitxml reads the teardown's), before
        other plugins see it: ``--junitxml`` would otherwise write every record
        into the XML as a property.
        """
        properties = list(report.user_properties)
        report.user_properties = [(n, v) for n, v in properties if n != MESSAGE_PROPERTY]
        if report.when != "call":
            return
        for name, value in properties:
            if name == MESSAGE_PROPERTY:
                self.receive(ItemMessage.of(value), report.nodeid)

    def receive(self, message: ItemMessage, nodeid: str) -> None:
        """One item's message: its records and data description, its process's model calls, or its exit status."""
        if message.exit_code is not None:
            self.exit_code = message.exit_code
        if message.records is None:
            return
        self.ran.add(nodeid)
        self.records.extend(message.records)
        self.run_meta = message.data
        # cumulative per process: the latest message of each process wins
        self.model_calls.usage_by_process[message.process] = dict(message.usage)
        self.model_calls.calls_by_process[message.process] = dict(message.calls)
        if message.memory is not None:
            self.memory[message.memory["cell"]] = message.memory
