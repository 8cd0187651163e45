"""The session's end on the controller: the report written whole into place, or partial beside it.

A report is written into a fresh directory and swapped in as a whole
(:func:`write_in_place`), so a complete report is never replaced by a partial
one: a session cut short writes beside the report directory
(:func:`partial_dir`). The writing runs on a thread (:class:`Background`)
while xdist shuts its workers down; :class:`ReportWaiter`, the last
``pytest_sessionfinish``, waits for it. :func:`terminal_summary` says the
outcome in the terminal.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib
import os
import shutil
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from pytest_restore import __version__
from pytest_restore.memory.eviction import Policy
from pytest_restore.models.fake import simulated_models
from pytest_restore.plugin.calls import ModelCalls
from pytest_restore.plugin.cells import part_of_grid
from pytest_restore.plugin.settings import RestoreSettings
from pytest_restore.plugin.staging import partial_dir, staging_dir, swap_into_place
from pytest_restore.record import Record, baseline_ranker
from pytest_restore.report.inputs import Provenance, RunInfo
from pytest_restore.report.writer import ReportFiles, write_report
from pytest_restore.stats.families import FAMILIES, Family


def partial_report_line(partial_path: Path, report_dir: str, why: str | None = None) -> str:
    """What a partial session tells the user: where its partial report is, and that the whole one was kept."""
    return f"partial report ({why or 'interrupted'}): {partial_path}; {report_dir} was left as it was"


def run_info(
    settings: RestoreSettings,
    policies: Sequence[Policy],
    records: Sequence[Record],
    run_meta: dict[str, Any],
    checks: dict[str, Any],
    model_calls: ModelCalls,
    cells: dict[str, list[str]],
    families: Sequence[Family] = FAMILIES,
) -> RunInfo:
    """Settings, dataset, exclusions and the run's checks for the report.

    The settings show what ran (the policies, budgets and readers of the
    records), not what was configured; ``cells`` names the grid cells that
    ran and those that did not; ``families`` are the session's hypothesis families.
    """
    shown = asdict(settings)
    shown.pop("report_dir")
    shown.pop("real_models")
    shown["data"] = Path(settings.data).name if settings.data else "embedded synthetic"
    ran_policies = {r.policy for r in records}
    ran_budgets = {r.budget for r in records}
    shown["policies"] = [p.name for p in policies if p.name in ran_policies]
    shown["budgets"] = [b for b in settings.budgets if b in ran_budgets]
    shown["run_id"] = records[0].run_id if records else None
    meta = dict(run_meta)
    exclusions = meta.pop("exclusions", {})
    meta.pop("path", None)
    if model_calls.usage_by_process:
        shown["model_usage"] = model_calls.total_usage()
    checks = dict(checks)
    checks["grid"] = {"result": cells}
    details = model_calls.all_details()
    if details:
        checks["model_calls"] = {"result": details}
    return RunInfo(settings=shown, dataset=meta, exclusions=exclusions, checks=checks, families=tuple(families))


def interrupted(session: pytest.Session, selected: set[str] | None, ran: set[str]) -> str | None:
    """Why the session ended before its selected grid ran whole, or ``None``."""
    status = session.exitstatus
    if status == pytest.ExitCode.INTERRUPTED:
        return "interrupted"
    if status == pytest.ExitCode.INTERNAL_ERROR:
        return "internal error"
    if selected is not None:
        missing = selected - ran
        if missing:
            return f"{len(missing)} of {len(selected)} selected grid items did not run"
    return None


def partial_reason(
    session: pytest.Session, selected: set[str] | None, ran: set[str], cells: Mapping[str, Sequence[str]]
) -> str | None:
    """Why the report is partial: the session was cut short, else it ran part of the grid (``-k``, ``--lf``).

    ``None`` for a whole grid run whole. A partial report goes beside the report
    directory, never in it, so a complete report is never replaced by a part.
    """
    return interrupted(session, selected, ran) or part_of_grid(cells)


def write_in_place(
    records: list[Record],
    info: RunInfo,
    target: Path,
    partial: str | None,
    calibration_json: str | None,
    started_utc: datetime.datetime,
    session_id: str,
    cancelled: threading.Event | None = None,
) -> ReportFiles:
    """Write the report (and the calibration gate's, if any) into a fresh directory beside ``target``, then swap it into place.

    The session's provenance (``started_utc``, ``session_id``, ``partial``: why
    the grid did not finish) goes to the writer with ``info``, so every file is
    written once, whole.

    Once ``cancelled`` is set (Ctrl-C while the report is written), nothing
    is swapped in: the staging directory goes and :class:`ReportCancelled`
    is raised, so ``target`` stays as it was.
    """
    staging = staging_dir(target)
    provenance = Provenance(
        version=__version__,
        started_utc=started_utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
        session_id=session_id,
        partial=partial,
    )
    try:
        # every file written once, whole: the provenance and the partial mark are the writer's input
        files = write_report(records, dataclasses.replace(info, provenance=provenance), staging)
        if calibration_json is not None:
            (staging / "calibration.json").write_text(calibration_json, encoding="utf-8")
        if cancelled is not None and cancelled.is_set():
            raise ReportCancelled(f"{target} was not replaced")
        swap_into_place(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if partial is None:
        # a whole report supersedes the partial one an earlier, cut-short session left
        shutil.rmtree(partial_dir(target), ignore_errors=True)
    return dataclasses.replace(files, out_dir=target)

def write_partial(calibration_json: str | None, report_dir: str) -> Path | None:
    """Write what the calibration gate produced, beside the report directory, marked partial."""
    if calibration_json is None:
        return None
    target = partial_dir(Path(report_dir))
    staging = staging_dir(target)
    try:
        (staging / "calibration.json").write_text(calibration_json, encoding="utf-8")
        swap_into_place(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


@dataclasses.dataclass
class Outcome:
    """How the session ends, as the terminal summary says it."""

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
    #: The written report's regime-(b) table (empty: no report was written).
    table: tuple[str, ...] = ()
    #: Where the report went (``None``: none was written).
    report_path: Path | None = None
    #: Where a partial report went (the complete one, if any, was left as it was).
    partial_path: Path | None = None
    #: Why it is partial (cut short, or part of the grid selected), in words.
    partial_why: str | None = None


def terminal_summary(
    terminalreporter: Any,
    settings: RestoreSettings,
    *,
    dry_run_lines: Sequence[str],
    failure_summary: Sequence[str],
    records: Sequence[Record],
    table: Sequence[str],
    failures: Sequence[str],
    untestable: Sequence[str],
    run_meta: dict[str, Any],
    report_path: Path | None,
    partial_path: Path | None,
    cells: Mapping[str, Sequence[str]],
    undecided: Sequence[str] = (),
    report_error: str | None = None,
    partial_why: str | None = None,
) -> None:
    """A short table of regime (b), where the report is, and what failed (the dry run: its table).

    ``table`` is the written report's regime-(b) table (:attr:`ReportFiles.table`;
    empty when no report was written); ``cells`` names the grid cells this run ran and those
    it did not select (:func:`grid_cells`). The title says when a model is simulated and when only part of
    the grid ran.
    """
    if dry_run_lines:
        terminalreporter.write_sep("=", "restore dry run: model calls the grid needs")
        for line in dry_run_lines:
            terminalreporter.write_line(line, yellow=line.startswith("warning: "))
        terminalreporter.write_line("dry run: no model was called; drop --restore-dry-run to run the grid")
        return
    if failure_summary:
        terminalreporter.write_sep("=", "failed model calls, by model and cause", red=True, bold=True)
        for line in failure_summary:
            terminalreporter.write_line(line, red=True)
    if not records:
        for failure in failures:
            terminalreporter.write_line(failure, red=True)
        return
    baseline = baseline_ranker(records)  # several rankers: the table is the baseline's, say so
    ranker = f", ranker {baseline}; every ranker in report.md" if baseline else ""
    ran, not_run = cells["ran"], cells["not_run"]
    fakes = simulated_models(records)
    marks = (["SIMULATED"] if fakes else []) + (
        [f"PART OF THE GRID ({len(ran)} of {len(ran) + len(not_run)} cells)"] if not_run else []
    )
    terminalreporter.write_sep("=", f"restore-counterfactual audit (regime b{ranker})" + "".join(f": {m}" for m in marks))
    if not_run:
        terminalreporter.write_line(f"part of the grid: cells run ({len(ran)}): {', '.join(ran)}", yellow=True)
    for line in table:
        terminalreporter.write_line(line)
    if fakes:
        models = ", ".join(f"{role} {name}" for role, name in fakes)
        terminalreporter.write_line(
            f"simulated: fake models ({models}): these figures check the audit's pipeline, not any model", yellow=True
        )
    meta = run_meta
    for line in budget_warnings(meta):
        terminalreporter.write_line(line, yellow=True)
    if settings.data is None:
        terminalreporter.write_line(f"dataset: embedded synthetic LongMemEval-S, sha256 {meta.get('sha256')}")
    elif meta.get("dataset", "longmemeval") != "longmemeval":
        terminalreporter.write_line(
            f"dataset: {Path(settings.data).name} read as {meta.get('dataset')}, sha256 {meta.get('sha256')}"
        )
    elif meta.get("official"):
        terminalreporter.write_line(f"dataset: official LongMemEval-S, sha256 {meta.get('sha256')}")
    else:
        terminalreporter.write_line(
            f"warning: {Path(settings.data).name} is not the official longmemeval_s_cleaned.json "
            f"(sha256 {meta.get('sha256')})",
            yellow=True,
        )
    if report_error is not None:
        terminalreporter.write_line(report_error, red=True)
    elif partial_path is not None:
        terminalreporter.write_line(partial_report_line(partial_path, settings.report_dir, partial_why), yellow=True)
    elif report_path is None:  # Ctrl-C while it was written (see await_report)
        terminalreporter.write_line(
            f"report not written (interrupted while writing it): {settings.report_dir} was left as it was", yellow=True
        )
    else:
        terminalreporter.write_line(f"report: {report_path}")
    if not_run:
        terminalreporter.write_line(
            f"grid cells not selected in this run ({len(not_run)}): {', '.join(not_run)}", yellow=True
        )
    strict = settings.family_checks == "fail"
    if failures:
        red = strict or any(f.startswith("model calls failed") for f in failures)
        verdict = "fail the run" if red else "reported only (--restore-family-checks report)"
        terminalreporter.write_sep(
            "=", f"{len(failures)} expectations not met: {verdict}", red=red, yellow=not red, bold=True
        )
        for failure in failures:
            line_red = strict or failure.startswith("model calls failed")
            terminalreporter.write_line(failure, red=line_red, yellow=not line_red)
    for line in untestable:
        terminalreporter.write_line(f"not testable at this N: {line}", yellow=True)
    if undecided:
        terminalreporter.write_sep(
            "=", f"{len(undecided)} expectations not met on this part of the grid: not decided, the run "
            "passes or fails on its items (run the whole grid to decide them)", yellow=True,
        )
        for line in undecided:
            terminalreporter.write_line(line, yellow=True)


def budget_warnings(meta: Mapping[str, Any]) -> list[str]:
    """One warning per budget that binds for no history (its cells evict nothing: they repeat no-evict)."""
    binding = meta.get("budget_binding") or {}
    return [
        f"warning: budget {int(budget):,} binds for no history of {meta.get('histories', '?')} "
        f"(each holds fewer tokens): its cells evict nothing"
        for budget, share in sorted(binding.items(), key=lambda item: -int(item[0]))
        if share == 0
    ]


def preload_figure() -> None:
    """Import the figure module ahead of the report; a failure here is the report's to raise."""
    with contextlib.suppress(Exception):  # the report imports it again and reports what is wrong
        importlib.import_module("pytest_restore.report.figure")


