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
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_restore.audit.run import count_tokens_ahead
from pytest_restore.data.dataset import auditable as data_auditable
from pytest_restore.exits import IO_ERROR, os_cause
from pytest_restore.memory.kernels import cached_on_disk as kernels_cached_on_disk
from pytest_restore.models.cache import cache_problem
from pytest_restore.models.providers import ProviderRegistry, missing_key_problem
from pytest_restore.plugin.batching import batch_rounds
from pytest_restore.plugin.calls import dry_run
from pytest_restore.plugin.cells import grid_cells
from pytest_restore.plugin.finish import (
    Background,
    Outcome,
    ReportWaiter,
    await_report,
    partial_reason,
    partial_report_line,
    preload_figure,
    run_info,
    terminal_summary,
    write_in_place,
)
from pytest_restore.plugin.gather import Gathered
from pytest_restore.plugin.options import ONE_PROCESS_KEY, RUN_KEY, small_data
from pytest_restore.plugin.parts import COMPILING, AuditParts
from pytest_restore.plugin.quality import (
    RunStopped,
    calibration_gate,
    judge_audit,
    stop_before_grid,
)
from pytest_restore.plugin.rankers import embed_ahead, embedding_check, embedding_dry_run
from pytest_restore.plugin.runner import CellRunner
from pytest_restore.plugin.settings import RestoreSettings
from pytest_restore.plugin.staging import partial_dir, remove_orphans, report_dir_problem


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

    def __init__(self, config: pytest.Config, settings: RestoreSettings, providers: ProviderRegistry) -> None:
        self.config = config
        self.say = functools.partial(say_on_terminal, config)
        run_id = str(config.stash.get(RUN_KEY, "") or uuid.uuid4().hex)
        self.parts = AuditParts(config, settings, providers, run_id, self.say)
        #: The cells of this process (all of them without xdist; none under it: the workers run them).
        self.runner = CellRunner(self.parts)
        self.settings = self.parts.settings  # a data file's budgets are set once ``begin`` has read it
        #: The records, data description and model calls every item sent, and which items ran.
        self.gathered = Gathered()
        #: The run's checks outside the grid (calibration, judge audit), for the report.
        self.checks: dict[str, Any] = {}
        self.calibration_json: str | None = None
        #: How the session ends, for the terminal summary.
        self.outcome = Outcome()
        self.started_utc = datetime.datetime.now(datetime.timezone.utc)
        self._preload: threading.Thread | None = None  # the early import of the figure module
        self._prepared = False  # the data was prepared for the xdist workers (``prepare``)
        self._report: Background | None = None  # the report being written
        self._report_target = Path(settings.report_dir)  # where it goes (beside it, when partial)
        self._cancel_report = threading.Event()  # set by Ctrl-C while it is written: nothing is swapped in

    def begin(self) -> None:
        """Register the session's hooks, then check what can be known before any model call."""
        plugins = self.config.pluginmanager
        plugins.register(self, "restore-session")
        plugins.register(self.runner, "restore-runner")
        plugins.register(ReportWaiter(self.finish_report), "restore-report-waiter")
        self.config.add_cleanup(self.join_preload)
        settings = self.settings
        # A run that names data or real models is an audit: stop it now. Otherwise (this plugin
        # loads in every pytest run) only the grid's items fail, so unrelated test suites are untouched.
        problem = report_dir_problem(settings.report_dir, settings.source("report-dir"))
        if problem and (settings.data or settings.uses_real_models):
            raise pytest.UsageError(problem)
        if settings.prompts:
            settings.prompt_set()  # each template is test-formatted: a bad placeholder stops the run here
        problem = missing_key_problem(settings.all_models(), settings.base_url, self.parts.providers)
        if problem and not settings.dry_run:  # a dry run costs nothing: it says so and goes on
            raise pytest.UsageError(problem)
        if settings.uses_real_models:
            # the cache must take its first entry: a file in its place, or a directory that takes
            # no file, would otherwise fail the first reply after it was paid for (and the dry
            # run's look into the cache with a traceback)
            problem = cache_problem(settings.model_options(self.parts.cache_root()).cache_dir)
            if problem:
                raise pytest.UsageError(f"{settings.source('cache')}: {problem}" if settings.cache else problem)
        if settings.data:
            dataset = self.parts.dataset()  # a malformed file stops the run here, before any model call
            self.settings = self.parts.settings  # with the data's budgets unless --restore-budgets named some
            abstention, no_gold, auditable = data_auditable(dataset, settings.granularity)
            if not auditable:
                raise pytest.UsageError(
                    f"{dataset.path}: no question to audit: {len(dataset.questions)} questions, "
                    f"{abstention} abstention, {no_gold} without gold evidence at {settings.granularity} granularity"
                )

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
        s = self.settings
        if s.dry_run:
            # Counted now, before xdist starts its workers; printed as the run's summary.
            # No item runs (the runner deselects them) and the run exits 0.
            problem = missing_key_problem(s.all_models(), s.base_url, self.parts.providers)
            self.outcome.dry_run_lines = ([f"warning: {problem}"] if problem else []) + dry_run(
                s, self.parts.audit, self.parts.policies, self.parts.registry, self.parts.providers,
                s.model_options(self.parts.cache_root()).cache_dir, self.say,
            )
            for vectors in self.parts.ranker_vectors():
                self.outcome.dry_run_lines += embedding_dry_run(vectors, self.parts.dataset(), self.parts.audit_config())
            return
        for vectors in self.parts.ranker_vectors():
            # every text the grid ranks, embedded once here: the workers only read the store
            failed = embed_ahead(vectors, self.parts.dataset(), self.parts.audit_config())
            if failed is not None:
                stop_before_grid(self.config, session, RunStopped(failed))
        if self.parts.ranker_vectors():
            self.checks["embeddings"] = embedding_check(self.parts.ranker_vectors(), self.parts.dataset(), self.parts.audit_config())
        if s.calibration == "on" or (s.calibration == "auto" and s.uses_real_models):
            try:
                self.calibration_json = calibration_gate(self.parts, self.gathered.model_calls, self.checks)
            except RunStopped as stop:
                stop_before_grid(self.config, session, stop)
        if s.batch:
            try:
                batch_rounds(self.parts, self.say, self.checks)  # the grid then runs from the cache
            except RunStopped as stop:
                stop_before_grid(self.config, session, stop)
        if self.distributed():
            self._start_preload()  # the controller idles while the workers run the grid

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
        if self.settings.data is None:
            ready = f"{len(self.parts.dataset().questions)} questions ready"
        else:
            ready = f"{Path(self.settings.data).name} validated"  # at configure time
        # the token counts are the same for every worker: counted here, once, into the prepared
        # cache that each worker then reads; the workers wait for their first items meanwhile, so
        # the counting is shared out over as many processes as there are workers
        self.say(ready)
        workers = max(1, min(int(getattr(self.config.option, "numprocesses", 1) or 1), os.cpu_count() or 1))
        counting = f"counting the o200k tokens of {{:,}} distinct texts once, for every xdist worker (in up to {workers} processes) ...".format
        if count_tokens_ahead(self.parts.dataset(), self.parts.audit_config(), lambda n: self.say(counting(n)), workers):
            self.say("token counts ready in the prepared cache")
        if not kernels_cached_on_disk():
            self.say(f"the xdist workers start by {COMPILING}")
        self.say("the xdist workers prepare their histories ...")
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
        cells = {c.id for c in self.parts.cells}
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
        cells = grid_cells(got.records, self.parts.cells)
        why_partial = partial_reason(session, got.selected, got.ran, cells)  # beside the report dir, never in it
        if self.settings.audit_judge and why_partial is None:
            self.checks["judge_audit"] = judge_audit(self.parts, got.records, got.model_calls)
        target = Path(self.settings.report_dir) if why_partial is None else partial_dir(Path(self.settings.report_dir))
        if why_partial is not None:
            outcome.partial_path, outcome.partial_why = target, why_partial
        info = run_info(
            self.settings, self.parts.policies, got.records, got.run_meta, self.checks, got.model_calls,
            cells, self.parts.families,
        )
        self._report_target = target
        self._report = Background(
            write_in_place, got.records, info, target, why_partial, self.calibration_json,
            self.started_utc, self.parts.run_id, self._cancel_report,
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
            files, cut = await_report(self._report, self._cancel_report, functools.partial(self._quit_unwritten, target))
        except OSError as err:  # a full disk, a directory made read-only mid-run: the earlier report stays
            self._report = None
            self.outcome.report_error = (
                f"report not written: {target}: {os_cause(err)}; {self.settings.report_dir} was left as it was"
            )
            self.outcome.partial_path = None
            session.exitstatus = IO_ERROR
            return
        self._report = None
        if cut:
            session.exitstatus = pytest.ExitCode.INTERRUPTED
        outcome = self.outcome
        if files is None:  # the terminal summary says so (report_path stays None)
            outcome.partial_path = None  # none was written either
            return
        outcome.report_path = files.out_dir
        if session.exitstatus == pytest.ExitCode.INTERNAL_ERROR and outcome.partial_path is not None:
            # pytest prints no terminal summary after an internal error: say here where the report went
            self.say(partial_report_line(outcome.partial_path, self.settings.report_dir, outcome.partial_why))
        outcome.untestable = list(files.untestable)
        outcome.table = files.table
        if grid_cells(self.gathered.records, self.parts.cells)["not_run"]:
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
            partial_path=outcome.partial_path,
            partial_why=outcome.partial_why,
            cells=grid_cells(got.records, self.parts.cells),
        )
