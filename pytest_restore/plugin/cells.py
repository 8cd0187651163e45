"""What a grid item gets from the ``restore_cell`` fixture: its cell run, shipped and checked, in pytest's words.

:class:`RestoreCell` runs the item's cell (``run/cells.py``), hands its records
to the session through the item's report (the runner's ``ship``) and fails
the item, one short line per case, when a check of the cell fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn, Protocol

import pytest

from pytest_restore.exits import IO_ERROR
from pytest_restore.run.cells import CellFailed, cell_failures, run_cell
from pytest_restore.run.grid import CellSpec
from pytest_restore.run.parts import RunParts
from pytest_restore.run.settings import SettingsError
from pytest_restore.timeline import phase

if TYPE_CHECKING:
    from pytest_restore.audit.run import Audit, CellRun

class CellSession(Protocol):
    """What a grid item asks of the process running it (``plugin/runner.py``'s ``CellRunner``)."""

    parts: RunParts

    def ship(self, item: pytest.Item, audit: Audit, run: CellRun) -> None: ...

    def stopped(self, item: pytest.Item, code: int) -> None: ...


class RestoreCell:
    """What a grid item gets from the ``restore_cell`` fixture."""

    def __init__(self, session: CellSession, spec: CellSpec, item: pytest.Item) -> None:
        self.session = session
        self.spec = spec
        self.item = item
        self.run: CellRun | None = None

    def audit(self) -> CellRun:
        """Run the cell and attach its records to the item's report."""
        parts = self.session.parts
        unreadable: str | None = None
        try:
            audit = parts.audit(self.spec.reader)
        except SettingsError as err:
            unreadable = str(err)  # the data, checked at the start, cannot be read any more (removed since)
        if unreadable is not None:
            self.stop(unreadable, IO_ERROR)  # outside the except: one line, no chained traceback
        broken: str | None = None
        try:
            with phase(f"cell {self.spec.id}"):
                self.run = run = run_cell(parts, self.spec, audit)
        except CellFailed as err:
            broken = str(err)  # a user's system broke the adapter's rules: its line, not the package's frames
        if broken is not None:
            pytest.fail(broken, pytrace=False)  # outside the except: no chained traceback
        fatal = parts.fatal_error()
        if fatal is not None:
            # A wrong key or an unknown model fails every call alike: stop at the first.
            self.stop(fatal, parts.fatal_exit_code())
        with phase(f"send {self.spec.id}"):
            self.session.ship(self.item, audit, run)
        return run

    def stop(self, line: str, code: int) -> NoReturn:
        """Fail this item with ``line`` (no traceback) and stop the session, whose exit status becomes ``code``."""
        self.session.stopped(self.item, code)
        self.item.session.shouldstop = line
        pytest.fail(line, pytrace=False)

    def check(self) -> None:
        """Fail the item, one short line per case, when one of the cell's checks fails (``run/cells.py``:
        the construct checks, then the family expectations this cell decides)."""
        run = self.run if self.run is not None else self.audit()
        with phase(f"check {self.spec.id}"):
            failures = cell_failures(self.session.parts, self.spec, run)
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)
