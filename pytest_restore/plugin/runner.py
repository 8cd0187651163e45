"""Running the grid's cells in this process, and handing their records to the session that gathers them.

A :class:`CellRunner` is what a ``restore_cell`` item talks to
(``plugin/cells.py``'s ``CellSession``): it parametrizes the grid with the
plan's cells and ships a cell's records on the item's report. Without xdist
the one process is the controller and runs the cells too: the controller
composes a ``CellRunner``, whose records reach it in the same process, as
they are. An xdist worker's runner (``plugin/worker.py``) ships them as JSON
instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_restore.plugin.options import MESSAGE_PROPERTY
from pytest_restore.record import Record
from pytest_restore.run.cells import cell_message, grid_records
from pytest_restore.run.grid import CellSpec
from pytest_restore.run.message import ItemMessage
from pytest_restore.run.parts import RunParts
from pytest_restore.run.settings import RestoreSettings

if TYPE_CHECKING:
    from pytest_restore.audit.run import Audit, CellRun


class CellRunner:
    """Runs the grid's cells in this process; its records go to a controller in the same process."""

    #: The process's name in the run's model-call accounting (an xdist worker's is its id).
    process = "main"

    def __init__(self, parts: RunParts) -> None:
        self.parts = parts

    @property
    def settings(self) -> RestoreSettings:
        """The plan's settings."""
        return self.parts.settings

    def ship(self, item: pytest.Item, audit: Audit, run: CellRun) -> None:
        """Attach the item's message (its cell's records, the data's description, this process's model calls)
        to the item's report."""
        spec = getattr(getattr(item, "callspec", None), "params", {}).get("restore_cell")
        assert isinstance(spec, CellSpec), f"{item.nodeid} is not parametrized with a grid cell"
        message = cell_message(self.parts, self.process, spec, run)
        item.user_properties.append((MESSAGE_PROPERTY, self.send(message, audit, run)))

    def stopped(self, item: pytest.Item, code: int) -> None:
        """Attach the exit status of a run this item stopped (74: a file could not be read or written)."""
        item.user_properties.append((MESSAGE_PROPERTY, self.send(ItemMessage(self.process, exit_code=code))))

    def send(self, message: ItemMessage, audit: Audit | None = None, run: CellRun | None = None) -> ItemMessage | str:
        """The message as it travels to the controller: in one process, as it is."""
        return message

    # -- the grid -------------------------------------------------------------------------

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize any test that asks for ``restore_cell`` with the grid."""
        if "restore_cell" in metafunc.fixturenames:
            cells = self.parts.plan.cells
            metafunc.parametrize("restore_cell", cells, ids=[c.id for c in cells], indirect=True)

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """A dry run deselects every item: it only counts what the grid would ask."""
        if self.settings.dry_run and items:
            config.hook.pytest_deselected(items=list(items))
            items[:] = []

    def grid_records(self) -> list[Record]:
        """Every record of the session's grid, each cell reused when this run already has it."""
        return grid_records(self.parts)
