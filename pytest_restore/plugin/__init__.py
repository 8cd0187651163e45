"""The pytest plugin's entry point (the ``pytest11`` entry ``restore``).

pytest loads this module in every session of an environment where the plugin
is installed, so it stays light: options, hooks and fixtures only. The audit
(:mod:`pytest_restore.plugin.session`, which registers the role this process
plays: the controller's session or an xdist worker's; they load numpy, the
models and the report) starts only when the run is one:

- at configure time when a ``--restore-*`` option or ``restore_*`` ini key is
  given (every value is then checked before any work, as a usage error);
- otherwise at collection, when a test asks for ``restore_cell`` (or, at run
  time, for ``restore_snapshot``);
- on an xdist controller, which does not collect, when a worker reports grid
  items among its collection, or at the latest when a report carrying
  records arrives.

A session that does none of these imports, computes and writes nothing.

The grid itself ships in the package (:mod:`pytest_restore.plugin.grid`): an
audit whose collection holds no test asking for ``restore_cell`` gets it when
``--restore`` asks for it, or when the session collected nothing at all
(``pytest -n auto --restore-questions 20`` in an empty directory).
"""

from __future__ import annotations

import functools
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_restore.plugin.options import (
    AUTO_KEY,
    MESSAGE_PROPERTY,
    ONE_PROCESS_KEY,
    RUN_KEY,
    SESSION_KEY,
    add_options,
    new_run_id,
    requested,
    small_audit,
)

if TYPE_CHECKING:
    from pytest_restore.plugin.cells import RestoreCell as RestoreCell
    from pytest_restore.plugin.controller import ControllerSession as ControllerSession
    from pytest_restore.plugin.session import Role


def __getattr__(name: str) -> Any:
    """The audit's public classes, imported when first named (``RestoreCell``, ``ControllerSession``)."""
    if name == "RestoreCell":
        from pytest_restore.plugin import cells

        return cells.RestoreCell
    if name == "ControllerSession":
        from pytest_restore.plugin import controller

        return controller.ControllerSession
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Register the hooks users implement to add policies, rankers and model providers."""
    from pytest_restore.plugin import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    """The ``--restore-*`` options, each also an ini key ``restore_*``."""
    add_options(parser)


@pytest.hookimpl(tryfirst=True)  # before -k, --lf and the dry run select among the items
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Add the grid the package ships when ``--restore`` asks for it, or when an audit collected nothing."""
    if not (config.getoption("restore") or (not items and requested(config))):
        return
    if any("restore_cell" in getattr(item, "fixturenames", ()) for item in items):
        return  # the project's own grid module
    from pytest_restore.plugin.grid import shipped_grid

    items[:0] = shipped_grid(session)


def _activate(config: pytest.Config) -> Role:
    """The session object of this process's role, created (and its options checked) on first need."""
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        from pytest_restore.plugin.session import activate

        session = activate(config)
    return session


def pytest_configure(config: pytest.Config) -> None:
    """Start the audit now if the command line or ini file asks for it; otherwise wait for a grid item."""
    # a new run id in every process; an xdist worker uses the controller's (``pytest_configure_node``)
    config.stash[RUN_KEY] = new_run_id()
    # ONE_PROCESS_KEY: -n auto found a small audit before configure (pytest_xdist_auto_num_workers)
    if requested(config) or config.stash.get(ONE_PROCESS_KEY, False):
        _activate(config)
    else:
        config.pluginmanager.register(_Waiting(config), "restore-waiting")


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own answer (the CPU count)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: no worker for an audit of small data (one process is faster), else xdist's choice.

    Known here, before any collection, when a ``--restore-*`` option or
    ``restore_*`` key asks for the audit or a test file of the given paths asks
    for ``restore_cell`` (``paths_hold_a_grid``). Otherwise xdist picks the
    number and a small grid found at collection runs on one of the workers
    (``make_scheduler``).
    """
    config.stash[AUTO_KEY] = True
    if small_audit(config):
        config.stash[ONE_PROCESS_KEY] = True
        return 0
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist load``, the grid's shared work stays in one worker (see ``plugin/scheduling.py``)."""
    if config.getvalue("dist") == "load":
        from pytest_restore.plugin.scheduling import GridScheduling

        return GridScheduling(config, log)
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Give each xdist worker this run's id (the name of the directory cells are shared in)."""
    node.workerinput["restore_run"] = node.config.stash[RUN_KEY]


def _is_grid_id(nodeid: str) -> bool:
    """Whether an item id looks like a grid cell's (``...[fifo-80k]``): a test parametrized over
    ``restore_cell`` ends with a policy and a budget label. A false match only starts the session."""
    if not nodeid.endswith("]"):
        return False
    labels = nodeid.rsplit("[", 1)[-1][:-1].split("-")[1:]
    return any(label.isdigit() or (label.endswith("k") and label[:-1].isdigit()) for label in labels)


