"""The run as one object: a plan's phases in order, whichever host drives them.

A :class:`RunSession` is built from a plan and runs the phases of an audit in
their order: :meth:`~RunSession.before_grid` (the dry run's count, or the
checks before the grid: embeddings, the calibration gate, batch rounds),
:meth:`~RunSession.receive` for each grid item's message (its cell's records,
the data's description, its process's model calls), then
:meth:`~RunSession.finish` (the model calls judged, the checks after the grid,
the report written whole or beside the old one) which returns the
:class:`RunOutcome`: the report's files with the typed run log, why the run
fails, and the exit status it asks for.

Two hosts drive it: the pytest plugin (``plugin/controller.py``: each phase
from its hook; the grid's items are pytest's) and ``python -m pytest_restore
run`` (``run/local.py``: the grid's cells run in this process or in a pool of
processes). Neither computes anything of the run itself; both say the outcome
with the same terminal summary.
"""

from __future__ import annotations

import dataclasses
import datetime
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from pytest_restore.exits import FAILED, INTERRUPTED, IO_ERROR, os_cause
from pytest_restore.record import Record
from pytest_restore.report.inputs import RunLog
from pytest_restore.report.writer import ReportFiles
from pytest_restore.run.calls import ModelCalls
from pytest_restore.run.checks import Calibration, Check, CheckRun, SystemCell, run_checks
from pytest_restore.run.message import ItemMessage
from pytest_restore.run.parts import DataMeta, RunParts
from pytest_restore.run.phases import dry_run_phase
from pytest_restore.run.plan import Plan, Say, freeze_long_lived
from pytest_restore.run.quality import Console
from pytest_restore.run.report import (
    Background,
    HeldCtrlC,
    await_report,
    grid_cells,
    part_of_grid,
    run_info,
    write_in_place,
)
from pytest_restore.run.staging import partial_dir, remove_orphans
from pytest_restore.timeline import phase


class GridMessages:
    """What the grid's items sent: their records, the data's description, every process's model calls."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        #: The data's description, from the process that loaded it (``RunParts.meta``).
        self.run_meta: DataMeta = DataMeta()
        #: Real model calls of every process: usage, failures by cause, concurrency reached.
        self.model_calls = ModelCalls()
        #: The items whose cell ran (their records arrived).
        self.ran: set[str] = set()
        #: The exit status an item that stopped the run asked for (74: a file could not be read or written).
        self.exit_code: int | None = None
        #: What each memory system's cell's stores cost and dropped, by cell id (``ItemMessage.memory``).
        self.memory: dict[str, SystemCell] = {}
        #: The records as they arrived pickled from other processes (``ItemMessage.pickled``), in
        #: ``records``' order, and how many records they hold: the report's page process reads them.
        self.pickled: list[bytes] = []
        self._pickled_records = 0

    def pickled_records(self) -> list[bytes] | None:
        """Every record as pickled by the processes that made them, in arrival order; ``None`` when some
        were made in this process (they have no pickle: the report pickles them all)."""
        return self.pickled if self._pickled_records == len(self.records) else None

    def receive(self, message: ItemMessage, item: str) -> None:
        """One item's message: its records and data description, its process's model calls, or its exit status."""
        if message.exit_code is not None:
            self.exit_code = message.exit_code
        if message.records is None:
            return
        self.ran.add(item)
        self.records.extend(message.records)
        if message.pickled is not None:
            self.pickled.append(message.pickled)
            self._pickled_records += len(message.records)
        # kept to the report: the full collections while the other cells arrive need not walk them
        freeze_long_lived(f"records {item}")
        self.run_meta = message.data
        # cumulative per process: the latest message of each process wins
        self.model_calls.usage_by_process[message.process] = dict(message.usage)
        self.model_calls.calls_by_process[message.process] = dict(message.calls)
        if message.memory is not None:
            self.memory[message.memory["cell"]] = message.memory


@dataclasses.dataclass
class RunOutcome:
    """How a run ends: the report's files and typed log, what failed, and the exit status the run asks for."""

    #: The dry run's table (the run made no call).
    dry_run_lines: list[str] = dataclasses.field(default_factory=list)
    #: Lines said once at the end: the failed model calls by cause, per model.
    failure_summary: list[str] = dataclasses.field(default_factory=list)
    #: Why the run does not pass (failed model calls, unmet family expectations).
    failures: list[str] = dataclasses.field(default_factory=list)
    #: The family expectations this run had no power to test.
    untestable: list[str] = dataclasses.field(default_factory=list)
    #: Family expectations not met on the part of the grid that ran (-k, --lf): said, not failing.
    undecided: list[str] = dataclasses.field(default_factory=list)
    #: Why the report could not be written (a full disk), in one line.
    report_error: str | None = None
    #: The report's files, its table, notes and typed run log (``None``: no report was written).
    files: ReportFiles | None = None
    #: Where the report went (``None``: none was written).
    report_path: Path | None = None
    #: Ctrl-C came while the report was written, too late to stop it: the report is whole.
    late_ctrl_c: bool = False
    #: Where a partial report went (the complete one, if any, was left as it was).
    partial_path: Path | None = None
    #: Why it is partial (cut short, or part of the grid selected), in words.
    partial_why: str | None = None
    #: The records the grid sent, the data's description, and which grid cells ran and did not.
    records: list[Record] = dataclasses.field(default_factory=list)
    run_meta: DataMeta = dataclasses.field(default_factory=lambda: DataMeta())
    cells: dict[str, list[str]] = dataclasses.field(default_factory=lambda: {"ran": [], "not_run": []})
    #: Model calls failed (records lost N, or a model answered nothing): the run fails.
    calls_failed: bool = False
    #: The exit status the report asks for (``None``: it asks none): 1 for a failed family expectation,
    #: 2 for a report cut short by Ctrl-C, 74 for one that could not be written.
    report_status: int | None = None

    @property
    def table(self) -> tuple[str, ...]:
        """The written report's regime-(b) table (empty: none was written)."""
        return self.files.table if self.files is not None else ()

    @property
    def notes(self) -> tuple[str, ...]:
        """The written report's notes on what its table's rows mean."""
        return self.files.notes if self.files is not None else ()

    @property
    def log(self) -> RunLog | None:
        """The written report's typed run log (``summary.json``)."""
        return self.files.log if self.files is not None else None


