"""A run's plan: what it audits, built once with every default resolved, the same in every process.

:func:`build_plan` turns a run's options (:class:`~pytest_restore.run.options.RawOptions`)
and its registries into a :class:`Plan`: the settings (the budgets resolved
from the data's loader when none are named), the selected policies and
hypothesis families, the grid's cells, where the data comes from, the
session's id and its cache directory. Nothing in a plan changes after it is
built; what a process makes over it (the loaded data, models, audits) is
:class:`~pytest_restore.run.parts.RunParts`'s. The plugin builds the plan
from pytest's options and hooks, the command line from its arguments; the
run's phases (``run/``) are functions over it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pytest_restore.data.dataset import Dataset
from pytest_restore.data.dataset import auditable as data_auditable
from pytest_restore.data.errata import ErrataRegistry, default_errata_formats
from pytest_restore.data.fields import DataError
from pytest_restore.data.loaders import (
    DatasetRegistry,
    data_is_prepared,
    default_datasets,
    load_data,
)
from pytest_restore.exits import out_file_problem
from pytest_restore.libraries.registry import LIBRARY_POLICIES, register_libraries
from pytest_restore.memory.eviction import Policy, PolicyRegistry, runs_by_default
from pytest_restore.memory.retrieval import RankerRegistry, default_rankers
from pytest_restore.models.cache import cache_problem
from pytest_restore.models.embeddings import embedder_of
from pytest_restore.models.providers import ProviderRegistry, default_providers, missing_key_problem
from pytest_restore.models.writers import default_policies
from pytest_restore.run.errata import ErrataOption, errata_line
from pytest_restore.run.grid import CellSpec, grid
from pytest_restore.run.options import RawOptions
from pytest_restore.run.settings import RestoreSettings, SettingsError
from pytest_restore.run.staging import report_dir_problem
from pytest_restore.stats.families import Family, FamilyRegistry, default_families
from pytest_restore.timeline import phase

#: One progress line on the terminal (a process whose output is not shown passes one that says nothing).
Say = Callable[[str], None]


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    """The cyclic garbage collector paused while the block builds what the process keeps to its end.

    The parsed data and the prepared histories are millions of containers that
    hold no reference cycles and live as long as the process: each full
    collection while they are built walks all of them again and frees nothing
    (on the 500-question file a worker's seven full collections were a quarter
    of its preparation's CPU). Reference counting still frees what the block
    drops; the collector runs again after it, as it was (a caller that had
    turned it off keeps it off).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


#: The points of this process's start whose objects were frozen already (:func:`freeze_long_lived`).
_FROZEN: set[str] = set()


def thaw_earlier_runs() -> None:
    """Let the collector have what earlier runs in this process froze; :func:`~pytest_restore.run.local.run_audit`
    calls it as a run begins.

    What :func:`freeze_long_lived` froze is never collected while it stays
    frozen: a cycle among an earlier run's records, memos or audit would live
    to the process's end. A process that runs one audit (a grid's worker, a
    pool's process, ``python -m pytest_restore run``) never gets here twice;
    one that calls the run core again (a notebook) collects the earlier runs'
    garbage once, here, and the new run freezes its own points again.
    """
    if _FROZEN:
        _FROZEN.clear()
        gc.unfreeze()
        gc.collect()


def freeze_long_lived(point: str) -> None:
    """Take what the process holds at ``point`` out of the collector's full passes, once per point and run.

    A run's process holds, before its first cell, objects that live to its
    end and that every full collection walked again, freeing nothing: its
    imports (numpy, the models, the report; ``"imports"``), then numba's
    front end and the prepared histories (``"prepared"``); the parsed data
    (``"data"``: the controller's walked it while it counted and profiled), each cell's records and
    what the audit keeps of the cell, its memos (``"cell ID"``), and the records of each grid message
    the session keeps to its report (``"records ITEM"``). Frozen
    (``gc.freeze``), they are skipped: a tiny grid's xdist worker spent
    0.14 s of CPU collecting instead of 0.37 s (its three full collections
    0.03 s instead of 0.21 s), and its exit (the last collection) took no
    measurable time instead of 0.18 s. The youngest generation is
    collected first: after :func:`long_lived` it holds everything the block
    made, which the collector was about to walk once anyway, so the cycles
    the block dropped are freed rather than frozen. Once per point: a process
    that runs several audits (a notebook) keeps an earlier run's frozen
    objects until the run core's next run begins and thaws them
    (:func:`thaw_earlier_runs`); pytest sessions run in one process
    (pytester's) keep theirs.
    """
    if point in _FROZEN:
        return
    _FROZEN.add(point)
    gc.collect(0)
    gc.freeze()


@dataclass(frozen=True)
class Registries:
    """Everything a run looks up by name: policies, rankers, dataset loaders, errata formats, hypothesis
    families, model providers.

    :func:`default_registries` holds the built-ins and the entry points; the
    plugin's ``pytest_restore_register_*`` hooks add a user's before the plan is built.
    """

    policies: PolicyRegistry
    rankers: RankerRegistry
    datasets: DatasetRegistry
    families: FamilyRegistry
    providers: ProviderRegistry
    errata: ErrataRegistry


def default_registries() -> Registries:
    """The built-in policies, rankers, loaders, errata formats, families and providers, and installed packages' entry points."""
    policies, rankers = default_policies(), default_rankers()
    register_libraries(policies, rankers)  # lazily: a library is imported when a run names it
    return Registries(
        policies, rankers, default_datasets(), default_families(), default_providers(), default_errata_formats(),
    )


class DataSource:
    """Where a run's data comes from: ``--restore-data`` read by its loader, or the embedded default generated.

    The data is read (validated, prepared for other processes) on first use
    and kept until :meth:`release`; a malformed file is a one-line
    :class:`SettingsError`.
    """

    def __init__(
        self, data: str | None, loader: str | None, embedded_questions: int, loaders: DatasetRegistry,
        cache_root: Path, say: Say, errata: ErrataOption | None = None,
    ) -> None:
        self.data = data
        #: ``--restore-errata``: corrections applied as the data loads (``None``: none)
        self.errata = errata
        #: ``--restore-dataset``: the loader forced (``None``: picked by the file's shape)
        self.loader = loader
        self.embedded_questions = embedded_questions
        self.loaders = loaders
        self.cache_root = cache_root
        self.say = say
        self._dataset: Dataset | None = None
        self._said_loader = False  # which loader read the file is said once

    def default_budgets(self) -> tuple[int, ...]:
        """The budgets of the data's loader (the embedded default is LongMemEval-S's): read from the data."""
        if self.data is None:
            return self.loaders["longmemeval"].budgets
        return self.dataset().budgets

    def path(self) -> Path:
        """The dataset to audit: ``--restore-data`` or the embedded default (generated on first use)."""
        if self.data:
            return Path(self.data)
        from pytest_restore.synthetic.embedded import embedded_dataset, embedded_path

        questions = self.embedded_questions
        if not embedded_path(self.cache_root, questions=questions).exists():
            self.say(f"generating the embedded synthetic dataset ({questions} questions; first run only) ...")
        return embedded_dataset(self.cache_root, questions=questions)

    def prepared(self) -> Path:
        """Where the validated dataset is prepared for other processes (and the report's texts)."""
        return self.cache_root / "prepared"

    def dataset(self) -> Dataset:
        """The validated dataset (a malformed file is a one-line :class:`SettingsError`)."""
        if self._dataset is None:
            path = self.path()
            prepared = self.prepared()
            if not data_is_prepared(path, prepared, self.loaders, self.loader):
                self.say(f"reading and validating {path.name} (first run of this file) ...")
            try:
                with phase("data loaded"), long_lived():
                    self._dataset = load_data(path, self.loaders, name=self.loader, cache_dir=prepared)
                freeze_long_lived("data")
                if self.errata is not None:
                    self._dataset, self.errata.summary = self.errata.apply(self._dataset)
            except DataError as err:
                raise SettingsError(str(err)) from None
            if self.data and not self._said_loader:
                self._said_loader = True
                self.say(loaded_line(self._dataset, forced=self.loader is not None))
                if self.errata is not None and self.errata.summary is not None:
                    self.say(errata_line(self.errata.summary))
        return self._dataset

    def release(self) -> None:
        """Drop the parsed dataset (what needs it later reads it again, from the prepared copy)."""
        self._dataset = None


@dataclass(frozen=True)
class Plan:
    """What a run audits, every default resolved; built once per process by :func:`build_plan`."""

    settings: RestoreSettings
    registries: Registries
    #: the selected policies, in the registry's order
    policies: tuple[Policy, ...]
    #: the hypothesis families the statistics pass runs, built-ins first
    families: tuple[Family, ...]
    #: the grid: every selected policy at every budget, under each reader (and ranker of ``--restore-rankers``)
    cells: tuple[CellSpec, ...]
    data: DataSource
    #: this session's id: the directory its processes share cells in
    session_id: str
    #: the project's cache directory for pytest-restore (prepared data, responses, shared cells)
    cache_root: Path

    @property
    def cache_dir(self) -> Path:
        """The response cache the run's real models read and write (``--restore-cache``, else under ``cache_root``)."""
        return self.settings.model_options(self.cache_root).cache_dir


def build_plan(
    options: RawOptions, registries: Registries, session_id: str, cache_root: Path, say: Say
) -> Plan:
    """The run's plan: the options parsed, the names they give looked up, the budgets resolved.

    A data file whose budgets the plan needs (``--restore-budgets`` unset) is
    read here, so a malformed file stops the run before any work. Every
    problem is a one-line :class:`SettingsError`.
    """
    sources: list[DataSource] = []

    def data_budgets(data: str | None, loader: str | None, embedded_questions: int) -> tuple[int, ...]:
        sources.append(DataSource(data, loader, embedded_questions, registries.datasets, cache_root, say, errata))
        return sources[-1].default_budgets()

    if options.values.get("dataset") and options.values.get("data"):  # (without data: the settings say so)
        name = options.values["dataset"]
        if name not in registries.datasets:
            raise SettingsError(
                f"{options.source('dataset')}: unknown dataset loader {name!r}; registered: {', '.join(registries.datasets)}"
            )
    errata = ErrataOption.of(options, registries.errata)
    settings = RestoreSettings.parse(options, registries.providers, data_budgets)
    policies = registries.policies
    if settings.policies:
        names = settings.policies
    else:
        # a memory library's policy is a memory system, known without importing the library it adapts
        names = tuple(n for n in policies if n not in LIBRARY_POLICIES and runs_by_default(policies[n]))
        for line in registered_lines(policies, names):
            say(line)
    unknown = [n for n in names if n not in policies]
    if unknown:
        raise SettingsError(
            f"{settings.source('policies')}: unknown policy {unknown[0]!r}; registered: {', '.join(policies)}"
        )
    rankers = registries.rankers
    unknown_ranker = next((n for n in settings.grid_rankers if n not in rankers and embedder_of(n) is None), None)
    if unknown_ranker is not None:
        raise SettingsError(
            f"{settings.source('rankers' if settings.rankers else 'ranker')}: unknown ranker {unknown_ranker!r}; "
            f"registered: {', '.join(rankers)}, or dense:EMBEDDER, hybrid:EMBEDDER"
        )
    problem = settings.batch_export and out_file_problem(settings.batch_export, settings.source("batch-export"))
    if problem:  # before any work, as a report directory that cannot be written is
        raise SettingsError(problem)
    try:  # a memory library's adapter is made here, when named: one line when it is not installed
        selected = tuple(policies[n] for n in names)
        for name in settings.grid_rankers:
            if name in rankers:
                rankers[name]
    except ImportError as err:
        raise SettingsError(f"{settings.source('policies')}: {err}") from None
    data = sources[0] if sources else DataSource(
        settings.data, settings.dataset, settings.embedded_questions, registries.datasets, cache_root, say, errata
    )
    return Plan(
        settings=settings,
        registries=registries,
        policies=selected,
        families=tuple(registries.families.values()),
        cells=tuple(grid(settings, selected)),
        data=data,
        session_id=session_id,
        cache_root=cache_root,
    )


def registered_lines(policies: PolicyRegistry, names: tuple[str, ...]) -> list[str]:
    """What the terminal says when ``--restore-policies`` names none and a policy from outside the package
    (a ``conftest.py``, an installed package) is registered: which join the grid by the one rule
    (:func:`~pytest_restore.memory.eviction.runs_by_default`) and which wait to be named."""
    outside = [
        n for n in policies if n not in LIBRARY_POLICIES and not type(policies[n]).__module__.startswith("pytest_restore.")
    ]
    joined = [n for n in outside if n in names]
    waiting = [n for n in outside if n not in names]
    lines = []
    if joined:
        lines.append(
            f"registered {'policy' if len(joined) == 1 else 'policies'} {', '.join(joined)} "
            f"{'joins' if len(joined) == 1 else 'join'} the grid: every eviction policy runs unless "
            "--restore-policies names the grid's"
        )
    if waiting:
        lines.append(
            f"registered memory {'system' if len(waiting) == 1 else 'systems'} {', '.join(waiting)} "
            f"{'is' if len(waiting) == 1 else 'are'} not in the grid: a memory system runs when --restore-policies "
            "names it"
        )
    return lines


def check_before_work(plan: Plan) -> None:
    """What can be known before any model call, each problem one :class:`SettingsError` line.

    A run that names data or real models is an audit: an unusable report
    directory stops it here (otherwise only the grid's items fail, so an
    unrelated test suite in the same session is untouched). Prompt
    templates, the API key, the response cache and the data's auditable
    questions are checked too.
    """
    settings = plan.settings
    problem = report_dir_problem(settings.report_dir, settings.source("report-dir"))
    if problem and (settings.data or settings.uses_real_models):
        raise SettingsError(problem)
    if settings.prompts:
        settings.prompt_set()  # each template is test-formatted: a bad placeholder stops the run here
    problem = missing_key_problem(settings.all_models(), settings.base_url, plan.registries.providers)
    if problem and not settings.dry_run:  # a dry run costs nothing: it says so and goes on
        raise SettingsError(problem)
    if settings.uses_real_models:
        # the cache must take its first entry: a file in its place, or a directory that takes
        # no file, would otherwise fail the first reply after it was paid for (and the dry
        # run's look into the cache with a traceback)
        problem = cache_problem(plan.cache_dir)
        if problem:
            raise SettingsError(f"{settings.source('cache')}: {problem}" if settings.cache else problem)
    if settings.data:
        dataset = plan.data.dataset()  # a malformed file stops the run here, before any model call
        abstention, no_gold, auditable = data_auditable(dataset, settings.granularity)
        if not auditable:
            raise SettingsError(
                f"{dataset.path}: no question to audit: {len(dataset.questions)} questions, "
                f"{abstention} abstention, {no_gold} without gold evidence at {settings.granularity} granularity"
            )


def loaded_line(dataset: Dataset, *, forced: bool) -> str:
    """What the run says once the data file is read: which loader, and what it left out."""
    how = "as --restore-dataset asks" if forced else "picked from the file's shape"
    line = f"{Path(dataset.path).name} read as {dataset.name} ({how}): {len(dataset.questions)} questions"
    if dataset.excluded:
        line += f", {len(dataset.excluded)} left out (counted in the report)"
    repaired = sum(n for _, n in dataset.repairs)
    if repaired:
        line += f", {repaired} flawed evidence references handled by the loader's rule (by kind in the report)"
    return line
