"""The audit session: the plugin's state and hooks for one pytest process (controller or worker).

``activate`` parses the options into a :class:`RestoreSettings`
(``plugin/settings.py``) and registers a :class:`RestoreSession`, which does
the work: it parametrizes the grid (one item per policy x budget, each item's
cell in ``plugin/cells.py``), builds the data, models and audits once per
process, gathers the records every item attaches to its report (from xdist
workers too), counts the model calls (``plugin/calls.py``) and, on the
controller only, writes the report once at the end of the session
(``plugin/finish.py``).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import sys
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from pytest_restore.audit.calibration import calibrate
from pytest_restore.audit.judge_audit import audit_judge
from pytest_restore.audit.run import Audit, AuditConfig, count_tokens_ahead
from pytest_restore.data.dataset import DataError, Dataset, is_prepared, load_dataset
from pytest_restore.data.dataset import auditable as data_auditable
from pytest_restore.data.units import Granularity
from pytest_restore.memory.eviction import Policy, PolicyRegistry, default_registry
from pytest_restore.memory.kernels import cached_on_disk as kernels_cached_on_disk
from pytest_restore.memory.retrieval import RankerRegistry, default_rankers
from pytest_restore.models.base import ChatModel
from pytest_restore.models.fake import FakeReader
from pytest_restore.models.providers import (
    ProviderRegistry,
    close_model,
    default_providers,
    is_real,
    make_model,
    missing_key_problem,
)
from pytest_restore.plugin.calls import (
    ModelCalls,
    call_detail,
    dry_run,
    failed_count,
)
from pytest_restore.plugin.cells import META_PROPERTY, USAGE_PROPERTY, CellSpec, SharedCells, grid
from pytest_restore.plugin.finish import (
    Background,
    ReportWaiter,
    await_report,
    grid_cells,
    interrupted,
    partial_dir,
    partial_report_line,
    preload_figure,
    run_info,
    terminal_summary,
    write_in_place,
    write_partial,
)
from pytest_restore.plugin.options import RECORDS_PROPERTY, RUN_KEY, SESSION_KEY, small_data
from pytest_restore.plugin.settings import RestoreSettings, report_dir_problem
from pytest_restore.record import Record
from pytest_restore.stats.families import Family, default_families

#: Said when numba has not compiled the kernels yet (measured: ~9 s of a cold build on 2 busy cores).
COMPILING = "compiling the numba kernels (once after an install or upgrade: about 10 s on 2 cores) ..."


class RestoreSession:
    """The plugin's state for one pytest process (controller or worker)."""

    def __init__(self, config: pytest.Config, settings: RestoreSettings, providers: ProviderRegistry) -> None:
        self.config = config
        self.settings = settings
        self.providers = providers
        self.registry: PolicyRegistry = default_registry()
        config.hook.pytest_restore_register_policies(registry=self.registry, config=config)
        names = settings.policies or tuple(self.registry)
        unknown = [n for n in names if n not in self.registry]
        if unknown:
            raise pytest.UsageError(
                f"--restore-policies: unknown policy {unknown[0]!r}; registered: {', '.join(self.registry)}"
            )
        self.policies: tuple[Policy, ...] = tuple(self.registry[n] for n in names)
        families = default_families()
        config.hook.pytest_restore_register_families(registry=families, config=config)
        #: The hypothesis families the statistics pass runs, built-ins first.
        self.families: tuple[Family, ...] = tuple(families.values())
        self.rankers: RankerRegistry = default_rankers()
        config.hook.pytest_restore_register_rankers(registry=self.rankers, config=config)
        if settings.ranker not in self.rankers:
            raise pytest.UsageError(
                f"--restore-ranker: unknown ranker {settings.ranker!r}; registered: {', '.join(self.rankers)}"
            )
        #: The grid: every selected policy at every budget, under each reader.
        self.cells: list[CellSpec] = grid(settings, self.policies)
        self._audits: dict[str, Audit] = {}
        self._preload: threading.Thread | None = None  # the controller's early import of the figure module
        self._prepared = False  # the xdist controller prepared the data (``prepare``)
        self._report: Background | None = None  # the report being written
        self._cancel_report = threading.Event()  # set by Ctrl-C while it is written: nothing is swapped in
        self._models: dict[tuple[str, str], ChatModel] = {}
        #: Real model calls of every process: usage, failures by cause, concurrency reached.
        self.model_calls = ModelCalls()
        self.checks: dict[str, Any] = {}
        self._dataset: Dataset | None = None
        self.records: list[Record] = []
        self.run_meta: dict[str, Any] = {}
        self.report_path: Path | None = None
        self.failures: list[str] = []
        self.dry_run_lines: list[str] = []
        self.untestable: list[str] = []
        #: The grid items pytest selected (node ids; ``None`` until collection is known).
        self.selected: set[str] | None = None
        #: The items whose cell ran (their records arrived).
        self.ran: set[str] = set()
        self.calibration_json: str | None = None
        #: Lines said once at the end: the failed model calls by cause, per model.
        self.failure_summary: list[str] = []
        #: Where a partial report went (the complete one, if any, was left as it was).
        self.partial_path: Path | None = None
        self.started_utc = datetime.datetime.now(datetime.timezone.utc)
        self.is_controller = not hasattr(config, "workerinput")
        worker_input: dict[str, Any] = getattr(config, "workerinput", {})
        self.run_id: str = str(worker_input.get("restore_run") or config.stash.get(RUN_KEY, "") or uuid.uuid4().hex)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """On the controller, before any worker starts: the dry run."""
        if not self.is_controller:
            return
        if self.settings.dry_run:
            # Counted now, before xdist starts its workers; printed as the run's summary.
            # No item runs (see pytest_collection_modifyitems) and the run exits 0.
            problem = missing_key_problem(self.settings.all_models(), self.settings.base_url)
            self.dry_run_lines = ([f"warning: {problem}"] if problem else []) + dry_run(
                self.settings,
                self.audit,
                self.policies,
                self.registry,
                self.providers,
                self.settings.model_options(self.cache_root()).cache_dir,
            )
            return
        s = self.settings
        if s.calibration == "on" or (s.calibration == "auto" and s.uses_real_models):
            self.calibrate()
        if self.config.pluginmanager.has_plugin("dsession"):
            # The controller idles while xdist workers run the grid: load the figure's
            # plotting library now rather than when the report is due.
            self._preload = threading.Thread(target=preload_figure, name="pytest-restore-preload", daemon=True)
            self._preload.start()

    def calibrate(self) -> None:
        """The calibration gate (docs/PROTOCOL.md section 9): stop the run before the grid when it fails."""
        s = self.settings
        fresh_judge = make_model(s.judge, "judge", self.settings.model_options(self.cache_root()), use_cache=False, providers=self.providers)
        try:
            result = calibrate(self.audit(), fresh_judge=fresh_judge, seed=s.subset_seed)
        finally:
            close_model(fresh_judge)
        self.checks["calibration"] = {"result": result.to_dict(), "markdown": result.render_markdown()}
        # written with the report (into the new report directory, never beside an old one)
        self.calibration_json = result.to_json()
        self.model_calls.side_calls[f"judge {s.judge} (calibration repeats)"] = call_detail(fresh_judge)
        writer = self.config.get_terminal_writer()
        fatal = self.fatal_error()
        if fatal is not None:
            pytest.exit(fatal, returncode=pytest.ExitCode.TESTS_FAILED)
        failed = self.model_calls.summarise_failures({"main": self.call_details()})
        reasons = list(result.reasons)
        if failed:
            writer.sep("=", "model calls failed during the calibration gate", red=True, bold=True)
            for line in failed:
                writer.line(line, red=True)
            reasons.append(f"{sum(failed_count(d) for d in self.model_calls.all_details().values())} model calls failed")
        if reasons:
            where = write_partial(self.calibration_json, self.settings.report_dir)
            writer.sep("=", "calibration gate failed", red=True, bold=True)
            for reason in reasons:
                writer.line(reason, red=True)
            if where is not None:
                writer.line(f"partial report (calibration only): {where}")
            pytest.exit("calibration gate failed: " + "; ".join(reasons), returncode=pytest.ExitCode.TESTS_FAILED)
        writer.line(
            f"calibration gate passed: judge self-consistency {result.judge_consistency:.2f}, "
            f"oracle-answerable {result.oracle_answerable_rate:.2f}, "
            f"negative restore gain {result.negative_gain_rate:.2f}"
        )

    def judge_audit(self) -> None:
        """Re-grade a stratified sample of recorded answers with the second judge."""
        s = self.settings
        assert s.audit_judge is not None
        judge = make_model(s.audit_judge, "judge", self.settings.model_options(self.cache_root()), providers=self.providers)
        try:
            questions = {q.question_id: q for q in self.dataset().questions}
            result = audit_judge(
                self.records, questions, judge, self.settings.prompt_set(), sample=s.audit_judge_sample, seed=s.subset_seed
            )
        finally:
            close_model(judge)
        self.model_calls.side_calls[f"judge {s.audit_judge} (judge audit)"] = call_detail(judge)
        self.checks["judge_audit"] = {"result": result.to_dict(), "markdown": result.render_markdown()}

    # -- failed model calls ------------------------------------------------------------

    def fatal_error(self) -> str | None:
        """The first authentication or unknown-model error of this process's models, in one line."""
        for (spec, role), model in self._models.items():
            fatal = getattr(model, "fatal_error", None)
            if fatal:
                return f"{role} {spec}: {fatal}"
        return None

    def call_details(self) -> dict[str, Any]:
        """Per real model of this process: failed calls by cause, the concurrency reached, the decoding sent."""
        return {
            f"{role} {spec}": call_detail(model)
            for (spec, role), model in sorted(self._models.items())
            if is_real(spec)
        }

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """A dry run deselects every item: it only counts what the grid would ask."""
        if self.settings.dry_run and items:
            config.hook.pytest_deselected(items=list(items))
            items[:] = []

    # -- cells shared by xdist workers -------------------------------------------

    def shared_cells(self) -> SharedCells:
        """Where this run's workers leave their cells' records for each other."""
        return SharedCells(self.cache_root() / "cells" / self.run_id)

    def grid_records(self) -> list[Record]:
        """Every record of the session's grid, each cell reused when this run already has it."""
        records: list[Record] = []
        shared = self.shared_cells()
        for spec in self.cells:
            audit = self.audit(spec.reader)
            records += shared.records(audit, self.registry[spec.policy], spec.budget)
        return records

    def close(self) -> None:
        """Release every model of this process."""
        for model in self._models.values():
            close_model(model)
        self._models.clear()

    def join_preload(self) -> None:
        """Wait for the figure module's early import: never leave an import running into shutdown."""
        if self._preload is not None:
            self._preload.join()
            self._preload = None

    # -- the grid ---------------------------------------------------------------

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize any test that asks for ``restore_cell`` with the grid."""
        if "restore_cell" in metafunc.fixturenames:
            cells = self.cells
            metafunc.parametrize("restore_cell", cells, ids=[c.id for c in cells], indirect=True)

    # -- data and the audit, built once per process -----------------------------

    def data_path(self) -> Path:
        """The dataset to audit: ``--restore-data`` or the embedded default."""
        if self.settings.data:
            return Path(self.settings.data)
        from pytest_restore.synthetic.embedded import embedded_dataset, embedded_path

        questions = self.settings.embedded_questions
        if not embedded_path(self.cache_root(), questions=questions).exists():
            self.say(f"generating the embedded synthetic dataset ({questions} questions; first run only) ...")
        return embedded_dataset(self.cache_root(), questions=questions)

    def release_dataset(self) -> None:
        """On an xdist controller once the workers are starting: drop the parsed dataset.

        The controller parses the file only to stop a malformed one before any
        worker starts (and to leave the prepared cache the workers load); the
        workers do the audit, so the controller need not hold the parsed file
        through the run. What needs it later (the judge audit) loads it again
        from the prepared cache. A controller that built an audit (the
        calibration gate) keeps it.
        """
        dsession = self.config.pluginmanager.has_plugin("dsession")
        if self.is_controller and dsession and not self._audits and self._dataset is not None:
            self._dataset = None

    def dataset(self) -> Dataset:
        """The validated dataset (a malformed file ends the run with one line)."""
        if self._dataset is None:
            path = self.data_path()
            if not is_prepared(path, self.cache_root() / "prepared"):
                self.say(f"reading and validating {path.name} (first run of this file) ...")
            try:
                self._dataset = load_dataset(path, cache_dir=self.cache_root() / "prepared")
            except DataError as err:
                raise pytest.UsageError(str(err)) from None
        return self._dataset

    def cache_root(self) -> Path:
        """The project's cache directory for pytest-restore."""
        cache = getattr(self.config, "cache", None)  # absent under -p no:cacheprovider
        if cache is not None:
            return Path(cache.mkdir("restore"))
        return Path(self.config.rootpath) / ".pytest_cache" / "d" / "restore"

    def model(self, spec: str, role: str) -> ChatModel:
        """One model object per name and role in this process (shared by the readers' audits)."""
        key = (spec, role)
        if key not in self._models:
            self._models[key] = make_model(spec, role, self.settings.model_options(self.cache_root()), providers=self.providers)
        return self._models[key]

    def audit_config(self) -> AuditConfig:
        """The settings of this session's audits."""
        s = self.settings
        return AuditConfig(
            granularity=Granularity(s.granularity),
            budgets=s.budgets,
            seeds=s.seeds,
            questions=s.questions,
            subset_seed=s.subset_seed,
            ablations=s.ablations,
            cache_dir=str(self.cache_root() / "prepared"),
            run_id=s.fingerprint([p.name for p in self.policies], self.dataset().sha256),
        )

    def audit(self, reader: str | None = None) -> Audit:
        """The audit of this process under a reader (the primary one by default), built on first use."""
        spec = reader or self.settings.reader
        if spec not in self._audits:
            s = self.settings
            config = self.audit_config()
            reader_model = self.model(spec, "reader")
            dataset = self.dataset()
            where = "" if self.is_controller else f" (xdist worker {self.config.workerinput['workerid']})"  # type: ignore[attr-defined]
            if not kernels_cached_on_disk():
                self.say(COMPILING)
            self.say(f"preparing {len(dataset.questions)} histories (memory units, token counts, lexical index){where} ...")
            audit = Audit(
                dataset,
                config,
                reader=reader_model,
                judge=self.model(s.judge, "judge"),
                scorer=self.model(s.scorer, "scorer"),
                prompts=self.settings.prompt_set(),
                ranker=self.rankers[s.ranker],
            )
            if isinstance(reader_model, FakeReader):
                reader_model.learn(p.history for p in audit.questions)
            self._audits[spec] = audit
        return self._audits[spec]

    def say(self, message: str) -> None:
        """One plain ``restore: ...`` progress line on the terminal (and in CI logs), at once.

        An xdist worker's output is not shown: the controller says what the
        workers do (see ``prepare``).
        """
        if not self.is_controller:
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        # inside an item's call the output is captured: said past the capture, as live logging is
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            if reporter is not None:
                reporter.ensure_newline()
                reporter.write_line(f"restore: {message}", flush=True)
            else:  # at configure time: no terminal reporter yet
                sys.stdout.write(f"restore: {message}\n")
                sys.stdout.flush()

    def prepare(self) -> None:
        """On an xdist controller before the workers run items: generate and validate the data once.

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
            ready = f"{len(self.dataset().questions)} questions ready"
        else:
            ready = f"{Path(self.settings.data).name} validated"  # at configure time
        # the token counts are the same for every worker: counted here, once, into the prepared
        # cache that each worker then reads; the workers wait for their first items meanwhile, so
        # the counting is shared out over as many processes as there are workers
        self.say(ready)
        workers = max(1, min(int(getattr(self.config.option, "numprocesses", 1) or 1), os.cpu_count() or 1))
        counting = f"counting the o200k tokens of {{:,}} distinct texts once, for every xdist worker (in up to {workers} processes) ...".format
        if count_tokens_ahead(self.dataset(), self.audit_config(), lambda n: self.say(counting(n)), workers):
            self.say("token counts ready in the prepared cache")
        if not kernels_cached_on_disk():
            self.say(f"the xdist workers start by {COMPILING}")
        self.say("the xdist workers prepare their histories ...")
        if self._preload is None:  # started here when the session began at the workers' collection
            self._preload = threading.Thread(target=preload_figure, name="pytest-restore-preload", daemon=True)
            self._preload.start()
        self.release_dataset()

    def usage(self) -> dict[str, Any]:
        """This process's cumulative use of each real model, by role and name."""
        seen: dict[str, Any] = {}
        for audit in self._audits.values():
            for role, memo in (("reader", audit.reader), ("judge", audit.judge), ("scorer", audit.scorer)):
                if is_real(memo.name, self.providers):
                    seen[f"{role} {memo.name}"] = memo.usage.to_json()
        return seen

    def meta(self) -> dict[str, Any]:
        """What the controller needs to know about the data, from the process that loaded it."""
        ds = self.dataset()
        audit = self.audit()
        return {
            "sha256": ds.sha256,
            "official": ds.is_official,
            "path": str(ds.path),
            "questions": len(ds.questions),
            "audited": len(audit.questions),
            "exclusions": audit.exclusion_counts(),
        }

    # -- gathering records --------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect the records of every item (xdist forwards worker reports here).

        On the controller the records are then taken off the report, before
        other plugins see it: ``--junitxml`` would otherwise write every record
        into the XML as a property. (A worker leaves them on: xdist still has to
        send them.)
        """
        if not self.is_controller:
            return
        ours = (RECORDS_PROPERTY, META_PROPERTY, USAGE_PROPERTY)
        properties = list(report.user_properties)
        # every phase's report carries the item's properties (junitxml reads the teardown's)
        report.user_properties = [(n, v) for n, v in properties if n not in ours]
        if report.when != "call":
            return
        for name, value in properties:
            if name == RECORDS_PROPERTY:
                self.ran.add(report.nodeid)
                # records cross xdist as JSON: they become Records again here
                received = json.loads(value) if isinstance(value, str) else value
                self.records.extend(Record.of(r) for r in cast("list[Mapping[str, Any]]", received))
            elif name == META_PROPERTY:
                self.run_meta = dict(cast("dict[str, Any]", value))
            elif name == USAGE_PROPERTY:
                usage = cast("dict[str, Any]", value)
                # cumulative per process: the latest report of each process wins
                self.model_calls.usage_by_process[str(usage["process"])] = dict(usage["models"])
                self.model_calls.calls_by_process[str(usage["process"])] = dict(usage.get("calls", {}))

    # -- which grid items were selected -----------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The grid items selected in this process (after -k, --lf, deselection)."""
        if self.is_controller:
            self.selected = {
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
        first = self.selected is None
        cells = {c.id for c in self.cells}
        self.selected = {i for i in ids if i.endswith("]") and i.rsplit("[", 1)[-1][:-1] in cells}
        if first and self.selected and not self.settings.dry_run:
            self.prepare()

    def small_grid(self) -> bool:
        """Whether the grid is small enough that one xdist worker finishes it before two would."""
        return small_data(self.settings.data, self.settings.embedded_questions)

    # First: every record is in once the run loop ends. The report is written on
    # a thread while xdist shuts its workers down, and ``finish_report`` (last)
    # waits for it.
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Judge the model calls, then start writing the report (whole, or partial beside it)."""
        if not self.is_controller:
            return
        shutil.rmtree(self.shared_cells().root, ignore_errors=True)
        if self.model_calls.usage_by_process or self.model_calls.side_calls:
            self.failure_summary = self.model_calls.summarise_failures()
            reason = self.model_calls.failed_run_reason(self.records)
            if reason is not None:
                self.failures.append(reason)
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if not self.records:
            return
        why_partial = interrupted(session, self.selected, self.ran)
        if self.settings.audit_judge and why_partial is None:
            self.judge_audit()
        target = Path(self.settings.report_dir)
        if why_partial is not None:
            target = partial_dir(target)
            self.partial_path = target
        self._report = Background(
            write_in_place,
            self.records,
            run_info(
                self.settings,
                self.policies,
                self.records,
                self.run_meta,
                self.checks,
                self.model_calls,
                grid_cells(self.records, self.cells),
                self.families,
            ),
            target,
            why_partial,
            self.calibration_json,
            self.started_utc,
            self.run_id,
            self._cancel_report,
        )


    def finish_report(self, session: pytest.Session) -> None:
        """Wait for the report (its errors are raised here) and apply its verdict."""
        if self.is_controller and self.settings.dry_run and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            # Nothing was meant to run. Last, because syrupy's sessionfinish ORs the
            # status the hook was called with back in.
            session.exitstatus = pytest.ExitCode.OK
        if self._report is None:
            return
        files, cut = await_report(self._report, self._cancel_report)
        self._report = None
        if cut:
            session.exitstatus = pytest.ExitCode.INTERRUPTED
        if files is None:  # the terminal summary says so (report_path stays None)
            self.partial_path = None  # none was written either
            return
        self.report_path = files.out_dir
        if session.exitstatus == pytest.ExitCode.INTERNAL_ERROR and self.partial_path is not None:
            # pytest prints no terminal summary after an internal error: say here where the report went
            self.say(partial_report_line(self.partial_path, self.settings.report_dir))
        self.failures += list(files.failures)
        self.untestable = list(files.untestable)
        if files.failures and self.settings.family_checks == "fail":
            # a family's expectation failed after Holm: the session fails, with no traceback
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """A short table of regime (b), where the report is, and what failed (the dry run: its table)."""
        if not self.is_controller:
            return
        terminal_summary(
            terminalreporter,
            self.settings,
            dry_run_lines=self.dry_run_lines,
            failure_summary=self.failure_summary,
            records=self.records,
            failures=self.failures,
            untestable=self.untestable,
            run_meta=self.run_meta,
            report_path=self.report_path,
            partial_path=self.partial_path,
            not_run=grid_cells(self.records, self.cells)["not_run"],
        )


def activate(config: pytest.Config) -> RestoreSession:
    """Parse the options and register the session object (once the run is an audit)."""
    providers = default_providers()
    config.hook.pytest_restore_register_providers(registry=providers, config=config)
    settings = RestoreSettings.from_config(config, providers)
    session = RestoreSession(config, settings, providers)
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "restore-session")
    config.pluginmanager.register(ReportWaiter(session.finish_report), "restore-report-waiter")
    config.add_cleanup(session.join_preload)
    if session.is_controller:
        # Known before any model call rather than after the grid. A run that names data
        # or real models is an audit: stop it now. Otherwise (this plugin loads in every
        # pytest run) only the grid's items fail, so unrelated test suites are untouched.
        problem = report_dir_problem(settings.report_dir)
        if problem and (settings.data or settings.uses_real_models):
            raise pytest.UsageError(problem)
        if settings.prompts:
            settings.prompt_set()  # each template is test-formatted: a bad placeholder stops the run here
        problem = missing_key_problem(settings.all_models(), settings.base_url)
        if problem and not settings.dry_run:  # a dry run costs nothing: it says so and goes on
            raise pytest.UsageError(problem)
    if session.is_controller and settings.data:
        dataset = session.dataset()  # a malformed file stops the run here, before any model call
        abstention, no_gold, auditable = data_auditable(dataset, settings.granularity)
        if not auditable:
            raise pytest.UsageError(
                f"{dataset.path}: no question to audit: {len(dataset.questions)} questions, "
                f"{abstention} abstention, {no_gold} without gold evidence at {settings.granularity} granularity"
            )
    return session


__all__: Sequence[str] = ("RestoreSession", "activate")
