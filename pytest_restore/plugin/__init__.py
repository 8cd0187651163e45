"""The pytest plugin's entry point (the ``pytest11`` entry ``restore``).

The plugin's code lives in :mod:`pytest_restore.plugin.session`; this module
names the hooks and fixtures pytest looks for.
"""

from pytest_restore.plugin.session import (
    CellSpec,
    RestoreCell,
    RestoreSession,
    RestoreSettings,
    pytest_addhooks,
    pytest_addoption,
    pytest_configure,
    pytest_sessionstart,
    pytest_unconfigure,
    restore_cell,
    restore_snapshot,
)

__all__ = (
    "CellSpec",
    "RestoreCell",
    "RestoreSession",
    "RestoreSettings",
    "pytest_addhooks",
    "pytest_addoption",
    "pytest_configure",
    "pytest_sessionstart",
    "pytest_unconfigure",
    "restore_cell",
    "restore_snapshot",
)
