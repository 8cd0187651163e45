"""The audit session's start: the options parsed, and the role this process plays registered.

A session has two roles, each its own object, as in pytest-xdist (``DSession``
on the controller, the worker's side apart):

- the **controller** (``plugin/controller.py``): checks the options, prepares
  the data, runs the calibration gate, counts the model calls of every
  process, gathers the records, runs the judge audit and writes the report;
- the **cells' runner** (``plugin/runner.py``): parametrizes the grid, runs
  the cells and ships their records; an xdist worker's session
  (``plugin/worker.py``) is one, and without xdist the controller composes one.

Both build their data, models and audits from one :class:`AuditParts`
(``plugin/parts.py``). Which role a process plays is decided here, once.
"""

from __future__ import annotations

import pytest

from pytest_restore.models.providers import default_providers
from pytest_restore.plugin.controller import ControllerSession
from pytest_restore.plugin.options import SESSION_KEY
from pytest_restore.plugin.settings import RestoreSettings
from pytest_restore.plugin.worker import WorkerSession

#: The session object of a process: the controller's, or an xdist worker's.
Role = ControllerSession | WorkerSession


def activate(config: pytest.Config) -> Role:
    """Parse the options and register the session of this process's role (once the run is an audit)."""
    providers = default_providers()
    config.hook.pytest_restore_register_providers(registry=providers, config=config)
    settings = RestoreSettings.from_config(config, providers)
    # the one place the process's role is decided: xdist gives its workers ``workerinput``
    role: Role = (WorkerSession if hasattr(config, "workerinput") else ControllerSession)(config, settings, providers)
    config.stash[SESSION_KEY] = role
    role.begin()
    return role
