"""The audit without pytest: ``python -m pytest_restore run``, one :class:`RunSession` and its grid run here.

The grid's cells run in this process, or in a pool of processes (``--workers
N``), each process building the same plan once (the session id and cache
directory the run's), as xdist's workers do: each cell's records travel as
one :class:`~pytest_restore.run.message.ItemMessage` JSON string and are
left in the shared cells for the other processes' checks. The cells sharing
the importance scorer go to one process together (each unit scored once, as
``plugin/scheduling.py`` does under xdist). Each cell is checked as a grid
item is (``run/cells.py``), its failures said as one line each under the
cell's id; the phases around the grid are the session's, so the records,
the report, the messages and the exit status are those of ``pytest
benches/`` with the same options.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pytest_restore.audit.run import Audit, CellRun
from pytest_restore.exits import FAILED, IO_ERROR
from pytest_restore.run.cells import cell_failures, cell_message, run_cell
from pytest_restore.run.grid import CellSpec
from pytest_restore.run.message import ItemMessage
from pytest_restore.run.options import RawOptions, small_data
from pytest_restore.run.parts import RunParts
from pytest_restore.run.phases import prepare_data
from pytest_restore.run.plan import (
    build_plan,
    check_before_work,
    default_registries,
    freeze_long_lived,
    thaw_earlier_runs,
)
from pytest_restore.run.quality import RunStopped
from pytest_restore.run.session import RunSession
from pytest_restore.run.settings import SettingsError
from pytest_restore.run.shared import records_text


@dataclass(frozen=True)
class CellDone:
    """One cell run as a grid item: its message to the session (JSON from another process), and what failed."""

    spec_id: str
    message: ItemMessage | str
    #: the cell's failed checks, one line each (empty: the cell passed)
    failures: tuple[str, ...] = ()
    #: the run was stopped here: its one line (a model's fatal error, the data gone since the start)
    stopped: str | None = None


def run_one(parts: RunParts, spec: CellSpec, process: str, share: bool) -> CellDone:
    """Run and check one cell in this process, as a grid item does (``plugin/cells.py``)."""
    try:
        audit: Audit = parts.audit(spec.reader)
    except SettingsError as err:  # the data, checked at the start, cannot be read any more (removed since)
        return CellDone(spec.id, ItemMessage(process, exit_code=IO_ERROR), stopped=str(err))
    run: CellRun = run_cell(parts, spec, audit)
    fatal = parts.fatal_error()
    if fatal is not None:  # a wrong key or an unknown model fails every call alike: stop at the first
        return CellDone(spec.id, ItemMessage(process, exit_code=parts.fatal_exit_code()), stopped=fatal)
    message = cell_message(parts, process, spec, run)
    sent: ItemMessage | str = message
    if share:  # another process's check may read this cell's records
        records = records_text(run.records)
        parts.shared_cells().share(audit, run, records)
        sent = message.to_text(records)
    return CellDone(spec.id, sent, tuple(cell_failures(parts, spec, run)))


# -- a pool's process: the plan built once, its cells run on demand ---------------------------------

_WORKER: tuple[RunParts, str] | None = None


def _start_worker(raw: RawOptions, session_id: str, cache_root: Path) -> None:
    global _WORKER
    freeze_long_lived("imports")
    plan = build_plan(raw, default_registries(), session_id, cache_root, lambda _line: None)
    _WORKER = (RunParts(plan, lambda _line: None), f"pool-{multiprocessing.current_process().pid}")


def _run_in_worker(cell_ids: Sequence[str]) -> list[CellDone]:
    assert _WORKER is not None, "the pool's initializer builds the plan"
    parts, process = _WORKER
    by_id = {c.id: c for c in parts.plan.cells}
    done: list[CellDone] = []
    for cell_id in cell_ids:
        done.append(run_one(parts, by_id[cell_id], process, share=True))
        if done[-1].stopped is not None:
            break
    return done


def pool_tasks(session: RunSession) -> list[list[str]]:
    """The cells in tasks: those that share the importance scorer together, every other cell alone."""
    plan = session.plan
    scored = [c.id for c in plan.cells if plan.registries.policies[c.policy].needs_importance]
    rest = [[c.id] for c in plan.cells if c.id not in scored]
    return ([scored] if scored else []) + rest


def run_grid(
    session: RunSession, raw: RawOptions, cache_root: Path, workers: int, said: Callable[[CellDone], None]
) -> int:
    """Run the plan's grid, each cell's message to the session; the items' exit status (0, or 1 when a
    cell failed or stopped the run). ``said`` is told each cell as it ends."""
    status = 0
    if workers <= 1:
        for spec in session.plan.cells:
            done = run_one(session.parts, spec, "main", share=False)
            status = max(status, _received(session, done, said))
            if done.stopped is not None:
                break
        return status
    prepare_data(session.parts, workers)
    session.parts.release_dataset()
    context = multiprocessing.get_context("spawn")  # no fork of a process holding threads (the report's, numba's)
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start_worker, initargs=(raw, session.plan.session_id, cache_root)
    ) as pool:
        futures = [pool.submit(_run_in_worker, task) for task in pool_tasks(session)]
        for future in futures:
            for done in future.result():
                status = max(status, _received(session, done, said))
                if done.stopped is not None:
                    for other in futures:
                        other.cancel()
                    return status
    return status


def _received(session: RunSession, done: CellDone, said: Callable[[CellDone], None]) -> int:
    session.receive(ItemMessage.of(done.message), done.spec_id)
    said(done)
    return FAILED if done.failures or done.stopped is not None else 0


class PlainTerminal:
    """A terminal without pytest: lines and ``=== title ===`` separators on stdout, markup dropped.

    It is both what the run's checks write to (a :class:`~pytest_restore.run.quality.Console`) and what the
    terminal summary writes to (``write_sep``, ``write_line``, as pytest's terminal reporter).
    """

    def __init__(self, width: int | None = None) -> None:
        self.width = width or shutil.get_terminal_size().columns

    def line(self, s: str = "", **markup: bool) -> None:
        """One line."""
        print(s, flush=True)

    def sep(self, sepchar: str, title: str | None = None, fullwidth: int | None = None, **markup: bool) -> None:
        """A separator line with a title in its middle, as pytest draws one."""
        width = fullwidth or self.width
        if title is None:
            print(sepchar * (width // len(sepchar)), flush=True)
            return
        fill = max((width - len(title) - 2) // (2 * len(sepchar)), 1)
        text = f"{sepchar * fill} {title} {sepchar * fill}"
        if len(text) + len(sepchar.rstrip()) <= width:
            text += sepchar.rstrip()
        print(text, flush=True)

    def write_line(self, line: str, **markup: bool) -> None:
        """One line (the terminal reporter's name)."""
        self.line(line)

    def write_sep(self, sep: str, title: str | None = None, **markup: bool) -> None:
        """A separator (the terminal reporter's name)."""
        self.sep(sep, title)


def say(line: str) -> None:
    """A run's progress line, as the plugin says it."""
    print(f"restore: {line}", flush=True)


def run_audit(
    raw: RawOptions, workers: int | None, terminal: PlainTerminal, cache_root: Path
) -> tuple[RunSession, int]:
    """The audit ``raw`` asks for, with no pytest session: its session (its outcome) and its exit status.

    ``workers`` processes run the grid (``None``: one per CPU, or this process alone for small data, as
    ``pytest -n auto`` does).

    A bad option value is a :class:`~pytest_restore.run.settings.SettingsError` (the caller's usage error,
    as pytest's); the run stopped before its grid says its line and ends with its status.
    """
    thaw_earlier_runs()  # an audit this process ran before (a notebook) lets go of what it froze
    freeze_long_lived("imports")
    plan = build_plan(raw, default_registries(), uuid.uuid4().hex, cache_root, say)
    check_before_work(plan)
    session = RunSession(plan, say, lambda: terminal)
    if workers is None:
        workers = os.cpu_count() or 1
        if small_data(plan.settings.data, plan.settings.embedded_questions):
            say("--workers auto: this small audit runs in one process (a pool's processes would take longer to start)")
            workers = 1
    status = 0
    try:
        session.before_grid()
    except RunStopped as stop:
        if not stop.said:
            terminal.line(f"restore: run stopped before the grid: {stop}", red=True, bold=True)
        session.finish(None)
        return session, stop.code
    if not plan.settings.dry_run:

        def said(done: CellDone) -> None:
            for line in ([done.stopped] if done.stopped is not None else list(done.failures)):
                terminal.line(f"FAILED {done.spec_id}: {line}", red=True)

        status = run_grid(session, raw, cache_root, workers, said)
    total, ran = len(plan.cells), len(session.grid.ran)
    cut = f"{total - ran} of {total} selected grid items did not run" if ran < total and not plan.settings.dry_run else None
    session.finish(session.partial(cut))
    return session, session.exit_status(status)
