"""The xdist worker's side of a session: run the cells the controller sends, ship their records back.

A worker parametrizes the grid at its collection, runs the items xdist hands
it and attaches each cell's records to the item's report, which xdist sends
to the controller (``plugin/controller.py``, which gathers them). The worker
says nothing on the terminal (xdist does not show a worker's output; the
controller says what the workers do) and writes no report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_restore.plugin.runner import CellRunner
from pytest_restore.run.message import ItemMessage
from pytest_restore.run.parts import RunParts
from pytest_restore.run.plan import Plan
from pytest_restore.run.shared import records_text

if TYPE_CHECKING:
    from pytest_restore.audit.run import Audit, CellRun


def quiet(message: str) -> None:
    """A worker's progress lines: not shown by xdist, so not written."""


class WorkerRunner(CellRunner):
    """A worker's cells: their records travel to the controller as JSON and are left for the other workers."""

    def __init__(self, parts: RunParts, process: str) -> None:
        super().__init__(parts)
        self.process = process

    def send(self, message: ItemMessage, audit: Audit | None = None, run: CellRun | None = None) -> str:
        """One JSON string; a cell's records are left in the shared cells too (another worker's check may read them).

        Not nested values: xdist's serializer is pure Python and would take
        seconds over a full grid's records (each phase's report carries them).
        The records are made into text once, for both.
        """
        if audit is None or run is None:
            return message.to_text()
        records = records_text(run.records)
        self.parts.shared_cells().share(audit, run, records)
        return message.to_text(records)


class WorkerSession:
    """The plugin's session in an xdist worker: the process's run parts and the runner of its cells."""

    def __init__(self, config: pytest.Config, plan: Plan) -> None:
        self.config = config
        self.parts = RunParts(plan, quiet)
        worker_input = config.workerinput  # type: ignore[attr-defined]  # set by xdist on its workers
        self.runner = WorkerRunner(self.parts, str(worker_input["workerid"]))

    def begin(self) -> None:
        """Register the runner's hooks (the controller checked the options and the data)."""
        self.config.pluginmanager.register(self.runner, "restore-runner")

    def after_sessionstart(self, session: pytest.Session) -> None:
        """Nothing to do: the controller prepared the data the worker loads."""

    def close(self) -> None:
        """Release every model of this process."""
        self.parts.close()
