"""The controller's session: pytest's hooks around the run core's :class:`~pytest_restore.run.session.RunSession`.

:class:`ControllerSession` (as xdist's ``DSession``) adapts pytest's session
to the run's phases and does nothing of the run itself: at the session's
start the phases before the grid (``RunSession.before_grid``), the data
prepared once for the xdist workers; each item's report handed to the run
(``RunSession.receive``, through :class:`~pytest_restore.plugin.gather.Gathered`);
at its end the run finished (``RunSession.start_finish``, the report on a
thread while xdist stops its workers, then ``await_finish``), its exit status
applied to pytest's and its outcome said by the terminal summary.

It runs no cell itself: the cells run in a :class:`~pytest_restore.plugin.runner.CellRunner`.
Without xdist that runner is the one the controller composes, in the same
process; under xdist each worker has its own (``plugin/worker.py``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest

from pytest_restore.plugin.finish import ReportWaiter, cells_not_run, interrupted, terminal_summary
from pytest_restore.plugin.gather import Gathered
from pytest_restore.plugin.options import ONE_PROCESS_KEY
from pytest_restore.plugin.runner import CellRunner
from pytest_restore.run.options import small_data
from pytest_restore.run.phases import prepare_data
from pytest_restore.run.plan import Plan, check_before_work
from pytest_restore.run.quality import RunStopped
from pytest_restore.run.report import HeldCtrlC, partial_report_line, preload_figure
from pytest_restore.run.session import RunSession
from pytest_restore.run.staging import remove_orphans
from pytest_restore.timeline import mark, phase


def say_on_terminal(config: pytest.Config, message: str) -> None:
    """One plain ``restore: ...`` progress line on the terminal (and in CI logs), at once."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    # inside an item's call the output is captured: said past the capture, as live logging is
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        if reporter is not None:
            reporter.ensure_newline()  # after a file's path (pytest's default verbosity)
            writer = config.get_terminal_writer()
            if writer.width_of_current_line:  # after -q's progress letters, which leave no path to end
                writer.line()
            reporter.write_line(f"restore: {message}", flush=True)
        else:  # at configure time: no terminal reporter yet
            sys.stdout.write(f"restore: {message}\n")
            sys.stdout.flush()


