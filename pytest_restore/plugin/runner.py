"""Running the grid's cells in this process, and handing their records to the session that gathers them.

A :class:`CellRunner` is what a ``restore_cell`` item talks to (the
``CellSession`` of ``plugin/cells.py``): it parametrizes the grid, builds each
cell's audit from the process's :class:`~pytest_restore.plugin.parts.AuditParts`
and ships a cell's records on the item's report. Without xdist the one
process is the controller and runs the cells too: the controller composes a
``CellRunner``, whose records reach it in the same process, as they are. An
xdist worker's runner (``plugin/worker.py``) ships them as JSON instead.
"""

from __future__ import annotations

import pytest

from pytest_restore.audit.run import Audit, CellRun
from pytest_restore.memory.eviction import Policy, PolicyRegistry
from pytest_restore.plugin.cells import META_PROPERTY, USAGE_PROPERTY, SharedCells
from pytest_restore.plugin.options import RECORDS_PROPERTY
from pytest_restore.plugin.parts import AuditParts
from pytest_restore.plugin.settings import RestoreSettings
from pytest_restore.record import Record
from pytest_restore.stats.families import Family


class CellRunner:
    """Runs the grid's cells in this process; its records go to a controller in the same process."""

    #: The process's name in the run's model-call accounting (an xdist worker's is its id).
    process = "main"

    def __init__(self, parts: AuditParts) -> None:
        self.parts = parts

    # -- what a grid item reads (``plugin/cells.py``'s ``CellSession``) -------------------------

    @property
    def settings(self) -> RestoreSettings:
        return self.parts.settings

    @property
    def registry(self) -> PolicyRegistry:
        return self.parts.registry

    @property
    def policies(self) -> tuple[Policy, ...]:
        return self.parts.policies

    @property
    def families(self) -> tuple[Family, ...]:
        return self.parts.families

    def audit(self, reader: str | None = None) -> Audit:
        """The audit of this process under a reader (the primary one by default)."""
        return self.parts.audit(reader)

    def fatal_error(self) -> str | None:
        """The first authentication or unknown-model error of this process's models, in one line."""
        return self.parts.fatal_error()

    def fatal_exit_code(self) -> int:
        """The exit status of a run its models stopped (74: the response cache could not be written)."""
        return self.parts.fatal_exit_code()

    def shared_cells(self) -> SharedCells:
        """Where this run's processes leave their cells' records for each other."""
        return self.parts.shared_cells()

    def ship(self, item: pytest.Item, audit: Audit, run: CellRun) -> None:
        """Attach a cell's records, the data's description and this process's model usage to the item's report."""
        item.user_properties.append((RECORDS_PROPERTY, self.payload(audit, run)))
        item.user_properties.append((META_PROPERTY, self.parts.meta()))
        usage = {"process": self.process, "models": self.parts.usage(), "calls": self.parts.call_details()}
        item.user_properties.append((USAGE_PROPERTY, usage))

    def payload(self, audit: Audit, run: CellRun) -> str | list[Record]:
        """The records as they travel to the controller: in one process, as they are."""
        return run.records

    # -- the grid -------------------------------------------------------------------------

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize any test that asks for ``restore_cell`` with the grid."""
        if "restore_cell" in metafunc.fixturenames:
            cells = self.parts.cells
            metafunc.parametrize("restore_cell", cells, ids=[c.id for c in cells], indirect=True)

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """A dry run deselects every item: it only counts what the grid would ask."""
        if self.settings.dry_run and items:
            config.hook.pytest_deselected(items=list(items))
            items[:] = []

    def grid_records(self) -> list[Record]:
        """Every record of the session's grid, each cell reused when this run already has it."""
        records: list[Record] = []
        shared = self.shared_cells()
        for spec in self.parts.cells:
            audit = self.audit(spec.reader)
            records += shared.records(audit, self.registry[spec.policy], spec.budget, spec.ranker)
        return records