class Background(threading.Thread):
    """Run one call on a thread; ``result`` waits and re-raises what it raised."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        super().__init__(name="pytest-restore-report", daemon=True)
        self._call = (fn, args)
        self._value: Any = None
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        fn, args = self._call
        try:
            self._value = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread by ``result``
            self._error = exc

    def result(self) -> Any:
        self.join()
        if self._error is not None:
            raise self._error
        return self._value


class ReportCancelled(Exception):
    """The report was cut short before it was swapped into place (see :func:`write_in_place`)."""


def await_report(
    report: Background, cancelled: threading.Event, on_quit: Callable[[], None] | None = None
) -> tuple[ReportFiles | None, bool]:
    """The files of the report ``report`` writes (``None`` when it was cut short), and whether Ctrl-C came.

    Ctrl-C while waiting sets ``cancelled`` and waits again, for the writer
    to stop before its swap (or to finish one already under way), so the
    process never ends with the writer in the middle of its work and no
    report directory is left half-replaced. A second Ctrl-C quits the process
    at once (exit 2) after ``on_quit`` (say so, remove the staging directory):
    the writer is not waited for.
    """
    try:
        return report.result(), False
    except KeyboardInterrupt:
        cancelled.set()
        sys.stdout.write("\nrestore: interrupted: the report writer stops before it replaces anything (Ctrl-C again quits at once)\n")
        sys.stdout.flush()
    try:
        return report.result(), True
    except ReportCancelled:
        return None, True
    except KeyboardInterrupt:
        # A second Ctrl-C: quit now. The writer may be deep in the bootstrap's native (BLAS)
        # code; an interpreter exit would wait on it (or on BLAS's own threads) for as long as
        # it takes. The earlier report was never touched; only this process's staging goes.
        if on_quit is not None:
            on_quit()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(pytest.ExitCode.INTERRUPTED)


class ReportWaiter:
    """The last ``pytest_sessionfinish``: waits for the report the session started."""

    def __init__(self, finish: Callable[[pytest.Session], None]) -> None:
        self.finish = finish

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.finish(session)
