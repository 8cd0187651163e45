"""The run's report: what it is made from, written whole into place or partial beside it, on a thread.

A report is written into a fresh directory and swapped in as a whole
(:func:`write_in_place`), so a complete report is never replaced by a partial
one: a run cut short writes beside the report directory
(:func:`~pytest_restore.run.staging.partial_dir`). The writing runs on a
thread (:class:`Background`), while xdist shuts its workers down;
:func:`await_report` waits for it, Ctrl-C included.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from pytest_restore import __version__
from pytest_restore.exits import INTERRUPTED
from pytest_restore.models.fake import simulated_models
from pytest_restore.models.providers import price_of
from pytest_restore.record import Record, ranker_of
from pytest_restore.report.inputs import (
    CheckResult,
    Provenance,
    RunInfo,
    RunSettings,
    data_description,
)
from pytest_restore.report.writer import ReportFiles, write_report
from pytest_restore.run.calls import ModelCalls
from pytest_restore.run.grid import CellSpec
from pytest_restore.run.page import page_maker
from pytest_restore.run.parts import DataMeta
from pytest_restore.run.plan import Plan
from pytest_restore.run.staging import partial_dir, staging_dir, swap_into_place
from pytest_restore.timeline import phase

if TYPE_CHECKING:  # the loaders are imported where a file is read
    from pytest_restore.data.loaders import DatasetRegistry
from pytest_restore.settings import AuditSettings


def partial_report_line(partial_path: Path, report_dir: str, why: str | None = None) -> str:
    """What a partial session tells the user: where its partial report is, and that the whole one was kept."""
    return f"partial report ({why or 'interrupted'}): {partial_path}; {report_dir} was left as it was"


def simulated_roles(records: Sequence[Record]) -> list[tuple[str, str]]:
    """The fake models that took part, as (role, name): the figures then check the pipeline, not a model."""
    return list(simulated_models(records))


def run_info(
    plan: Plan,
    records: Sequence[Record],
    run_meta: DataMeta,
    checks: Mapping[str, CheckResult],
    model_calls: ModelCalls,
) -> RunInfo:
    """Settings, dataset, exclusions and the run's checks for the report.

    The settings show what ran (the plan's policies and budgets the records
    hold), not what was configured; ``checks`` are the results of the run's
    checks outside the grid (``run/checks.py``); the hypothesis families are
    the plan's. Each reader's and the judge's price (USD per million tokens
    in and out: ``--restore-price``, else the provider's declaration;
    ``None``: unknown), and the importance scorer's and the writer's when a
    policy called them, and the embedder's when a memory library embedded
    through the run's gateway (its embedding price in, nothing out), go in
    ``model_prices`` for the cost per question.
    """
    settings, providers = plan.settings, plan.registries.providers
    shown = settings.to_json()  # the declared settings only: none of the run's own (where the report goes)
    shown["data"] = Path(settings.data).name if settings.data else "embedded synthetic"
    ran_policies = {r.policy for r in records}
    ran_budgets = {r.budget for r in records}
    shown["policies"] = [p.name for p in plan.policies if p.name in ran_policies]
    shown["budgets"] = [b for b in settings.budgets if b in ran_budgets]
    # each reader writes (no --restore-writer-model): a report as before the option, without the key
    keys = [key for key in shown if key != "writer" or settings.writer is not None]
    keys += ["run_id", "model_prices"] + (["model_usage"] if model_calls.usage_by_process else [])
    given = {model: (in_price, out_price) for model, in_price, out_price in settings.prices}
    scorer = (settings.scorer,) if any(r.scorer is not None for r in records) else ()  # a policy called it
    writers = tuple(dict.fromkeys(r.writer for r in records if r.writer is not None and r.writer not in settings.readers))
    priced = {
        spec: price_of(spec, given, providers, batch=settings.batch)
        for spec in dict.fromkeys((*settings.readers, settings.judge, *scorer, *writers, *library_embedders(checks)))
    }
    shown_settings = RunSettings(
        audit=AuditSettings.from_json(shown), keys=tuple(keys), run_id=records[0].run_id if records else None,
        model_usage=model_calls.total_usage() if model_calls.usage_by_process else None, model_prices=priced,
    )
    # the declarations of what summary.json's run section holds (tests/test_run.py keeps them whole)
    return RunInfo(
        settings=shown_settings, dataset=data_description(run_meta), exclusions=dict(run_meta.get("exclusions", {})),
        checks=dict(checks), families=plan.families,
    )


def library_embedders(checks: Mapping[str, CheckResult]) -> tuple[str, ...]:
    """The embedders the memory libraries' stores embedded with through the run's gateway (the memory-systems
    check's figures; empty when no library ran)."""
    found = checks.get("memory_systems")
    cells = found.to_json()["cells"] if found is not None else []
    return tuple(dict.fromkeys(e for c in cells for e in str(c["figures"].get("embedder", "")).split(", ") if e))


def grid_cells(records: Sequence[Record], cells: Sequence[CellSpec]) -> dict[str, list[str]]:
    """The grid's cells that ran (records arrived) and those that did not, by item id (rankers included)."""
    ran = {(r.reader, r.policy, r.budget, ranker_of(r)) for r in records}
    any_ranker = {cell[:3] for cell in ran}
    out: dict[str, list[str]] = {"ran": [], "not_run": []}
    for cell in cells:
        # a record's reader is the model's name; a cell of --restore-rankers is its ranker's only
        where = (cell.reader, cell.policy, cell.budget)
        done = (*where, cell.ranker) in ran if cell.ranker is not None else where in any_ranker
        out["ran" if done else "not_run"].append(cell.id)
    return out


def part_of_grid(cells: Mapping[str, Sequence[str]]) -> str | None:
    """What a run of part of the grid (``-k``, ``--lf``, a deselection) ran, in words; ``None`` for the whole grid."""
    ran, not_run = cells["ran"], cells["not_run"]
    if not not_run:
        return None
    return f"part of the grid: {len(ran)} of {len(ran) + len(not_run)} cells ran ({', '.join(ran) or 'none'})"


def write_in_place(
    records: list[Record],
    info: RunInfo,
    target: Path,
    partial: str | None,
    calibration_json: str | None,
    started_utc: datetime.datetime,
    session_id: str,
    cancelled: threading.Event | None = None,
    data_file: Path | None = None,
    loaders: DatasetRegistry | None = None,
    prepared: Path | None = None,
    pickled: Sequence[bytes] | None = None,
) -> ReportFiles:
    """Write the report (and the calibration gate's, if any) into a fresh directory beside ``target``, then swap it into place.

    The session's provenance (``started_utc``, ``session_id``, ``partial``: why
    the grid did not finish) goes to the writer with ``info``, so every file is
    written once, whole.

    Once ``cancelled`` is set (Ctrl-C while the report is written), nothing
    is swapped in: the staging directory goes and :class:`ReportCancelled`
    is raised, so ``target`` stays as it was. ``data_file`` is the data the
    run read, for ``report.html``'s texts, read by the run's ``loaders`` (from its
    prepared copy in ``prepared``, where there is one); the page's data is made
    in a fresh process meanwhile where that helps (``run/page.py``), which reads
    the records from ``pickled`` (:meth:`~pytest_restore.run.session.GridMessages.pickled_records`)
    where the workers' pickles hold them all.
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
        with phase("report: written"):
            files = write_report(
                records, dataclasses.replace(info, provenance=provenance), staging, data_file=data_file,
                loaders=loaders, prepared=prepared, page=page_maker(data_file, loaders, prepared, pickled=pickled),
            )
        if calibration_json is not None:
            (staging / "calibration.json").write_text(calibration_json, encoding="utf-8")
        if cancelled is not None and cancelled.is_set():
            raise ReportCancelled(f"{target} was not replaced")
        with phase("report: swap into place"):
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


class HeldCtrlC:
    """Ctrl-C (SIGINT) while the report is written, counted for :func:`await_report` instead of raised.

    The report starts at the first ``pytest_sessionfinish`` and is waited for
    at the last; other plugins' hooks run between (pytest's temporary
    directories, its cache). Raised in one of them, a Ctrl-C would end the
    process with pytest's traceback, the writer's staging directory left
    behind. Held from :meth:`hold` to :meth:`release`, it is only counted,
    and the wait acts on it. Only the main thread can hold it; elsewhere
    Ctrl-C stays a ``KeyboardInterrupt`` (which the wait also takes).
    """

    def __init__(self) -> None:
        self.count = 0
        self._previous: Any = None
        self._held = False

    def hold(self) -> None:
        """Count Ctrl-C from now on rather than raise it (in the main thread only)."""
        if self._held or threading.current_thread() is not threading.main_thread():
            return
        self._previous = signal.signal(signal.SIGINT, self._count)
        self._held = True

    def _count(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1

    def release(self) -> None:
        """Ctrl-C raises again, as it did before :meth:`hold`."""
        if self._held:
            signal.signal(signal.SIGINT, self._previous if self._previous is not None else signal.default_int_handler)
            self._held = False


def await_report(
    report: Background,
    cancelled: threading.Event,
    on_quit: Callable[[], None] | None = None,
    ctrl_c: HeldCtrlC | None = None,
) -> tuple[ReportFiles | None, bool]:
    """The files of the report ``report`` writes (``None`` when it was cut short), and whether Ctrl-C came.

    Ctrl-C (held by ``ctrl_c`` since the report began, or raised while
    waiting) sets ``cancelled`` and the wait goes on, for the writer to stop
    before its swap (or to finish one already under way), so the process
    never ends with the writer in the middle of its work and no report
    directory is left half-replaced. A second Ctrl-C quits the process at
    once (exit 2) after ``on_quit`` (say so, remove the staging directory):
    the writer is not waited for.
    """
    held = ctrl_c if ctrl_c is not None else HeldCtrlC()
    seen = 0
    while True:
        try:
            report.join(0.05)
        except KeyboardInterrupt:  # not held: raised in the wait
            held.count += 1
        if held.count > seen:
            seen = held.count
            if seen >= 2 and report.is_alive():
                _quit_now(on_quit)
            if not cancelled.is_set() and report.is_alive():
                cancelled.set()
                sys.stdout.write(
                    "\nrestore: interrupted: the report writer stops before it replaces anything "
                    "(Ctrl-C again quits at once)\n"
                )
                sys.stdout.flush()
        if not report.is_alive():
            break
    try:
        return report.result(), seen > 0
    except ReportCancelled:
        return None, True


def _quit_now(on_quit: Callable[[], None] | None) -> None:
    """A second Ctrl-C: quit now, exit 2.

    The writer may be deep in the bootstrap's native (BLAS) code; an
    interpreter exit would wait on it (or on BLAS's own threads) for as long
    as it takes. The earlier report was never touched; only this process's
    staging goes (``on_quit``).
    """
    if on_quit is not None:
        on_quit()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(INTERRUPTED)