class RunSession:
    """One run of a plan: its phases in order, its grid's messages gathered, its outcome."""

    def __init__(
        self,
        plan: Plan,
        say: Say,
        console: Callable[[], Console],
        grid: GridMessages | None = None,
        started_utc: datetime.datetime | None = None,
    ) -> None:
        """``console`` gives where the checks write (pytest's terminal writer, made when first needed);
        ``grid`` gathers the items' messages (the plugin's reads pytest's reports too)."""
        self.plan = plan
        self.settings = plan.settings
        self.parts = RunParts(plan, say)
        self.console = console
        self.grid = grid if grid is not None else GridMessages()
        #: The results of the run's checks outside the grid (``run/checks.py``), by name, for the report.
        self.checks: dict[str, Check] = {}
        self.outcome = RunOutcome()
        self.started_utc = started_utc or datetime.datetime.now(datetime.timezone.utc)
        self._report: Background | None = None  # the report being written
        self._target = Path(plan.settings.report_dir)  # where it goes (beside it, when partial)
        self._cancel = threading.Event()  # set by Ctrl-C while it is written: nothing is swapped in
        self._said_aside: set[str] = set()  # the replicas said set aside, by address

    def check_run(self, partial: str | None = None) -> CheckRun:
        """What the run's checks run over (after the grid: the gathered records, and whether it ran whole)."""
        g = self.grid
        return CheckRun(self.parts, g.model_calls, self.console(), g.records, partial, g.memory)

    # -- the phases ----------------------------------------------------------------------

    def before_grid(self) -> None:
        """The dry run's count (no item runs and the run ends), or the checks before the grid.

        A check that stops the run raises :class:`~pytest_restore.run.quality.RunStopped`.
        """
        if self.settings.dry_run:
            self.outcome.dry_run_lines = dry_run_phase(self.parts).lines
            return
        self.checks.update(run_checks("before_grid", self.check_run()))

    def receive(self, message: ItemMessage, item: str) -> None:
        """One grid item's message (``item`` names it: a pytest node id, or a cell's id)."""
        self.grid.receive(message, item)
        self.say_set_aside()

    def say_set_aside(self) -> None:
        """A replica set aside, in one line, the first time any process's message tells of it: once a run,
        however many workers set it aside each."""
        for where, why in self.grid.model_calls.set_aside().items():
            if where not in self._said_aside:
                self._said_aside.add(where)
                self.parts.say(f"replica {why}: set aside, its calls go to the other replicas")

    def partial(self, cut_short: str | None = None) -> str | None:
        """Why the report is partial: ``cut_short`` (the host's words), else a part of the grid ran; ``None``: whole."""
        return cut_short or part_of_grid(grid_cells(self.grid.records, self.plan.cells))

    def start_finish(self, partial: str | None) -> None:
        """After the grid: judge the model calls, run the checks after it, start the report on a thread.

        ``partial`` says why the grid did not run whole (:meth:`partial`): the
        report then goes beside the report directory, never in it.
        """
        shutil.rmtree(self.parts.shared_cells().root, ignore_errors=True)
        got, outcome = self.grid, self.outcome
        outcome.records, outcome.run_meta = got.records, got.run_meta
        outcome.cells = grid_cells(got.records, self.plan.cells)
        self.say_set_aside()  # the models outside the grid's (the calibration's judge) too
        if got.model_calls.usage_by_process or got.model_calls.side_calls:
            outcome.failure_summary = got.model_calls.summarise_failures()
            reason = got.model_calls.failed_run_reason(got.records)
            if reason is not None:
                outcome.failures.append(reason)
                outcome.calls_failed = True
        if not got.records:
            return
        with phase("checks after the grid"):
            self.checks.update(run_checks("after_grid", self.check_run(partial)))
        report_dir = Path(self.settings.report_dir)
        self._target = report_dir if partial is None else partial_dir(report_dir)
        if partial is not None:
            outcome.partial_path, outcome.partial_why = self._target, partial
        info = run_info(self.plan, got.records, got.run_meta, self.checks, got.model_calls)
        gate = self.checks.get(Calibration.name)
        calibration_json = gate.result.to_json() if isinstance(gate, Calibration) else None
        self._report = Background(
            write_in_place, got.records, info, self._target, partial, calibration_json,
            self.started_utc, self.plan.session_id, self._cancel, self.plan.data.path(), self.plan.registries.datasets,
            self.plan.data.prepared(), got.pickled_records(),
        )

    def reporting(self) -> bool:
        """Whether a report is being written (:meth:`start_finish` started one)."""
        return self._report is not None

    def await_finish(self, ctrl_c: HeldCtrlC | None = None, on_quit: Callable[[Path], None] | None = None) -> RunOutcome:
        """Wait for the report (a write error is said, not raised) and apply its verdict; the outcome.

        Ctrl-C while waiting cuts the report short (``ctrl_c``: held since it
        began); a second quits at once after ``on_quit(staging target)``.
        """
        outcome = self.outcome
        if self._report is None:
            return outcome
        target = self._target
        try:
            quit_now = (lambda: on_quit(target)) if on_quit is not None else (lambda: remove_orphans(target, own=True))
            files, cut = await_report(self._report, self._cancel, quit_now, ctrl_c)
        except OSError as err:  # a full disk, a directory made read-only mid-run: the earlier report stays
            outcome.report_error = (
                f"report not written: {target}: {os_cause(err)}; {self.settings.report_dir} was left as it was"
            )
            outcome.partial_path = None
            outcome.report_status = IO_ERROR
            return outcome
        finally:
            self._report = None
        if files is None:  # the terminal summary says so (report_path stays None)
            if cut:
                outcome.report_status = INTERRUPTED
            outcome.partial_path = None  # none was written either
            return outcome
        # A Ctrl-C that came once the writer was past its swap cut nothing short: the report is whole
        # and the run's status stands; the terminal says why the Ctrl-C changed nothing.
        outcome.late_ctrl_c = cut
        outcome.files = files
        outcome.report_path = files.out_dir
        outcome.untestable = list(files.untestable)
        if outcome.cells["not_run"]:
            # Part of the grid: a family is decided over the whole grid (its Holm size, its power), so
            # its verdict on a part is no verdict; the items that ran checked their own cells against
            # the whole grid's families, and their status is the run's. The family lines are said, undecided.
            outcome.undecided = list(files.failures)
        else:
            outcome.failures += list(files.failures)
            if files.failures and self.settings.family_checks == "fail":
                outcome.report_status = FAILED  # a family's expectation failed after Holm: each case in its line
        return outcome

    def exit_status(self, items: int) -> int:
        """The run's exit status, given its items' (``items``: 0 when every grid item passed, 1 when one
        failed, 2 when the run was interrupted): failed model calls fail it, an item that stopped the run
        on a file it could not use names the status, and the report's own status comes last."""
        status = FAILED if self.outcome.calls_failed else items
        if self.grid.exit_code is not None and status in (FAILED, INTERRUPTED):
            status = self.grid.exit_code
        return self.outcome.report_status if self.outcome.report_status is not None else status

    def finish(self, partial: str | None) -> RunOutcome:
        """After the grid, in one call: :meth:`start_finish` then :meth:`await_finish`."""
        self.start_finish(partial)
        return self.await_finish()

    def close(self) -> None:
        """Release every model of this process."""
        self.parts.close()
