"""The session's end on the controller, in pytest's words: why it ended early, the terminal summary.

The run's end is the run core's (``run/session.py``: the report written
whole into place, or partial beside it, on a thread); :class:`ReportWaiter`,
the last ``pytest_sessionfinish``, waits for it, and :func:`terminal_summary`
says the run's :class:`~pytest_restore.run.session.RunOutcome`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import pytest

from pytest_restore.record import baseline_ranker
from pytest_restore.run.report import partial_report_line, simulated_roles
from pytest_restore.run.session import RunOutcome
from pytest_restore.run.settings import RestoreSettings


def interrupted(
    session: pytest.Session, selected: set[str] | None, ran: set[str], failed: AbstractSet[str] = frozenset()
) -> str | None:
    """Why the session ended before its selected grid ran whole, or ``None``."""
    status = session.exitstatus
    if status == pytest.ExitCode.INTERRUPTED:
        return "interrupted"
    if status == pytest.ExitCode.INTERNAL_ERROR:
        return "internal error"
    if selected is not None:
        missing = selected - ran
        if missing:
            broke = len(missing & failed)  # they ran and failed: not "did not run"
            if not broke:
                return f"{len(missing)} of {len(selected)} selected grid items did not run"
            rest = len(missing) - broke
            return f"{broke} of {len(selected)} selected grid items failed" + (f"; {rest} did not run" if rest else "")
    return None


def cells_not_run(
    not_run: Sequence[str], selected: set[str] | None, failed: AbstractSet[str], *, stopped: bool
) -> dict[str, list[str]]:
    """The grid cells with no records, by why: ``failed`` (their item failed), ``interrupted``
    (selected, but Ctrl-C came first: ``stopped``) or ``not run`` (selected, never reached after a
    stop), and ``not selected`` (-k, --lf, a deselection). Cell ids are the items' parameters."""

    def cell_of(nodeid: str) -> str:
        return nodeid.rsplit("[", 1)[-1][:-1] if nodeid.endswith("]") else nodeid

    chosen = {cell_of(n) for n in selected} if selected is not None else set(not_run)
    broke = {cell_of(n) for n in failed}
    out: dict[str, list[str]] = {"failed": [], "interrupted": [], "not run": [], "not selected": []}
    for cell in not_run:
        why = "failed" if cell in broke else ("interrupted" if stopped else "not run") if cell in chosen else "not selected"
        out[why].append(cell)
    return out


def terminal_summary(
    terminalreporter: Any,
    settings: RestoreSettings,
    outcome: RunOutcome,
    not_run_why: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """A short table of regime (b), where the report is, and what failed (the dry run: its table).

    ``not_run_why`` says why each grid cell without records has none (:func:`cells_not_run`: failed,
    interrupted, not run, not selected; default: not selected).

    ``terminalreporter`` is pytest's (or anything with its ``write_sep`` and
    ``write_line``: ``python -m pytest_restore run`` says the same). The title
    says when a model is simulated and when only part of the grid ran.
    """
    dry_run_lines, failure_summary, records = outcome.dry_run_lines, outcome.failure_summary, outcome.records
    table, failures, untestable, undecided = outcome.table, outcome.failures, outcome.untestable, outcome.undecided
    report_error, report_path, late_ctrl_c = outcome.report_error, outcome.report_path, outcome.late_ctrl_c
    partial_path, partial_why, cells, notes = outcome.partial_path, outcome.partial_why, outcome.cells, outcome.notes
    run_meta = outcome.run_meta  # (the outcome's parts by name: the lines below say each as before)
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
    why_not = not_run_why if not_run_why is not None else {"not selected": list(not_run)}
    for why, line in (
        ("failed", "grid cells that failed (their records are not in the report)"),
        ("interrupted", "grid cells interrupted before they ran"),
        ("not run", "grid cells selected but not run (the session stopped first)"),
        ("not selected", "grid cells not selected in this run"),
    ):
        if why_not.get(why):
            names = why_not[why]
            terminalreporter.write_line(f"{line} ({len(names)}): {', '.join(names)}", red=why == "failed", yellow=why != "failed")
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
