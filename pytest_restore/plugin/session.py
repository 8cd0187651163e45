"""The audit session's start: the run's plan built from pytest's options and hooks, and the role this process plays.

A session has two roles, each its own object, as in pytest-xdist (``DSession``
on the controller, the worker's side apart):

- the **controller** (``plugin/controller.py``): checks what can be known
  before any work, prepares the data, runs the phases before the grid,
  counts the model calls of every process, gathers the records, runs the
  judge audit and writes the report;
- the **cells' runner** (``plugin/runner.py``): parametrizes the grid, runs
  the cells and ships their records; an xdist worker's session
  (``plugin/worker.py``) is one, and without xdist the controller composes one.

Both make their data, models and audits over one plan (``run/plan.py``),
built here once per process from the options (``plugin/options.py``) and the
registries the ``pytest_restore_register_*`` hooks fill. Which role a process
plays is decided here, once.
"""

from __future__ import annotations

import functools
import uuid
from pathlib import Path

import pytest

from pytest_restore.plugin.controller import ControllerSession, say_on_terminal
from pytest_restore.plugin.options import RUN_KEY, SESSION_KEY, raw_options
from pytest_restore.plugin.worker import WorkerSession, quiet
from pytest_restore.run.plan import Registries, build_plan, default_registries, freeze_long_lived
from pytest_restore.run.settings import SettingsError

#: The session object of a process: the controller's, or an xdist worker's.
Role = ControllerSession | WorkerSession


def registries(config: pytest.Config) -> Registries:
    """The built-in registries, and what the ``pytest_restore_register_*`` hooks add to them."""
    found = default_registries()
    hook = config.hook
    hook.pytest_restore_register_providers(registry=found.providers, config=config)
    hook.pytest_restore_register_policies(registry=found.policies, config=config)
    hook.pytest_restore_register_families(registry=found.families, config=config)
    hook.pytest_restore_register_rankers(registry=found.rankers, config=config)
    hook.pytest_restore_register_datasets(registry=found.datasets, config=config)
    hook.pytest_restore_register_errata(registry=found.errata, config=config)
    return found


def cache_root(config: pytest.Config) -> Path:
    """The project's cache directory for pytest-restore (pytest's cache, also under ``-p no:cacheprovider``)."""
    cache = getattr(config, "cache", None)  # absent under -p no:cacheprovider
    if cache is not None:
        return Path(cache.mkdir("restore"))
    return Path(config.rootpath) / ".pytest_cache" / "d" / "restore"


def activate(config: pytest.Config) -> Role:
    """Build the run's plan and register the session of this process's role (once the run is an audit).

    A problem with the options or the data they name is a usage error, before any work.
    """
    freeze_long_lived("imports")  # the audit's modules are all imported by now
    # the one place the process's role is decided: xdist gives its workers ``workerinput``
    worker = hasattr(config, "workerinput")
    if worker:
        # the controller's run id (``pytest_configure_node``): the directory the cells are shared in
        session_id = str(config.workerinput.get("restore_run") or uuid.uuid4().hex)  # type: ignore[attr-defined]
        say = quiet
    else:
        session_id = str(config.stash.get(RUN_KEY, "") or uuid.uuid4().hex)
        say = functools.partial(say_on_terminal, config)
    try:
        plan = build_plan(raw_options(config), registries(config), session_id, cache_root(config), say)
        role: Role = WorkerSession(config, plan) if worker else ControllerSession(config, plan)
        config.stash[SESSION_KEY] = role
        role.begin()
    except SettingsError as err:
        raise pytest.UsageError(str(err)) from None
    return role