class ControllerSession:
    """The plugin's session in the process that owns the run (the only process, without xdist)."""

    def __init__(self, config: pytest.Config, plan: Plan) -> None:
        self.config = config
        self.say = functools.partial(say_on_terminal, config)
        self.settings = plan.settings
        #: The records, data description and model calls every item sent, and which items ran.
        self.gathered = Gathered()
        #: The run itself: its phases, in order.
        self.run = RunSession(plan, self.say, config.get_terminal_writer, self.gathered)
        self.parts = self.run.parts
        #: The cells of this process (all of them without xdist; none under it: the workers run them).
        self.runner = CellRunner(self.parts)
        self._preload: threading.Thread | None = None  # the early import of the figure module
        self._prepared = False  # the data was prepared for the xdist workers (``prepare``)
        self._ctrl_c = HeldCtrlC()  # Ctrl-C from the report's start to its wait: counted, not raised in another hook

    def begin(self) -> None:
        """Register the session's hooks, then check what can be known before any model call."""
        plugins = self.config.pluginmanager
        plugins.register(self, "restore-session")
        plugins.register(self.runner, "restore-runner")
        plugins.register(ReportWaiter(self.finish_report), "restore-report-waiter")
        self.config.add_cleanup(self.join_preload)
        check_before_work(self.parts.plan)

    def distributed(self) -> bool:
        """Whether xdist's workers run the grid (the controller then runs no cell)."""
        return bool(self.config.pluginmanager.has_plugin("dsession"))

    def close(self) -> None:
        """Release every model of this process."""
        self.run.close()

    def join_preload(self) -> None:
        """Wait for the figure module's early import: never leave an import running into shutdown."""
        if self._preload is not None:
            self._preload.join()
            self._preload = None

    def _start_preload(self) -> None:
        """Import the figure's plotting library while the workers run the grid, not when the report is due."""
        self._preload = threading.Thread(target=preload_figure, name="pytest-restore-preload", daemon=True)
        self._preload.start()

    # -- before the grid ------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Before any worker starts: the dry run's count (no item runs), or the checks before the grid."""
        try:
            mark("session start")
            self.run.before_grid()
        except RunStopped as stop:
            self.stop_before_grid(session, stop)
        if self.distributed() and not self.settings.dry_run:
            self._start_preload()  # the controller idles while the workers run the grid

    def stop_before_grid(self, session: pytest.Session, stop: RunStopped) -> NoReturn:
        """End the run before its grid: its one line (unless said), then its exit status, with no traceback.

        ``pytest.exit`` would print the line twice (``Exit: ...`` and ``! _pytest.outcomes.Exit ... !``);
        pytest ends a session whose start raised ``Session.Failed`` silently, with exit 1, and
        a status of our own (74) is put in place as the session's configuration ends.
        """
        if not stop.said:
            self.config.get_terminal_writer().line(f"restore: run stopped before the grid: {stop}", red=True, bold=True)
        if stop.code != pytest.ExitCode.TESTS_FAILED:
            self.config.add_cleanup(lambda: setattr(session, "exitstatus", stop.code))
        raise session.Failed(str(stop))

    def after_sessionstart(self, session: pytest.Session) -> None:
        """After every plugin's session start (xdist's starts the workers): prepare the data, then let it go."""
        if session.config.stash.get(ONE_PROCESS_KEY, False):
            self.say("-n auto: this small audit runs in one process (xdist's workers would take longer to start)")
        if self.distributed() and not self.settings.dry_run:
            self.prepare()  # while the workers start; it counts the tokens from the parsed data, then lets it go
        self.release_dataset()

    def release_dataset(self) -> None:
        """Under xdist, once the workers are starting: drop the parsed dataset (the workers do the audit;
        what needs it later loads the prepared cache again). A controller that built an audit keeps it."""
        if self.distributed():
            self.parts.release_dataset()

    def prepare(self) -> None:
        """Under xdist, before the workers run items: generate and validate the data once (as the workers
        start, or at the first worker's collection), and say what they do next (their output is not shown)."""
        if self._prepared:
            return
        self._prepared = True
        workers = max(1, min(int(getattr(self.config.option, "numprocesses", 1) or 1), os.cpu_count() or 1))
        prepare_data(self.parts, workers)
        if self._preload is None:  # started here when the session began at the workers' collection
            self._start_preload()
        self.release_dataset()

    # -- which grid items were selected, and what they sent -------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The grid items selected in this process (after -k, --lf, deselection)."""
        self.gathered.selected = {
            item.nodeid
            for item in session.items
            if "restore_cell" in getattr(getattr(item, "callspec", None), "params", {})
        }

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        """Under xdist the workers collect: the grid items are those whose id names a cell; at the first
        worker's collection the data is prepared here, once."""
        first = self.gathered.selected is None
        cells = {c.id for c in self.parts.plan.cells}
        self.gathered.selected = {i for i in ids if i.endswith("]") and i.rsplit("[", 1)[-1][:-1] in cells}
        if first and self.gathered.selected and not self.settings.dry_run:
            self.prepare()

    def small_grid(self) -> bool:
        """Whether the grid is small enough that one xdist worker finishes it before two would."""
        return small_data(self.settings.data, self.settings.embedded_questions)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Hand every item's message to the run (xdist forwards worker reports here), taken off the report;
        a replica its process set aside is said now, once a run."""
        self.gathered.take(report)
        self.run.say_set_aside()

    # -- the session's end: the report starts on a thread at the first sessionfinish and
    # is waited for at the last (``finish_report``), while xdist shuts its workers down

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Judge the model calls, run the checks after the grid, start writing the report."""
        got = self.gathered
        with phase("start finish"):
            self.run.start_finish(self.run.partial(interrupted(session, got.selected, got.ran, got.failed)))
        if self.run.outcome.calls_failed:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.run.reporting():
            self._ctrl_c.hold()
            self.config.add_cleanup(self._ctrl_c.release)

    def finish_report(self, session: pytest.Session) -> None:
        """Wait for the report and apply the run's exit status to pytest's."""
        if self.settings.dry_run and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            # Nothing was meant to run. Last, because syrupy's sessionfinish ORs the
            # status the hook was called with back in.
            session.exitstatus = pytest.ExitCode.OK
        try:
            with phase("await report"):
                outcome = self.run.await_finish(self._ctrl_c, self._quit_unwritten)
        finally:
            self._ctrl_c.release()  # Ctrl-C raises again: the report is written or given up
        session.exitstatus = self.run.exit_status(int(session.exitstatus))
        if session.exitstatus == pytest.ExitCode.INTERNAL_ERROR and outcome.partial_path is not None:
            # pytest prints no terminal summary after an internal error: say here where the report went
            self.say(partial_report_line(outcome.partial_path, self.settings.report_dir, outcome.partial_why))

    def _quit_unwritten(self, target: Path) -> None:
        """A second Ctrl-C while the report is written: say so, and leave no staging directory behind."""
        remove_orphans(target, own=True)
        self.config.get_terminal_writer().line(
            f"\nrestore: quit at a second Ctrl-C: report not written; {self.settings.report_dir} was left as it was",
            yellow=True,
        )

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int) -> None:
        """A short table of regime (b), where the report is, and what failed (the dry run: its table)."""
        got, outcome = self.gathered, self.run.outcome
        # a cell without records ran and failed, was cut off by Ctrl-C, or was not selected: said apart
        stopped = exitstatus == pytest.ExitCode.INTERRUPTED
        why = cells_not_run(outcome.cells["not_run"], got.selected, got.failed, stopped=stopped)
        terminal_summary(terminalreporter, self.settings, outcome, why)