class _Waiting:
    """The plugin before the run turns out to be an audit: watches for the first sign that it is."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def _start(self, hook: str, **kwargs: Any) -> None:
        """Start the session, and hand the hook call it missed (it registers during the call) to its objects."""
        role = _activate(self.config)
        for plugin in (role, role.runner):
            missed = getattr(plugin, hook, None)
            if missed is not None:
                missed(**kwargs)

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """A test asking for ``restore_cell`` makes the run an audit: parametrize it with the grid."""
        if "restore_cell" in metafunc.fixturenames and SESSION_KEY not in self.config.stash:
            self._start("pytest_generate_tests", metafunc=metafunc)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        """On an xdist controller (which does not collect): a worker's grid items make the run an audit."""
        if SESSION_KEY not in self.config.stash and any(_is_grid_id(i) for i in ids):
            self._start("pytest_xdist_node_collection_finished", node=node, ids=ids)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """At the latest, the first report carrying a grid item's message starts the session that gathers them."""
        if SESSION_KEY not in self.config.stash and any(n == MESSAGE_PROPERTY for n, _ in report.user_properties):
            self._start("pytest_runtest_logreport", report=report)


@pytest.hookimpl(hookwrapper=True)
def pytest_sessionstart(session: pytest.Session) -> Generator[None, None, None]:
    """After every plugin's session start (xdist's starts the workers): the controller prepares the data, then lets it go."""
    yield
    restore = session.config.stash.get(SESSION_KEY, None)
    if restore is not None:
        restore.after_sessionstart(session)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close real models' connections and progress displays."""
    from pytest_restore.timeline import mark

    mark("unconfigure")
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.close()


@pytest.fixture
def restore_cell(request: pytest.FixtureRequest) -> Generator[RestoreCell, None, None]:
    """The grid cell of this item (the plugin parametrizes it over policy x budget)."""
    from pytest_restore.plugin.cells import RestoreCell
    from pytest_restore.run.staging import report_dir_problem

    runner = _activate(request.config).runner
    problem = report_dir_problem(runner.settings.report_dir, runner.settings.source("report-dir"))
    if problem:
        pytest.fail(problem, pytrace=False)  # no cell runs (or spends) for a report that cannot be written
    yield RestoreCell(runner, request.param, request.node)


#: syrupy's ``pytest11`` entry point name, under which its plugin registers (and ``-p no:syrupy`` blocks it).
SYRUPY_PLUGIN = "syrupy"


def snapshot_problem(config: pytest.Config) -> str | None:
    """Why ``restore_snapshot`` cannot run in this session (syrupy missing or its plugin off), or ``None``."""
    import importlib.util

    if importlib.util.find_spec("syrupy") is None:
        return "restore_snapshot needs syrupy: pip install 'pytest-restore[snapshot]'"
    if not config.pluginmanager.hasplugin(SYRUPY_PLUGIN):
        return ("restore_snapshot needs syrupy's pytest plugin, which this session does not load "
                "(-p no:syrupy, or plugin autoload off): drop -p no:syrupy or add -p syrupy")
    return None


@pytest.fixture
def restore_snapshot(request: pytest.FixtureRequest) -> Any:
    """Pin the grid's cells table and the families' decisions with syrupy: ``restore_snapshot.check()``.

    syrupy is the extra ``pytest-restore[snapshot]``: its ``snapshot`` fixture is fetched here, not
    declared, so a session without syrupy gets one line saying what to install, not a missing fixture.
    """
    problem = snapshot_problem(request.config)
    if problem:
        pytest.fail(problem, pytrace=False)  # before the grid runs: nothing is spent on a check that cannot compare
    from pytest_restore.plugin.snapshot import RestoreSnapshot
    from pytest_restore.run.snapshot import snapshot_tables

    snapshot = request.getfixturevalue("snapshot")
    parts = _activate(request.config).runner.parts
    # Colour only on a terminal (syrupy colours its diff characters one by one).
    color = request.config.get_terminal_writer().hasmarkup and not request.config.option.no_colors
    return RestoreSnapshot(
        snapshot, functools.partial(snapshot_tables, parts), color=color, update=update_command(request.config)
    )


def update_command(config: pytest.Config) -> str:
    """The user's own pytest command with ``--snapshot-update``: what accepts a changed snapshot.

    Their options decide the grid (``--restore-questions 100``), so a bare
    ``pytest --snapshot-update`` would write snapshots of another grid. On an
    xdist worker the controller's command line is the one the user typed.
    """
    import shlex

    mainargv = getattr(config, "workerinput", {}).get("mainargv")
    args = list(mainargv[1:]) if mainargv else list(config.invocation_params.args)
    if "--snapshot-update" not in args:
        args.append("--snapshot-update")
    return shlex.join(["pytest", *args])
