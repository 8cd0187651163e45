"""The session's end on the controller, in pytest's words: why it ended early or is partial, the terminal summary.

The report itself is the run core's (``run/report.py``: written whole into
place, or partial beside it, on a thread); :class:`ReportWaiter`, the last
``pytest_sessionfinish``, waits for it, and :func:`terminal_summary` says the
outcome in the terminal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_restore.record import Record, baseline_ranker
from pytest_restore.run.parts import DataMeta
from pytest_restore.run.report import part_of_grid, partial_report_line, simulated_roles
from pytest_restore.run.settings import RestoreSettings


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
    #: The written report's notes on what its table's rows mean (:attr:`ReportFiles.notes`).
    notes: tuple[str, ...] = ()
    #: Where the report went (``None``: none was written).
    report_path: Path | None = None
    #: Ctrl-C came while the report was written, too late to stop it: the report is whole.
    late_ctrl_c: bool = False
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
    run_meta: DataMeta,
    report_path: Path | None,
    partial_path: Path | None,
    cells: Mapping[str, Sequence[str]],
    late_ctrl_c: bool = False,
    undecided: Sequence[str] = (),
    report_error: str | None = None,
    partial_why: str | None = None,
    notes: Sequence[str] = (),
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
    fakes = simulated_roles(records)
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
    for line in [*budget_warnings(meta), *(f"warning: {note}" for note in notes)]:
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
        if late_ctrl_c:
            terminalreporter.write_line(
                f"Ctrl-C came after the report was complete: {report_path} is whole and nothing was cut short",
                yellow=True,
            )
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


class ReportWaiter:
    """The last ``pytest_sessionfinish``: waits for the report the session started."""

    def __init__(self, finish: Callable[[pytest.Session], None]) -> None:
        self.finish = finish

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.finish(session)
