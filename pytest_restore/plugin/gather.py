"""What the grid's items send the controller: their records, the data's description, every process's model calls.

A grid item's runner (``plugin/runner.py``; an xdist worker's in
``plugin/worker.py``) attaches them to the item's report as user properties;
the controller hands every report to :meth:`Gathered.take`, which reads them
off it, whether the report came from its own process (records as they are)
or from a worker through xdist (records as one JSON string).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

import pytest

from pytest_restore.plugin.cells import EXIT_PROPERTY, META_PROPERTY, USAGE_PROPERTY
from pytest_restore.plugin.options import RECORDS_PROPERTY
from pytest_restore.record import Record
from pytest_restore.run.calls import ModelCalls

#: The item properties the plugin adds to a grid item's report.
OURS = (RECORDS_PROPERTY, META_PROPERTY, USAGE_PROPERTY, EXIT_PROPERTY)


class Gathered:
    """The session's records and model calls, gathered from every item's report, and which items ran."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        #: The data's description, from the process that loaded it (``RunParts.meta``).
        self.run_meta: dict[str, Any] = {}
        #: Real model calls of every process: usage, failures by cause, concurrency reached.
        self.model_calls = ModelCalls()
        #: The grid items pytest selected (node ids; ``None`` until collection is known).
        self.selected: set[str] | None = None
        #: The items whose cell ran (their records arrived).
        self.ran: set[str] = set()
        #: The exit status an item that stopped the run asked for (74: a file could not be read or written).
        self.exit_code: int | None = None

    def take(self, report: pytest.TestReport) -> None:
        """Read a report's records, data description and model usage, and take them off the report.

        Taken off every phase's report (junitxml reads the teardown's), before
        other plugins see it: ``--junitxml`` would otherwise write every record
        into the XML as a property.
        """
        properties = list(report.user_properties)
        report.user_properties = [(n, v) for n, v in properties if n not in OURS]
        if report.when != "call":
            return
        for name, value in properties:
            if name == RECORDS_PROPERTY:
                self.ran.add(report.nodeid)
                # records cross xdist as JSON: they become Records again here
                received = json.loads(value) if isinstance(value, str) else value
                self.records.extend(Record.of(r) for r in cast("list[Mapping[str, Any]]", received))
            elif name == EXIT_PROPERTY:
                self.exit_code = int(cast("int", value))
            elif name == META_PROPERTY:
                self.run_meta = dict(cast("dict[str, Any]", value))
            elif name == USAGE_PROPERTY:
                usage = cast("dict[str, Any]", value)
                # cumulative per process: the latest report of each process wins
                self.model_calls.usage_by_process[str(usage["process"])] = dict(usage["models"])
                self.model_calls.calls_by_process[str(usage["process"])] = dict(usage.get("calls", {}))
