"""What the grid's items send the controller, read off pytest's reports.

A grid item's runner (``plugin/runner.py``; an xdist worker's in
``plugin/worker.py``) attaches one :class:`~pytest_restore.run.message.ItemMessage`
to the item's report; the controller hands every report to
:meth:`Gathered.take`, which reads it off, whether the report came from its
own process (the message as it is) or from a worker through xdist (one JSON
string), and gives it to the run (:class:`~pytest_restore.run.session.GridMessages`).
"""

from __future__ import annotations

import pytest

from pytest_restore.plugin.options import MESSAGE_PROPERTY
from pytest_restore.run.message import ItemMessage
from pytest_restore.run.session import GridMessages
from pytest_restore.timeline import phase


class Gathered(GridMessages):
    """The run's grid messages, read off every item's report, and which grid items pytest selected."""

    def __init__(self) -> None:
        super().__init__()
        #: The grid items pytest selected (node ids; ``None`` until collection is known).
        self.selected: set[str] | None = None
        #: The grid items that failed before their records were sent (their setup or call raised).
        self.failed: set[str] = set()

    def take(self, report: pytest.TestReport) -> None:
        """Read a report's message, and take it off the report.

        Taken off every phase's report (junitxml reads the teardown's), before
        other plugins see it: ``--junitxml`` would otherwise write every record
        into the XML as a property.
        """
        properties = list(report.user_properties)
        report.user_properties = [(n, v) for n, v in properties if n != MESSAGE_PROPERTY]
        if report.failed and report.when in ("setup", "call"):
            self.failed.add(report.nodeid)
        if report.when != "call":
            return
        for name, value in properties:
            if name == MESSAGE_PROPERTY:
                with phase(f"receive {report.nodeid.rsplit('[', 1)[-1].rstrip(']')}"):
                    self.receive(ItemMessage.of(value), report.nodeid)
