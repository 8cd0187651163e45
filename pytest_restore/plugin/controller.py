"""The controller's session: the process that owns the run, like xdist's ``DSession``.

:class:`ControllerSession` checks the options before any work, prepares the
data once (for the xdist workers too), runs the calibration gate, counts the
model calls of every process, gathers the records every grid item attaches to
its report (xdist forwards the workers' reports here), runs the judge audit
and starts the report (``plugin/finish.py``) at the session's end.

It runs no cell itself: the cells run in a :class:`~pytest_restore.plugin.runner.CellRunner`.
Without xdist that runner is the one the controller composes, in the same
process; under xdist each worker has its own (``plugin/worker.py``) and the
controller's never sees an item.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import shutil
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest

from pytest_restore.exits import IO_ERROR, os_cause
from pytest_restore.plugin.finish import Outcome, ReportWaiter, partial_reason, terminal_summary
from pytest_restore.plugin.gather import Gathered
from pytest_restore.plugin.options import ONE_PROCESS_KEY
from pytest_restore.plugin.runner import CellRunner
from pytest_restore.run.checks import Calibration, Check, CheckRun, run_checks
from pytest_restore.run.options import small_data
from pytest_restore.run.parts import RunParts
from pytest_restore.run.phases import dry_run_phase, prepare_data
from pytest_restore.run.plan import Plan, check_before_work
from pytest_restore.run.quality import RunStopped
from pytest_restore.run.report import (
    Background,
    HeldCtrlC,
    await_report,
    grid_cells,
    partial_report_line,
    preload_figure,
    run_info,
    write_in_place,
)
from pytest_restore.run.staging import partial_dir, remove_orphans


def say_on_terminal(config: pytest.Config, message: str) -> None:
    """One plain ``restore: ...`` progress line on the terminal (and in CI logs), at once."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    # inside an item's call the output is captured: said past the capture, as live logging is
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        if reporter is not None:
            reporter.ensure_newline()
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
        self.parts = RunParts(plan, self.say)
        #: The cells of this process (all of them without xdist; none under it: the workers run them).
        self.runner = CellRunner(self.parts)
        #: The records, data description and model calls every item sent, and which items ran.
        self.gathered = Gathered()
        #: The results of the run's checks outside the grid (``run/checks.py``), by name, for the report.
        self.checks: dict[str, Check] = {}
        #: How the session ends, for the terminal summary.
        self.outcome = Outcome()
        self.started_utc = datetime.datetime.now(datetime.timezone.utc)
        self._preload: threading.Thread | None = None  # the early import of the figure module
        self._prepared = False  # the data was prepared for the xdist workers (``prepare``)
        self._report: Background | None = None  # the report being written
        self._report_target = Path(plan.settings.report_dir)  # where it goes (beside it, when partial)
        self._cancel_report = threading.Event()  # set by Ctrl-C while it is written: nothing is swapped in
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
        self.parts.close()

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
        """Before any worker starts: the dry run's count, or the calibration gate (and the batch rounds)."""
        if self.settings.dry_run:
            # Counted now, before xdist starts its workers; printed as the run's summary.
            # No item runs (the runner deselects them) and the run exits 0.
            self.outcome.dry_run_lines = dry_run_phase(self.parts).lines
            return
        try:
            self.checks.update(run_checks("before_grid", self.check_run()))
        except RunStopped as stop:
            self.stop_before_grid(session, stop)
        if self.distributed():
            self._start_preload()  # the controller idles while the workers run the grid

    def check_run(self, partial: str | None = None) -> CheckRun:
        """What the run's checks run over (after the grid: the gathered records, and whether it ran whole)."""
        return CheckRun(
            self.parts, self.gathered.model_calls, self.config.get_terminal_writer(), self.gathered.records, partial,
            self.gathered.memory,
        )

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
        """Under xdist, once the workers are starting: drop the parsed dataset.

        The controller parses the file only to stop a malformed one before any
        worker starts (and to leave the prepared cache the workers load); the
        workers do the audit, so the controller need not hold the parsed file
        through the run. What needs it later (the judge audit) loads it again
        from the prepared cache. A controller that built an audit (the
        calibration gate) keeps it.
        """
        if self.distributed():
            self.parts.release_dataset()

    def prepare(self) -> None:
        """Under xdist, before the workers run items: generate and validate the data once.

        Called as the workers start (a run given options) or at the first
        worker's collection (a run found to be an audit there), whichever
        comes first.

        The workers then load the prepared cache instead of each generating
        (or waiting for) the file; the controller says what they will do next,
        since their own output is not shown.
        """
        if self._prepared:
            return
        self._prepared = True
        workers = max(1, min(int(getattr(self.config.option, "numprocesses", 1) or 1), os.cpu_count() or 1))
        prepare_data(self.parts, workers)
        if self._preload is None:  # started here when the session began at the workers' collection
            self._start_preload()
        self.release_dataset()

    # -- which grid items were selected -----------------------------------------------

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
        """Under xdist the workers collect: the grid items are those whose id names a cell.

        At the first worker's collection, before any item is sent: the
        embedded data is generated and prepared here, once, and said on the
        terminal (the workers' own output is not shown).
        """
        first = self.gathered.selected is None
        cells = {c.id for c in self.parts.plan.cells}
        self.gathered.selected = {i for i in ids if i.endswith("]") and i.rsplit("[", 1)[-1][:-1] in cells}
        if first and self.gathered.selected and not self.settings.dry_run:
            self.prepare()

    def small_grid(self) -> bool:
        """Whether the grid is small enough that one xdist worker finishes it before two would."""
        return small_data(self.settings.data, self.settings.embedded_questions)

    # -- gathering records --------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect the records of every item (xdist forwards worker reports here), taking them off the report.

        (A worker has no such hook: xdist still has to send them.)
        """
        self.gathered.take(report)

    # -- the session's end -------------------------------------------------------------
    # First: every record is in once the run loop ends. The report is written on
    # a thread while xdist shuts its workers down, and ``finish_report`` (last)
    # waits for it.

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Judge the model calls, then start writing the report (whole, or partial beside it)."""
        shutil.rmtree(self.parts.shared_cells().root, ignore_errors=True)
        got, outcome = self.gathered, self.outcome
        if got.model_calls.usage_by_process or got.model_calls.side_calls:
            outcome.failure_summary = got.model_calls.summarise_failures()
            reason = got.model_calls.failed_run_reason(got.records)
            if reason is not None:
                outcome.failures.append(reason)
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if not got.records:
            return
        plan = self.parts.plan
        cells = grid_cells(got.records, plan.cells)
        why_partial = partial_reason(session, got.selected, got.ran, cells)  # beside the report dir, never in it
        self.checks.update(run_checks("after_grid", self.check_run(why_partial)))
        target = Path(self.settings.report_dir) if why_partial is None else partial_dir(Path(self.settings.report_dir))
        if why_partial is not None:
            outcome.partial_path, outcome.partial_why = target, why_partial
        info = run_info(plan, got.records, got.run_meta, self.checks, got.model_calls)
        gate = self.checks.get(Calibration.name)
        calibration_json = gate.result.to_json() if isinstance(gate, Calibration) else None
        self._report_target = target
        self._ctrl_c.hold()
        self.config.add_cleanup(self._ctrl_c.release)
        self._report = Background(
            write_in_place, got.records, info, target, why_partial, calibration_json,
            self.started_utc, plan.session_id, self._cancel_report, plan.data.path(),
        )

    def finish_report(self, session: pytest.Session) -> None:
        """Wait for the report (its errors are raised here) and apply its verdict."""
        if self.settings.dry_run and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            # Nothing was meant to run. Last, because syrupy's sessionfinish ORs the
            # status the hook was called with back in.
            session.exitstatus = pytest.ExitCode.OK
        if self.gathered.exit_code is not None and session.exitstatus in (
            pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED
        ):
            session.exitstatus = self.gathered.exit_code  # an item stopped the run on a file it could not use
        if self._report is None:
            return
        target = self._report_target
        try:
            files, cut = await_report(
                self._report, self._cancel_report, functools.partial(self._quit_unwritten, target), self._ctrl_c
            )
        except OSError as err:  # a full disk, a directory made read-only mid-run: the earlier report stays
            self._report = None
            self.outcome.report_error = (
                f"report not written: {target}: {os_cause(err)}; {self.settings.report_dir} was left as it was"
            )
            self.outcome.partial_path = None
            session.exitstatus = IO_ERROR
            return
        finally:
            self._ctrl_c.release()  # Ctrl-C raises again: the report is written or given up
        self._report = None
        outcome = self.outcome
        if files is None:  # the terminal summary says so (report_path stays None)
            if cut:
                session.exitstatus = pytest.ExitCode.INTERRUPTED
            outcome.partial_path = None  # none was written either
            return
        # A Ctrl-C that came once the writer was past its swap cut nothing short: the report is whole
        # and the run's status stands; the terminal says why the Ctrl-C changed nothing.
        outcome.late_ctrl_c = cut
        outcome.report_path = files.out_dir
        if session.exitstatus == pytest.ExitCode.INTERNAL_ERROR and outcome.partial_path is not None:
            # pytest prints no terminal summary after an internal error: say here where the report went
            self.say(partial_report_line(outcome.partial_path, self.settings.report_dir, outcome.partial_why))
        outcome.untestable = list(files.untestable)
        outcome.table = files.table
        outcome.notes = files.notes
        if grid_cells(self.gathered.records, self.parts.plan.cells)["not_run"]:
            # Part of the grid (-k, --lf): a family is decided over the whole grid (its Holm
            # size, its power), so its verdict on a part is no verdict; the items that ran
            # checked their own cells against the whole grid's families, and their status is
            # the run's. The family lines are still said, as not decided.
            outcome.undecided = list(files.failures)
        else:
            outcome.failures += list(files.failures)
            if files.failures and self.settings.family_checks == "fail":
                # a family's expectation failed after Holm: the session fails, each case in its line
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _quit_unwritten(self, target: Path) -> None:
        """A second Ctrl-C while the report is written: say so, and leave no staging directory behind."""
        remove_orphans(target, own=True)
        self.config.get_terminal_writer().line(
            f"\nrestore: quit at a second Ctrl-C: report not written; {self.settings.report_dir} was left as it was",
            yellow=True,
        )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """A short table of regime (b), where the report is, and what failed (the dry run: its table)."""
        got, outcome = self.gathered, self.outcome
        terminal_summary(
            terminalreporter,
            self.settings,
            dry_run_lines=outcome.dry_run_lines,
            failure_summary=outcome.failure_summary,
            records=got.records,
            table=outcome.table,
            failures=outcome.failures,
            untestable=outcome.untestable,
            undecided=outcome.undecided,
            report_error=outcome.report_error,
            run_meta=got.run_meta,
            report_path=outcome.report_path,
            late_ctrl_c=outcome.late_ctrl_c,
            partial_path=outcome.partial_path,
            partial_why=outcome.partial_why,
            cells=grid_cells(got.records, self.parts.plan.cells),
            notes=outcome.notes,
        )
