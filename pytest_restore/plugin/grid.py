"""The audit grid the package ships: one test, which the plugin parametrizes into one item per cell.

A project that installed the package runs it without a file of its own:
``pytest -n auto --restore`` (or any ``--restore-*`` option in a directory
where pytest collects nothing) adds this module's grid to the session, as
``restore-grid::test_cell[fifo-80k]`` and so on (:func:`shipped_grid`).
A project may also keep its own grid module, which is this test; the
plugin then adds nothing. ``benches/test_grid.py`` in the repository is one.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_restore.plugin.cells import RestoreCell

#: The name the shipped grid's items carry in their ids (``restore-grid::test_cell[fifo-80k]``).
GRID_NODE = "restore-grid"


def test_cell(restore_cell: RestoreCell) -> None:
    """Run the cell and assert its construct checks."""
    restore_cell.audit()
    restore_cell.check()


class ShippedGrid(pytest.Module):
    """This module as a collector of the session, named ``restore-grid`` under the root directory.

    The module is imported by its name, from the package, not from a file of
    the project: its path under the root directory only names its items (so
    ``-k``, ``--lf`` and the item ids read as for a grid file of one's own).
    """

    def _getobj(self) -> ModuleType:
        import sys

        return sys.modules[__name__]


def shipped_grid(session: pytest.Session) -> list[pytest.Item]:
    """The shipped grid's items, collected (and parametrized by the plugin) as any test module's are."""
    module = ShippedGrid.from_parent(session, path=session.config.rootpath / GRID_NODE)
    return list(session.genitems(module))
