"""The audit grid: one item per policy x budget, parametrized by the pytest-restore plugin."""

from __future__ import annotations

from pytest_restore.plugin import RestoreCell


def test_cell(restore_cell: RestoreCell) -> None:
    """Run the cell and assert its construct checks."""
    restore_cell.audit()
    restore_cell.check()
